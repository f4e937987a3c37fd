"""Unit tests of the local cluster's pure parts: flag builders, kubeconfigs, node configs (no cluster needed)."""

from __future__ import annotations

import dataclasses
import ipaddress
import json
from pathlib import Path

import pytest
import yaml

from kubepool.local import flags, kwok, layout, nodeconfig
from kubepool.local.layout import Layout, Ports


def _layout(tmp_path: Path, offset: int = 0) -> Layout:
    return Layout(tmp_path / "state", tmp_path / "cache" / "bin", Ports().shifted(offset))


def _flags(argv: list[str]) -> dict[str, str]:
    return dict(a[2:].split("=", 1) for a in argv[1:] if a.startswith("--") and "=" in a)


def test_apiserver_flags(tmp_path: Path) -> None:
    lay = _layout(tmp_path)
    argv = flags.apiserver_args(lay)
    f = _flags(argv)
    assert argv[0] == str(tmp_path / "cache" / "bin" / "kube-apiserver")
    assert f["authorization-mode"] == "Node,RBAC"
    assert f["advertise-address"] == "127.0.0.1" and f["endpoint-reconciler-type"] == "none"
    assert f["bind-address"] == "127.0.0.1" and f["secure-port"] == "16443"
    assert f["etcd-servers"] == "https://127.0.0.1:12379"
    assert f["etcd-cafile"] == str(lay.pki.ca_cert)
    assert f["etcd-certfile"].endswith("pki/apiserver-etcd-client.crt") and f["etcd-keyfile"].endswith(".key")
    assert f["kubelet-preferred-address-types"] == "InternalIP"
    assert f["kubelet-client-certificate"].endswith("pki/kubelet-client.crt")
    assert f["kubelet-certificate-authority"] == str(lay.pki.ca_cert)
    assert f["service-account-signing-key-file"].endswith("pki/sa.key")
    assert f["service-account-issuer"] == "https://kubernetes.default.svc.cluster.local"
    assert f["service-cluster-ip-range"] == "10.96.0.0/16"
    # Default admission (ServiceAccount included) stays on: nothing disables plugins.
    assert not any(a.startswith(("--disable-admission-plugins", "--admission-control")) for a in argv)


def test_etcd_serves_tls_to_clients_and_peers_with_certs_only(tmp_path: Path) -> None:
    lay = _layout(tmp_path)
    f = _flags(flags.etcd_args(lay))
    assert f["client-cert-auth"] == "true" and f["peer-client-cert-auth"] == "true"
    assert f["trusted-ca-file"] == f["peer-trusted-ca-file"] == str(lay.pki.ca_cert)
    assert all(f[k].startswith("https://") for k in ("listen-client-urls", "advertise-client-urls",
                                                     "listen-peer-urls", "initial-advertise-peer-urls"))


def test_ports_shift_together(tmp_path: Path) -> None:
    lay = _layout(tmp_path, offset=1000)
    assert _flags(flags.etcd_args(lay))["listen-client-urls"] == "https://127.0.0.1:13379"
    assert _flags(flags.apiserver_args(lay))["secure-port"] == "17443"
    assert _flags(flags.controller_manager_args(lay))["secure-port"] == "17257"
    assert _flags(flags.scheduler_args(lay))["secure-port"] == "17259"
    assert _flags(kwok.args(lay))["server-address"] == "127.0.0.1:17280"


def test_controller_manager_and_scheduler_use_their_own_identities(tmp_path: Path) -> None:
    lay = _layout(tmp_path)
    kcm = _flags(flags.controller_manager_args(lay))
    assert kcm["kubeconfig"] == str(lay.component_kubeconfig("controller-manager"))
    assert kcm["use-service-account-credentials"] == "true"
    cfg = flags.scheduler_config(lay)
    assert cfg["clientConnection"]["kubeconfig"] == str(lay.component_kubeconfig("scheduler"))
    assert cfg["leaderElection"] == {"leaderElect": False}


def test_cluster_json_round_trip(tmp_path: Path) -> None:
    lay = _layout(tmp_path, offset=7)
    lay.state_dir.mkdir(parents=True)
    lay.cluster_json.write_text(json.dumps(lay.to_json()))
    assert Layout.load(lay.state_dir) == lay
    raw = lay.to_json()
    assert raw["clusterDomain"] == "cluster.local" and raw["apiServer"] == "https://127.0.0.1:16450"


def test_kubeconfig_embeds_credentials() -> None:
    cfg = flags.kubeconfig("https://127.0.0.1:1", b"ca", b"crt", b"key", "admin")
    assert cfg["clusters"][0]["cluster"] == {"server": "https://127.0.0.1:1", "certificate-authority-data": "Y2E="}
    assert cfg["users"][0]["user"]["client-key-data"] == "a2V5"
    assert cfg["current-context"] == cfg["contexts"][0]["name"]


