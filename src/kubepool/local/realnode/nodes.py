"""Bringing a local cluster's real nodes (`kind: kubelet` entries of its nodes config) up and down.

`up`: dependencies (hack/realnode/deps.sh), CoreDNS, the host side (`host.setup`), then per node its certs,
kubeconfig, containerd and kubelet configs and CNI conflist under `<state>/realnodes/<node>/`, containerd, the
images (pause, and what `make images` built), the kubelet. Processes are the control plane's `Component`s, so
`kubepool local status` shows them and a changed command line restarts them.

`down`: the nodes' pods are deleted through the API first (so their kubelets stop them: CNI teardown,
mounts), then kubelets, containerds and CoreDNS stop and `host.teardown` removes what is left.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from kubepool.local.components import control_plane
from kubepool.local.flags import kubeconfig
from kubepool.local.layout import ClusterError, Layout, Log, kube_version
from kubepool.local.nodeconfig import KUBELET_KIND
from kubepool.local.pki import issue_cert
from kubepool.local.processes import Component, alive, ensure, healthy, log_tail, stop
from kubepool.local.realnode import configs, dns, host, images
from kubepool.local.realnode.network import RealNet, cni_conflist

DEPS_SCRIPT = dns.COREDNS_SCRIPT.with_name("deps.sh")
SERVICE_IP = "10.96.0.1"  # the `kubernetes` Service's ClusterIP (first of the service CIDR)
CONTAINERD_START_TIMEOUT_S = 30.0


class RealNodeError(RuntimeError):
    """A real node could not be brought up or down; the message names the component and why."""


@dataclass(frozen=True)
class RealNode:
    """A `kind: kubelet` entry of the nodes config. Capacity is the host's, measured by the kubelet."""

    name: str
    ip: str
    pod_cidr: str
    labels: dict[str, str] = field(default_factory=dict)
    taints: list[dict[str, str]] = field(default_factory=list)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> RealNode:
        name = str(raw["name"])
        if "capacity" in raw:
            raise RealNodeError(f"node {name}: a kubelet node's capacity is the host's, measured by the kubelet; "
                                f"remove `capacity` (only process nodes declare it)")
        return cls(
            name=name, ip=str(raw["ip"]), pod_cidr=str(raw["podCIDR"]),
            labels={str(k): str(v) for k, v in (raw.get("labels") or {}).items()},
            taints=[{str(k): str(v) for k, v in t.items()} for t in (raw.get("taints") or [])],
        )


def load(nodes_yaml: Path) -> list[RealNode]:
    doc = yaml.safe_load(nodes_yaml.read_text()) or {}
    return [RealNode.from_dict(n) for n in doc.get("nodes") or [] if n.get("kind") == KUBELET_KIND]


def rn_dir(lay: Layout) -> Path:
    return lay.state_dir / "realnodes"


def paths(lay: Layout, node: str) -> configs.NodePaths:
    return configs.NodePaths(rn_dir(lay) / node)


def _slot(lay: Layout) -> int:
    return int(json.loads(lay.cluster_json.read_text()).get("slot", 0))


def _run_deps(say: Log) -> None:
    proc = subprocess.run(["bash", str(DEPS_SCRIPT)], capture_output=True, text=True)
    for line in (proc.stdout + proc.stderr).splitlines():
        say(f"  {line}")
    if proc.returncode != 0:
        raise RealNodeError(f"{DEPS_SCRIPT} failed (exit {proc.returncode})")


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
    path.chmod(mode)


