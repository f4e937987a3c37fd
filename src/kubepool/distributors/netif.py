"""Which network interface carries a given IPv4 address, for GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME.

Gloo takes one concrete interface name (not an IP, not an exclusion list) and otherwise guesses from
gethostname(), which is wrong on loopback test nodes (127.0.6.x lives on `lo`) and in hostNetwork pods.
"""

from __future__ import annotations

import fcntl
import ipaddress
import socket
import struct
from collections.abc import Mapping

_SIOCGIFADDR = 0x8915
_SIOCGIFNETMASK = 0x891B


def pick_interface(ip: str, interfaces: Mapping[str, ipaddress.IPv4Interface]) -> str | None:
    """The interface whose address is `ip`, else the one with the most specific network containing it."""
    addr = ipaddress.IPv4Address(ip)
    exact = [name for name, itf in interfaces.items() if itf.ip == addr]
    if exact:
        return exact[0]
    containing = [(itf.network.prefixlen, name) for name, itf in interfaces.items() if addr in itf.network]
    return max(containing)[1] if containing else None


def ipv4_interfaces() -> dict[str, ipaddress.IPv4Interface]:
    """Primary IPv4 address and netmask of every interface that has one (Linux ioctls, no extra packages)."""
    out: dict[str, ipaddress.IPv4Interface] = {}
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _, name in socket.if_nameindex():
            req = struct.pack("256s", name.encode()[:15])
            try:
                ip = socket.inet_ntoa(fcntl.ioctl(s.fileno(), _SIOCGIFADDR, req)[20:24])
                mask = socket.inet_ntoa(fcntl.ioctl(s.fileno(), _SIOCGIFNETMASK, req)[20:24])
            except OSError:  # interface without IPv4
                continue
            out[name] = ipaddress.IPv4Interface(f"{ip}/{mask}")
    return out


def interface_for(ip: str) -> str | None:
    return pick_interface(ip, ipv4_interfaces())