def test_default_nodes_config() -> None:
    nodes = yaml.safe_load(nodeconfig.DEFAULT_NODES_CONFIG.read_text())["nodes"]
    by_name = {n["name"]: n for n in nodes}
    assert sorted(by_name) == ["cpu-node-1", "cpu-node-2", "cpu-node-3", "gpu-node-1", "gpu-node-2"]
    assert by_name["cpu-node-2"]["ip"] == "127.0.1.2" and by_name["cpu-node-2"]["podCIDR"] == "127.102.0.0/16"
    gpu = by_name["gpu-node-2"]
    assert (gpu["ip"], gpu["podCIDR"]) == ("127.0.2.2", "127.112.0.0/16")
    assert gpu["capacity"]["nvidia.com/gpu"] == "1"
    assert gpu["labels"] == {"kubepool.dev/node-pool": "gpu", "node.kubernetes.io/instance-type": "GPU_NV_S"}
    assert gpu["taints"] == [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    assert all(n["taints"] == [] for n in nodes if n["name"].startswith("cpu-"))
    assert nodeconfig.load_node_names(nodeconfig.DEFAULT_NODES_CONFIG) == list(by_name)


def test_slots_move_the_nodes_apart_from_the_default_cluster() -> None:
    """Two clusters on one host share its loopback: slot N's nodes, pod ranges and ports never meet slot 0's."""
    default = yaml.safe_load(nodeconfig.DEFAULT_NODES_CONFIG.read_text())["nodes"]
    assert yaml.safe_load(nodeconfig.slot_nodes_config(0))["nodes"] == default
    seen_ips, seen_nets = set(), set()
    for slot in range(nodeconfig.MAX_SLOT + 1):
        nodes = yaml.safe_load(nodeconfig.slot_nodes_config(slot))["nodes"]
        assert [n["name"] for n in nodes] == [n["name"] for n in default]  # examples and tests name them
        assert [n["labels"] for n in nodes] == [n["labels"] for n in default]
        ips = {n["ip"] for n in nodes}
        nets = {ipaddress.ip_network(n["podCIDR"]) for n in nodes}
        assert not ips & seen_ips and not any(a.overlaps(b) for a in nets for b in seen_nets)
        assert all(ipaddress.ip_address(ip).is_loopback for ip in ips)
        assert all(n.subnet_of(ipaddress.ip_network("127.0.0.0/8")) for n in nets)  # type: ignore[arg-type]
        seen_ips |= ips
        seen_nets |= nets
    cpu1 = yaml.safe_load(nodeconfig.slot_nodes_config(1))["nodes"][0]
    assert (cpu1["ip"], cpu1["podCIDR"]) == ("127.0.11.1", "127.121.0.0/16")
    with pytest.raises(layout.ClusterError, match="out of range"):
        nodeconfig.slot_nodes_config(nodeconfig.MAX_SLOT + 1)


def test_slot_ports_never_meet_local_ray_ports() -> None:
    """Local jobs' instances share the host's ports: instance k shifts its per-node Ray ports by a per-job
    100..700 plus k·stride. No slot's control plane may listen on one of them (etcd's peer port once did)."""
    from kubepool.controller.builders.common import local_port_shift
    from kubepool.runtime.ray_node import node_ports

    stride = 3000  # what make demo, the chart test and the operator tests set (rayPortStride)
    job_shifts = {local_port_shift(f"uid-{i}", stride) for i in range(200)}
    assert job_shifts == {100, 200, 300, 400, 500, 600, 700}
    ray = {p for shift in job_shifts for k in range(8) for p in node_ports(shift + k * stride).values() if p}
    for slot in range(nodeconfig.MAX_SLOT + 1):
        ports = set(dataclasses.asdict(Ports().shifted(nodeconfig.SLOT_PORT_STRIDE * slot)).values())
        assert not ports & ray, (slot, sorted(ports & ray))


def test_kwok_flags_and_stages(tmp_path: Path) -> None:
    lay = _layout(tmp_path)
    f = _flags(kwok.args(lay))
    assert f["manage-nodes-with-annotation-selector"] == "kwok.x-k8s.io/node=fake"
    assert f["manage-all-nodes"] == "false"
    for i, stage in enumerate(kwok.STAGES):
        path = kwok.stages_dir(lay) / stage
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"kind: Stage\nmetadata: {{name: s{i}}}\n")
    docs = list(yaml.safe_load_all(kwok.stages_config(lay)))
    assert [d["metadata"]["name"] for d in docs] == [f"s{i}" for i in range(len(kwok.STAGES))]


def test_fake_node_is_tainted_and_labelled() -> None:
    node = kwok.fake_node(7)
    assert node["metadata"]["name"] == "kwok-node-7"
    assert node["metadata"]["annotations"]["kwok.x-k8s.io/node"] == "fake"
    assert {"type": "kwok", "kubepool.dev/node-pool": "fake"}.items() <= node["metadata"]["labels"].items()
    assert node["spec"]["taints"] == [{"key": "kwok.x-k8s.io/node", "value": "fake", "effect": "NoSchedule"}]
