"""The addresses of a local cluster's real nodes, their pods' bridge and CNI config (pure).

Real nodes cannot live on loopback as process nodes do (the kubelet refuses a loopback node IP, and pod
addresses must be routable on a bridge), so they take ranges from 198.18.0.0/15 (RFC 2544, reserved for
benchmarking and never routed on the internet), which this project puts only on interfaces it creates:

    node IPs      198.19.<slot>.<i>/32 on `lo`            (the kubelet's address and serving-cert SAN)
    pod network   198.18.<32·slot>.0/19 on bridge kpbr<slot>, gateway .1 = cluster DNS
    node i's pods 198.18.<32·slot + i>.0/24 of it          (the Node's podCIDR, the host-local range)

Slots 0..6 get disjoint ranges, none of them 127/8 (process nodes) or the host's own networks. All nodes of a
cluster share one bridge, so pods of different nodes talk at layer 2 and nothing is routed; a pod's only
routes are its subnet and the `kubernetes` Service's ClusterIP, which `host` DNATs to the apiserver. Nothing
a pod sends can leave the machine (and `host` drops anything the kernel would forward off the bridge).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

POD_SPACE = ipaddress.ip_network("198.18.0.0/16")
NODE_SPACE = ipaddress.ip_network("198.19.0.0/16")
MAX_NODES = 30  # per cluster: /24s 1..30 of the slot's /19 (0 holds the gateway, 31 stays free)
CNI_BIN_DIR = "/usr/lib/cni"  # Debian's containernetworking-plugins
# The labels of the default process nodes' CPU pool, so examples/computepools.yaml selects real nodes too.
CPU_POOL_LABELS = {"kubepool.dev/node-pool": "cpu", "node.kubernetes.io/instance-type": "CPU_X64_S"}


class NetworkError(ValueError):
    """A real node's addresses do not fit the cluster's real-node network."""


@dataclass(frozen=True)
class RealNet:
    """The real-node network of the cluster in slot `slot` (0..6)."""

    slot: int

    def __post_init__(self) -> None:
        if not 0 <= self.slot <= 6:
            raise NetworkError(f"slot {self.slot} is out of range 0..6")

    @property
    def bridge(self) -> str:
        return f"kpbr{self.slot}"

    @property
    def pod_network(self) -> ipaddress.IPv4Network:
        return ipaddress.IPv4Network(f"198.18.{32 * self.slot}.0/19")

    @property
    def gateway(self) -> str:
        """The bridge's address: the pods' gateway and their DNS server."""
        return str(self.pod_network.network_address + 1)

    @property
    def dns_ip(self) -> str:
        return self.gateway

    def node_ip(self, index: int) -> str:
        """The `index`-th (1-based) node's IP."""
        self._check_index(index)
        return f"198.19.{self.slot}.{index}"

    def pod_cidr(self, index: int) -> str:
        self._check_index(index)
        return f"198.18.{32 * self.slot + index}.0/24"

    def _check_index(self, index: int) -> None:
        if not 1 <= index <= MAX_NODES:
            raise NetworkError(f"real node index {index} is out of range 1..{MAX_NODES}")

    def check_node(self, name: str, ip: str, pod_cidr: str) -> None:
        """Refuse a node whose addresses are outside this cluster's real-node ranges (they would be routed
        off the machine, or collide with another slot's)."""
        cidr = ipaddress.ip_network(pod_cidr, strict=False)
        if not (isinstance(cidr, ipaddress.IPv4Network) and cidr.subnet_of(self.pod_network)
                and cidr.network_address != self.pod_network.network_address):
            raise NetworkError(
                f"node {name}: podCIDR {pod_cidr} is not a /24 of the slot's pod network {self.pod_network} "
                f"(other than its first, which holds the gateway)"
            )
        slot_nodes = ipaddress.ip_network(f"198.19.{self.slot}.0/24")
        if ipaddress.ip_address(ip) not in slot_nodes or ip.endswith(".0") or ip.endswith(".255"):
            raise NetworkError(f"node {name}: ip {ip} is not a host address of the slot's node range {slot_nodes}")


def real_nodes_config(count: int, slot: int) -> str:
    """A nodes config of `count` kubelet nodes (real-node-1..N) with the CPU pool's labels: what
    `kubepool local up --real-nodes N` uses instead of the default process nodes."""
    if not 1 <= count <= MAX_NODES:
        raise NetworkError(f"--real-nodes {count}: between 1 and {MAX_NODES}")
    net = RealNet(slot)
    nodes = [
        {"name": f"real-node-{i}", "kind": "kubelet", "ip": net.node_ip(i), "podCIDR": net.pod_cidr(i),
         "labels": dict(CPU_POOL_LABELS), "taints": []}
        for i in range(1, count + 1)
    ]
    header = (f"# {count} real node(s): upstream kubelet on containerd (kubepool local up --real-nodes {count}, "
              f"slot {slot})\n")
    return header + yaml.safe_dump({"nodes": nodes}, sort_keys=False)


def cni_conflist(net: RealNet, node: str, pod_cidr: str, ipam_dir: Path, service_ip: str) -> dict[str, Any]:
    """The node's CNI network: a veth per pod on the cluster's bridge, an address from the node's podCIDR
    (host-local, its allocations under `ipam_dir`), routes to the pod network (on-link) and to the
    `kubernetes` Service only; no default route, no masquerade."""
    cidr = ipaddress.IPv4Network(pod_cidr)
    hosts = list(cidr.hosts())
    return {
        "cniVersion": "1.0.0",
        "name": f"kubepool-{node}",
        "plugins": [
            {
                "type": "bridge",
                "bridge": net.bridge,
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "dataDir": str(ipam_dir),
                    "ranges": [[{
                        "subnet": str(net.pod_network),
                        "rangeStart": str(hosts[1]),  # .1 of every /24 stays free
                        "rangeEnd": str(hosts[-1]),
                        "gateway": net.gateway,
                    }]],
                    "routes": [{"dst": f"{service_ip}/32"}],
                },
            },
        ],
    }
