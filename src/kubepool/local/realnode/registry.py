"""The real nodes pull from a registry of the user's (a mirror, the release tests' local registry): containerd's
registry host config, `<certs.d>/<host:port>/hosts.toml` naming the server and the CA its certificate is signed
by. containerd reads it at each pull, so trusting a registry needs no restart of the nodes."""

from __future__ import annotations

import json
import re
from pathlib import Path

_HOST = re.compile(r"^[A-Za-z0-9.-]+(:[0-9]{1,5})?$")


def hosts_toml(host: str, ca_file: Path) -> str:
    """containerd's hosts.toml for `host` (host[:port]) served over https with a certificate `ca_file` signed."""
    if not _HOST.match(host):
        raise ValueError(f"not a registry host[:port]: {host!r}")
    url = json.dumps(f"https://{host}")  # a TOML basic string is a JSON string for these values
    return (f"# kubepool real nodes: written by kubepool.local.realnode.registry\nserver = {url}\n\n"
            f"[host.{url}]\n  capabilities = [\"pull\", \"resolve\"]\n  ca = {json.dumps(str(ca_file))}\n")


def trust(hosts_dir: Path, host: str, ca_pem: bytes) -> Path:
    """Let the nodes whose containerd reads `hosts_dir` (configs.NodePaths.registry_hosts_dir) pull from `host`
    over https, verified with `ca_pem`; returns the hosts.toml written."""
    d = hosts_dir / host
    d.mkdir(parents=True, exist_ok=True)
    ca = d / "ca.crt"
    ca.write_bytes(ca_pem)
    toml = d / "hosts.toml"
    toml.write_text(hosts_toml(host, ca))
    return toml
