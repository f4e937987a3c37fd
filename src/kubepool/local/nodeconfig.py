"""The local nodes' config (nodes.yaml): the default one, its addresses for each slot (a cluster beside the
default one), and which process runs each node."""

from __future__ import annotations

from pathlib import Path

import yaml

from kubepool.local.layout import ClusterError

DEFAULT_NODES_CONFIG = Path(__file__).with_name("nodes.yaml")
KUBELET_KIND = "kubelet"  # a real node's `kind`: an upstream kubelet (kubepool.local.realnode); else a node agent

# Slot N's ports are the default ones + 10·N: they stay in the gaps between the Ray port windows of local jobs'
# instances (instance k takes ~6480-7083 and ~8180-8780 shifted by 3000·k), as the default ports do.
SLOT_PORT_STRIDE = 10
MAX_SLOT = 6  # slot 6 ends at 127.232.0.0/16; the bench keeps 127.0.9.x and 127.24x for itself


def slot_nodes_config(slot: int, base: Path = DEFAULT_NODES_CONFIG) -> str:
    """`base`'s nodes on addresses of their own for the `slot`-th cluster beside the default one (slot 0):
    node IPs move by 10·slot in the third octet, pod ranges by 20·slot in the second, so two clusters'
    kubelet endpoints, pods and Ray ports never meet on the host's shared loopback."""
    if not 0 <= slot <= MAX_SLOT:
        raise ClusterError(f"slot {slot} is out of range 0..{MAX_SLOT}")
    doc = yaml.safe_load(base.read_text()) or {}
    for node in doc.get("nodes") or []:
        a, b, c, d = str(node["ip"]).split(".")
        node["ip"] = f"{a}.{b}.{int(c) + 10 * slot}.{d}"
        net, prefix = str(node["podCIDR"]).split("/")
        a, b, c, d = net.split(".")
        node["podCIDR"] = f"{a}.{int(b) + 20 * slot}.{c}.{d}/{prefix}"
    return yaml.safe_dump(doc, sort_keys=False)



def load_node_names(path: Path) -> list[str]:
    doc = yaml.safe_load(path.read_text()) or {}
    return [str(n["name"]) for n in doc.get("nodes") or []]


def node_process(path: Path) -> dict[str, str]:
    """node -> the process that runs it: `agent-<node>` (process node) or `kubelet-<node>` (`kind: kubelet`)."""
    doc = yaml.safe_load(path.read_text()) or {}
    return {
        str(n["name"]): f"{'kubelet' if n.get('kind') == KUBELET_KIND else 'agent'}-{n['name']}"
        for n in doc.get("nodes") or []
    }

