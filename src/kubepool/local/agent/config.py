"""Node configuration (`nodes.yaml`), the cluster facts the agent needs (`cluster.json`, kubeconfig) and the
on-disk layout of a node's state under `<state-dir>/nodes/<node>/`."""

from __future__ import annotations

import ipaddress
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

KUBELET_PORT = 10250
DEFAULT_CLUSTER_DOMAIN = "cluster.local"


@dataclass(frozen=True)
class NodeConfig:
    """One entry of `nodes.yaml`."""

    name: str
    ip: str
    pod_cidr: str
    capacity: dict[str, str]
    labels: dict[str, str] = field(default_factory=dict)
    taints: list[dict[str, str]] = field(default_factory=list)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> NodeConfig:
        name = str(raw["name"])
        ip = str(ipaddress.ip_address(raw["ip"]))
        cidr = str(ipaddress.ip_network(raw["podCIDR"], strict=False))
        capacity = {str(k): str(v) for k, v in (raw.get("capacity") or {}).items()}
        capacity.setdefault("pods", "110")
        labels = {str(k): str(v) for k, v in (raw.get("labels") or {}).items()}
        taints = [{str(k): str(v) for k, v in t.items()} for t in (raw.get("taints") or [])]
        return cls(name=name, ip=ip, pod_cidr=cidr, capacity=capacity, labels=labels, taints=taints)


def load_nodes(path: Path) -> list[NodeConfig]:
    doc = yaml.safe_load(path.read_text()) or {}
    return [NodeConfig.from_dict(n) for n in doc.get("nodes") or []]


def find_node(path: Path, name: str) -> NodeConfig:
    for node in load_nodes(path):
        if node.name == name:
            return node
    raise KeyError(f"node {name!r} is not in {path}")


@dataclass(frozen=True)
class ClusterInfo:
    """What pods and the agent need to know about the control plane."""

    apiserver_host: str
    apiserver_port: int
    cluster_domain: str = DEFAULT_CLUSTER_DOMAIN

    @classmethod
    def load(cls, state_dir: Path) -> ClusterInfo:
        # The kubeconfig always names the apiserver; cluster.json only adds the domain.
        kubeconfig = yaml.safe_load((state_dir / "kubeconfig").read_text())
        server = urlsplit(kubeconfig["clusters"][0]["cluster"]["server"])
        domain = DEFAULT_CLUSTER_DOMAIN
        cluster_json = state_dir / "cluster.json"
        if cluster_json.exists():
            info = json.loads(cluster_json.read_text())
            domain = str(info.get("clusterDomain") or info.get("cluster_domain") or domain)
        return cls(
            apiserver_host=server.hostname or "127.0.0.1",
            apiserver_port=server.port or 443,
            cluster_domain=domain,
        )


@dataclass(frozen=True)
class Layout:
    """Paths of one node's state. Everything the agent writes lives under `root`."""

    state_dir: Path
    node: str

    @property
    def root(self) -> Path:
        return self.state_dir / "nodes" / self.node

    @property
    def pods(self) -> Path:
        return self.root / "pods"

    @property
    def kubeconfig(self) -> Path:
        return self.state_dir / "kubeconfig"

    @property
    def ca_cert(self) -> Path:
        return self.state_dir / "pki" / "ca.crt"

    @property
    def ca_key(self) -> Path:
        return self.state_dir / "pki" / "ca.key"

    @property
    def nodes_yaml(self) -> Path:
        return self.state_dir / "nodes.yaml"

    def pod_dir(self, uid: str) -> Path:
        return self.pods / uid


def venv_bin() -> str:
    """The bin dir of the Python running the agent: pods find `python` and the project's tools there first."""
    return str(Path(sys.executable).parent)


def image_paths() -> list[str]:
    """What a local node's pods run from, the "image": this Python's environment, everything on its import
    path (the checkout's src/ for an editable install, directories a .pth file adds) and the directory
    kubepool is imported from. The sandbox keeps them visible where they are, wherever the checkout lives."""
    import kubepool

    imports = [p for p in sys.path[1:] if os.path.isabs(p) and os.path.isdir(p)]  # [0]: the agent's cwd
    return [sys.prefix, sys.base_prefix, *imports, str(Path(kubepool.__file__).resolve().parents[1])]


def default_path() -> str:
    return f"{venv_bin()}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
