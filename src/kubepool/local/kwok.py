"""Fake nodes for scale tests: the kwok controller and the `kwok-node-<i>` Node objects it simulates.

kwok only manages Nodes annotated `kwok.x-k8s.io/node=fake`, so it never touches the local agents' nodes. Pods
on fake nodes run nothing: kwok moves them through the stages listed in `STAGES` (copied by
hack/k8s-bin/build.sh next to the binaries, because kwok v0.8.0 no longer compiles in default stages).
Fake nodes carry the taint `kwok.x-k8s.io/node=fake:NoSchedule`, so only pods that tolerate it land there.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kubepool.local.layout import Layout

NAME = "kwok"
FAKE_ANNOTATION = "kwok.x-k8s.io/node"
STAGES = (
    "node/fast/node-initialize.yaml",
    "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "pod/fast/pod-ready.yaml",
    "pod/fast/pod-complete.yaml",
    "pod/fast/pod-delete.yaml",
)
FAKE_POD_CIDR = "10.244.0.0/16"
FAKE_NODE_IP = "10.255.0.1"  # not routable on purpose: nothing serves a kubelet API for fake nodes
FAKE_TOLERATION = {"key": FAKE_ANNOTATION, "operator": "Equal", "value": "fake", "effect": "NoSchedule"}


def stages_dir(lay: Layout) -> Path:
    return lay.bin_dir.parent / "kwok-stages"


def config_path(lay: Layout) -> Path:
    return lay.state_dir / "kwok.yaml"


def stages_config(lay: Layout) -> str:
    """The kwok `--config` file: the selected Stage documents, concatenated."""
    root = stages_dir(lay)
    missing = [s for s in STAGES if not (root / s).exists()]
    if missing:
        raise FileNotFoundError(f"kwok stages missing under {root}: {missing} (re-run hack/k8s-bin/build.sh)")
    return "---\n".join((root / s).read_text().rstrip("\n") + "\n" for s in STAGES)


def health_url(lay: Layout) -> str:
    return f"http://127.0.0.1:{lay.ports.kwok}/healthz"


def args(lay: Layout) -> list[str]:
    return [
        lay.bin("kwok"),
        f"--kubeconfig={lay.kubeconfig}",
        f"--config={config_path(lay)}",
        "--manage-all-nodes=false",
        f"--manage-nodes-with-annotation-selector={FAKE_ANNOTATION}=fake",
        f"--cidr={FAKE_POD_CIDR}",
        f"--node-ip={FAKE_NODE_IP}",
        "--node-lease-duration-seconds=40",
        f"--server-address=127.0.0.1:{lay.ports.kwok}",
    ]


def fake_node_name(i: int) -> str:
    return f"kwok-node-{i}"


def fake_node(i: int) -> dict[str, Any]:
    name = fake_node_name(i)
    resources = {"cpu": "32", "memory": "256Gi", "pods": "110"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {FAKE_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                "type": "kwok",
                "kubepool.dev/node-pool": "fake",
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
            },
        },
        "spec": {"taints": [{"key": FAKE_ANNOTATION, "value": "fake", "effect": "NoSchedule"}]},
        "status": {"capacity": resources, "allocatable": resources},
    }


def ensure_fake_nodes(lay: Layout, count: int) -> int:
    """Make sure kwok-node-0..count-1 exist; return how many were created."""
    existing = set(lay.kubectl("get", "nodes", "-l", "type=kwok", "-o", "name").split())
    todo = [fake_node(i) for i in range(count) if f"node/{fake_node_name(i)}" not in existing]
    if todo:
        # `create` keeps the status we send (capacity); kwok's node-initialize stage fills in the rest.
        lay.kubectl("create", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": todo}))
    return len(todo)

