"""The real nodes' registry trust, as pure functions: containerd's config names the hosts directory, and the
hosts.toml written for a registry says https and the CA (the real-node release test pulls through it)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from kubepool.local.realnode import configs, registry


def test_containerd_reads_registry_hosts_from_the_clusters_hosts_dir(tmp_path: Path) -> None:
    paths = configs.NodePaths(tmp_path / "realnodes" / "real-node-1")
    cfg = tomllib.loads(configs.containerd_config(paths))
    cri = cfg["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["registry"]["config_path"] == str(tmp_path / "realnodes" / "certs.d")
    assert configs.NodePaths(tmp_path / "realnodes" / "real-node-2").registry_hosts_dir == paths.registry_hosts_dir


def test_trust_writes_https_with_the_ca(tmp_path: Path) -> None:
    toml = registry.trust(tmp_path, "127.0.0.1:5443", b"-----BEGIN CERTIFICATE-----\n")
    assert toml == tmp_path / "127.0.0.1:5443" / "hosts.toml"
    doc = tomllib.loads(toml.read_text())
    assert doc["server"] == "https://127.0.0.1:5443"
    host = doc["host"]["https://127.0.0.1:5443"]
    assert host["ca"] == str(tmp_path / "127.0.0.1:5443" / "ca.crt") and "pull" in host["capabilities"]
    assert (tmp_path / "127.0.0.1:5443" / "ca.crt").read_bytes().startswith(b"-----BEGIN")


@pytest.mark.parametrize("bad", ["https://reg", "reg/path", "a b", ""])
def test_trust_refuses_what_is_no_host(tmp_path: Path, bad: str) -> None:
    with pytest.raises(ValueError, match="host"):
        registry.trust(tmp_path, bad, b"")
