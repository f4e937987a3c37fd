"""Pod IP allocation from the node's podCIDR. Every pod gets its own loopback address (all of 127/8 is
loopback on Linux), so pods on one node can bind the same ports. The allocation of a pod is the `ip` file in
its pod dir: the directory listing is the allocation table, and it survives agent restarts."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from pathlib import Path

IP_FILE = "ip"


def next_free(cidr: str, used: Iterable[str], after: str | None = None) -> str:
    """The first host address of `cidr` not in `used`, searching from just after `after` and wrapping, so a
    freed address is not handed out again at once (its sockets may still be in TIME_WAIT)."""
    network = ipaddress.ip_network(cidr, strict=False)
    taken = set(used)
    hosts = (
        [h for h in network.hosts() if int(h) & 0xFF not in (0, 255)]
        if network.num_addresses <= 1 << 16
        else None
    )
    if hosts is None:
        raise ValueError(f"podCIDR {cidr} is larger than a /16")
    start = 0
    if after is not None and ipaddress.ip_address(after) in network:
        start = next((i + 1 for i, h in enumerate(hosts) if str(h) == after), 0)
    for i in range(len(hosts)):
        candidate = str(hosts[(start + i) % len(hosts)])
        if candidate not in taken:
            return candidate
    raise RuntimeError(f"podCIDR {cidr} is exhausted")


class Ipam:
    """File-backed allocator over the pod dirs of one node."""

    def __init__(self, cidr: str, pods_dir: Path) -> None:
        self.cidr = cidr
        self.pods_dir = pods_dir
        self._last: str | None = None

    def used(self) -> dict[str, str]:
        """uid → IP of every pod dir that holds an allocation."""
        out: dict[str, str] = {}
        if self.pods_dir.is_dir():
            for f in self.pods_dir.glob(f"*/{IP_FILE}"):
                out[f.parent.name] = f.read_text().strip()
        return out

    def ip_for(self, uid: str) -> str:
        """The pod's IP, allocating one on first use."""
        path = self.pods_dir / uid / IP_FILE
        if path.exists():
            return path.read_text().strip()
        ip = next_free(self.cidr, self.used().values(), self._last)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(ip)
        self._last = ip
        return ip