def _prepare_node(lay: Layout, net: RealNet, slot: int, node: RealNode) -> configs.NodePaths:
    p = paths(lay, node.name)
    pki = lay.pki
    if not (p.serving_cert.exists() and p.serving_key.exists()):
        cert, key = issue_cert(pki.ca_cert, pki.ca_key, cn=f"system:node:{node.name}", orgs=("system:nodes",),
                               dns=(node.name,), ips=(node.ip,), server=True)
        _write(p.serving_key, key.decode(), 0o600)
        _write(p.serving_cert, cert.decode())
    if not p.kubeconfig.exists():
        cert, key = issue_cert(pki.ca_cert, pki.ca_key, cn=f"system:node:{node.name}", orgs=("system:nodes",),
                               client=True)
        cfg = kubeconfig(lay.apiserver_url, pki.ca_cert.read_bytes(), cert, key, f"system:node:{node.name}")
        _write(p.kubeconfig, yaml.safe_dump(cfg, sort_keys=False), 0o600)
    _write(p.containerd_config, configs.containerd_config(p))
    _write(p.cni_conf_dir / "10-kubepool.conflist",
           json.dumps(cni_conflist(net, node.name, node.pod_cidr, p.ipam_dir, SERVICE_IP), indent=2) + "\n")
    # Pods with dnsPolicy Default get this file: no upstream resolver (pods have no route off the machine).
    _write(p.resolv_conf, "# kubepool real node: pods resolve cluster names only (dnsPolicy ClusterFirst)\n")
    kcfg = configs.kubelet_config(
        p, node_ip=node.ip, ca_cert=pki.ca_cert, cluster_dns=net.dns_ip, cluster_domain=lay.cluster_domain,
        taints=node.taints, cgroup=configs.cgroup_root(slot, node.name),
    )
    _write(p.kubelet_config, yaml.safe_dump(kcfg, sort_keys=False))
    for d in (p.containerd_root, p.containerd_state, p.kubelet_root, p.pod_logs, p.ipam_dir):
        d.mkdir(parents=True, exist_ok=True)
    return p


def _wait_containerd(lay: Layout, node: str, p: configs.NodePaths) -> None:
    t0 = time.monotonic()
    while time.monotonic() - t0 < CONTAINERD_START_TIMEOUT_S:
        if not alive(lay, f"containerd-{node}"):
            break
        if p.containerd_socket.exists() and subprocess.run(
            ["ctr", f"--address={p.containerd_socket}", "version"], capture_output=True
        ).returncode == 0:
            return
        time.sleep(0.2)
    state = "running" if alive(lay, f"containerd-{node}") else "NOT RUNNING"
    raise RealNodeError(
        f"containerd of {node} does not answer on {p.containerd_socket} after {time.monotonic() - t0:.0f}s "
        f"({state}); last lines of {lay.log(f'containerd-{node}')}:\n{log_tail(lay, f'containerd-{node}')}"
    )


def up(lay: Layout, slot: int, image_names: tuple[str, ...], say: Log) -> list[str]:
    """Start the real nodes of `lay.nodes_yaml` (reusing running ones); return their names."""
    nodes = load(lay.nodes_yaml)
    keep = {f"{p}-{n.name}" for n in nodes for p in ("kubelet", "containerd")}
    for pid_file in sorted((lay.state_dir / "pids").glob("*.pid")):  # nodes removed from the config
        if pid_file.stem.startswith(("kubelet-", "containerd-")) and pid_file.stem not in keep:
            stop(lay, pid_file.stem, timeout=20.0)
            if pid_file.stem.startswith("kubelet-"):  # its Node would only turn NotReady
                lay.kubectl("delete", "node", pid_file.stem.removeprefix("kubelet-"), "--ignore-not-found")
            say(f"  {pid_file.stem}: stopped (node no longer configured)")
    if not nodes:
        return []
    net = RealNet(slot)
    for n in nodes:
        net.check_node(n.name, n.ip, n.pod_cidr)
    say(f"real nodes: {', '.join(n.name for n in nodes)} (pods on {net.pod_network}, bridge {net.bridge})")
    _run_deps(say)
    coredns = dns.ensure_binary(say)
    kubelet = Path(lay.bin("kubelet"))
    if not kubelet.exists():
        raise RealNodeError(f"{kubelet} is missing: hack/k8s-bin/build.sh builds it")
    cgroups = [configs.cgroup_root(slot, n.name) for n in nodes]
    host.setup(rn_dir(lay), net, [n.ip for n in nodes], cgroups, service_ip=SERVICE_IP,
               apiserver_port=lay.ports.apiserver, say=say)

    corefile = rn_dir(lay) / "Corefile"
    _write(corefile, dns.corefile(net, kubeconfig=lay.kubeconfig, cluster_domain=lay.cluster_domain,
                                  ready_port=lay.ports.coredns_ready))
    ensure(lay, [
        Component("coredns", dns.args(coredns, corefile), f"http://127.0.0.1:{lay.ports.coredns_ready}/ready"),
        Component("netpol", [sys.executable, "-m", "kubepool.local.realnode.netpol", "--state-dir", str(lay.state_dir)],
                  None),
    ], say)

    node_paths = {n.name: _prepare_node(lay, net, slot, n) for n in nodes}
    ensure(lay, [Component(f"containerd-{n.name}", configs.containerd_args("containerd", node_paths[n.name]), None)
                 for n in nodes], say)
    for n in nodes:
        _wait_containerd(lay, n.name, node_paths[n.name])

    wanted: list[tuple[str, Path, str]] = [("pause", *images.ensure_pause(kube_version(), say))]
    for name in image_names:
        found = images.built_image(name)
        if found is None:
            say(f"  image {name}: not built, not imported (hack/images/build.sh {name})")
        else:
            wanted.append((name, *found))
    missing = [(n, name, archive) for n in nodes for name, archive, digest in wanted
               if images.imported("ctr", node_paths[n.name].containerd_socket).get(_ref(name)) != digest]
    images.check_disk(rn_dir(lay), [(n.name, archive) for n, _, archive in missing])

    def import_all(n: RealNode) -> None:
        for name, archive, digest in wanted:
            images.import_image("ctr", node_paths[n.name].containerd_socket, n.name, _ref(name), archive, digest, say)

    t0 = time.monotonic()
    with ThreadPoolExecutor(max_workers=len(nodes)) as pool:  # the nodes' containerds unpack side by side
        list(pool.map(import_all, nodes))
    say(f"  images: {len(wanted)} present on {len(nodes)} node(s) after {time.monotonic() - t0:.0f}s")

    ensure(lay, [
        Component(
            f"kubelet-{n.name}",
            configs.kubelet_args(str(kubelet), node_paths[n.name], node=n.name, node_ip=n.ip, labels=n.labels),
            configs.kubelet_health_url(n.ip),
        )
        for n in nodes
    ], say)
    return [n.name for n in nodes]


