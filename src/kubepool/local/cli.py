"""`kubepool local up|down|status`: the command line of the local cluster (argument parsing only).

Environment defaults, so that a second cluster (e.g. one test session's own) needs no flags:
KUBEPOOL_STATE_DIR (--state-dir), KUBEPOOL_SLOT (--slot), KUBEPOOL_PORT_OFFSET (--port-offset),
KUBEPOOL_NODES_CONFIG (--nodes-config).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from kubepool.local import controlplane
from kubepool.local.layout import ClusterError, default_state_dir
from kubepool.local.nodeconfig import DEFAULT_NODES_CONFIG, MAX_SLOT, SLOT_PORT_STRIDE
from kubepool.local.realnode.images import DEFAULT_IMAGES, KNOWN_IMAGES


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kubepool local", description="The local Kubernetes cluster.")
    sub = p.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--state-dir", type=Path, default=default_state_dir(),
        help="where the cluster keeps its state (default: %(default)s)",
    )
    up = sub.add_parser("up", parents=[common], help="start the cluster, or reuse/repair a running one")
    up.add_argument("--fake-nodes", type=int, default=0, metavar="N", help="also create N kwok fake nodes")
    up.add_argument(
        "--real-nodes", type=int, default=0, metavar="N",
        help="N real nodes (upstream kubelet on containerd, pods in containers; needs root) instead of the "
        "process nodes; docs/local-nodes.md",
    )
    up.add_argument(
        "--real-node-images", default=",".join(DEFAULT_IMAGES), metavar="LIST",
        help=f"images of `make images` imported into each real node (of {', '.join(KNOWN_IMAGES)}; "
        "default: %(default)s; the full runtime image is 7 GB unpacked per node)",
    )
    up.add_argument(
        "--nodes-config", type=Path, default=os.environ.get("KUBEPOOL_NODES_CONFIG") or None, metavar="FILE",
        help=f"local node config (default: the running cluster's, else {DEFAULT_NODES_CONFIG})",
    )
    up.add_argument(
        "--slot", type=int, default=int(os.environ.get("KUBEPOOL_SLOT") or 0), metavar="N",
        help=f"run as the N-th cluster (1..{MAX_SLOT}) beside the default one (0): its own ports "
        f"(+{SLOT_PORT_STRIDE}·N) and node addresses; `make test` uses slot 1",
    )
    up.add_argument(
        "--port-offset", type=int, default=int(os.environ.get("KUBEPOOL_PORT_OFFSET") or 0), metavar="K",
        help="shift every port by K instead of the slot's offset",
    )
    sub.add_parser("down", parents=[common], help="stop every process the cluster started and remove its state")
    sub.add_parser("status", parents=[common], help="print each component's state")
    return p


def _say(line: str) -> None:
    print(line, flush=True)


def main(argv: list[str] | None = None) -> int:
    ns = _parser().parse_args(argv)
    try:
        if ns.command == "up":
            images = tuple(i for i in ns.real_node_images.split(",") if i)
            unknown = [i for i in images if i not in KNOWN_IMAGES]
            if unknown:
                raise ClusterError(f"--real-node-images: unknown {', '.join(unknown)} "
                                                f"(known: {', '.join(KNOWN_IMAGES)})")
            controlplane.up(
                ns.state_dir, nodes_config=ns.nodes_config, fake_nodes=ns.fake_nodes, real_nodes=ns.real_nodes,
                real_node_images=images, port_offset=ns.port_offset, slot=ns.slot, say=_say,
            )
            return 0
        if ns.command == "down":
            controlplane.down(ns.state_dir, say=_say)
            return 0
        return controlplane.status(ns.state_dir, say=_say)
    except ClusterError as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main())
