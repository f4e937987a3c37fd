"""Cluster DNS of the real nodes: CoreDNS (built from its Go module by hack/realnode/coredns.sh) on the host,
listening on the pods' gateway address, with the `kubernetes` plugin answering from the apiserver.

It serves what a cluster's DNS serves for pods: Services (`<svc>.<ns>.svc.<domain>`), headless Services' pods
(`<hostname>.<subdomain>.<ns>.svc.<domain>`, so a job's `algo-N` names resolve with its search path), reverse
lookups. Nothing else is forwarded: pods have no route off the machine. Process nodes do not use it (their
pods get names through /etc/hosts).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from kubepool.local.buildscript import run_build_script
from kubepool.local.realnode.network import RealNet

COREDNS_SCRIPT = Path(__file__).resolve().parents[4] / "hack" / "realnode" / "coredns.sh"


class DnsError(RuntimeError):
    """CoreDNS could not be built."""


def corefile(net: RealNet, *, kubeconfig: Path, cluster_domain: str, ready_port: int) -> str:
    """The Corefile (pure). `ready` answers 200 on 127.0.0.1:`ready_port` once the API is synced."""
    return "\n".join([
        ".:53 {",
        f"    bind {net.dns_ip}",
        "    errors",
        f"    ready 127.0.0.1:{ready_port}",
        f"    kubernetes {cluster_domain} in-addr.arpa ip6.arpa {{",
        f"        kubeconfig {kubeconfig}",
        "        pods insecure",
        "        fallthrough in-addr.arpa ip6.arpa",
        "        ttl 5",
        "    }",
        "    loadbalance",
        "}",
        "",
    ])


def args(coredns: Path, corefile_path: Path) -> list[str]:
    return [str(coredns), "-conf", str(corefile_path)]


def ensure_binary(say: Callable[[str], None]) -> Path:
    """Build (or find cached) CoreDNS, relaying the build's progress; return the binary."""
    return run_build_script(COREDNS_SCRIPT, say, DnsError)