def _ref(image: str) -> str:
    return configs.PAUSE_IMAGE if image == "pause" else images.KNOWN_IMAGES[image]


def _drain(lay: Layout, nodes: list[RealNode], say: Log, timeout_s: float = 90.0) -> None:
    """Delete every pod bound to the nodes and wait until their kubelets have stopped them, so CNI, mounts and
    cgroups are undone by their owners. NoExecute taints keep controllers' replacements off the nodes."""
    try:
        registered = set(lay.kubectl("get", "nodes", "-o", "name", timeout=20).split())
        names = [n.name for n in nodes if f"node/{n.name}" in registered]
        for n in names:
            lay.kubectl("taint", "node", n, "kubepool.dev/teardown:NoExecute", "--overwrite", timeout=20)
        for n in names:
            lay.kubectl("delete", "pods", "-A", f"--field-selector=spec.nodeName={n}", "--wait=false",
                        "--grace-period=2", timeout=30)
    except (ClusterError, subprocess.TimeoutExpired) as e:
        say(f"  real nodes: cannot reach the API to drain them ({e}); their pods are killed instead")
        return
    t0 = time.monotonic()
    left: list[str] = []
    while time.monotonic() - t0 < timeout_s:
        left = []
        for n in names:
            out = lay.kubectl("get", "pods", "-A", f"--field-selector=spec.nodeName={n}", "-o", "name", timeout=20)
            left += out.split()
        if not left:
            say(f"  real nodes: pods stopped by their kubelets in {time.monotonic() - t0:.1f}s")
            return
        time.sleep(1)
    say(f"  real nodes: {len(left)} pod(s) still there after {timeout_s:.0f}s ({', '.join(left[:5])}); killed instead")


def down(lay: Layout, say: Log) -> None:
    """Stop the real nodes and undo their host changes; a no-op without them."""
    d = rn_dir(lay)
    if not d.exists():
        return
    nodes = load(lay.nodes_yaml) if lay.nodes_yaml.exists() else []
    slot = _slot(lay)
    if nodes and healthy(lay, control_plane(lay)[1]):
        _drain(lay, nodes, say)
    for prefix in ("kubelet-", "containerd-"):
        for pid_file in sorted((lay.state_dir / "pids").glob(f"{prefix}*.pid")):
            if stop(lay, pid_file.stem, timeout=20.0):
                say(f"  {pid_file.stem}: stopped")
    for name in ("coredns", "netpol"):
        if stop(lay, name):
            say(f"  {name}: stopped")
    host.teardown(d, RealNet(slot), say)
