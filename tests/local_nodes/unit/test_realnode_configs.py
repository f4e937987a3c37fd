"""The real nodes' pure builders: addresses, CNI, containerd and kubelet configs, iptables rules, the pause image
archive, the Corefile (no cluster, no root)."""

from __future__ import annotations

import hashlib
import io
import ipaddress
import json
import tarfile
import tomllib
from pathlib import Path

import pytest
import yaml

from kubepool.local import nodeconfig
from kubepool.local.realnode import configs, dns, host, images, netpol
from kubepool.local.realnode.network import NetworkError, RealNet, cni_conflist, real_nodes_config
from kubepool.local.realnode.nodes import RealNode, RealNodeError, load


def test_slots_get_disjoint_ranges_that_never_meet_loopback_or_the_host() -> None:
    nets = [RealNet(s) for s in range(7)]
    pods = [n.pod_network for n in nets]
    for i, a in enumerate(pods):
        assert not any(a.overlaps(b) for b in pods[i + 1:])
        assert not a.overlaps(ipaddress.ip_network("127.0.0.0/8"))
        assert a.subnet_of(ipaddress.ip_network("198.18.0.0/15"))  # RFC 2544: never routed on the internet
    ips = {n.node_ip(i) for n in nets for i in (1, 30)}
    assert len(ips) == 14 and all(ipaddress.ip_address(ip) in ipaddress.ip_network("198.19.0.0/16") for ip in ips)
    net = RealNet(4)
    assert (net.bridge, str(net.pod_network), net.gateway) == ("kpbr4", "198.18.128.0/19", "198.18.128.1")
    assert (net.node_ip(1), net.pod_cidr(1)) == ("198.19.4.1", "198.18.129.0/24")
    assert ipaddress.ip_network(net.pod_cidr(30)).subnet_of(net.pod_network)


def test_process_node_slots_stay_clear_of_real_node_ranges() -> None:
    real = [RealNet(s).pod_network for s in range(7)]
    for slot in range(7):
        for node in yaml.safe_load(nodeconfig.slot_nodes_config(slot))["nodes"]:
            cidr = ipaddress.ip_network(node["podCIDR"])
            assert not any(cidr.overlaps(r) for r in real)


def test_check_node_refuses_addresses_outside_the_slot() -> None:
    net = RealNet(4)
    net.check_node("a", "198.19.4.2", "198.18.130.0/24")
    with pytest.raises(NetworkError, match="podCIDR"):
        net.check_node("a", "198.19.4.2", "10.244.0.0/24")
    with pytest.raises(NetworkError, match="gateway"):
        net.check_node("a", "198.19.4.2", "198.18.128.0/24")
    with pytest.raises(NetworkError, match="node range"):
        net.check_node("a", "198.19.3.2", "198.18.130.0/24")
    with pytest.raises(NetworkError):
        real_nodes_config(0, 4)


def test_real_nodes_carry_the_cpu_pool_labels_of_the_process_nodes(tmp_path: Path) -> None:
    path = tmp_path / "nodes.yaml"
    path.write_text(real_nodes_config(2, 4))
    nodes = load(path)
    default = yaml.safe_load(nodeconfig.DEFAULT_NODES_CONFIG.read_text())["nodes"][0]
    assert [n.name for n in nodes] == ["real-node-1", "real-node-2"]
    assert all(n.labels == default["labels"] and n.taints == [] for n in nodes)
    assert nodeconfig.node_process(path) == {"real-node-1": "kubelet-real-node-1", "real-node-2": "kubelet-real-node-2"}
    with pytest.raises(RealNodeError, match="capacity"):
        RealNode.from_dict({"name": "x", "kind": "kubelet", "ip": "198.19.4.1", "podCIDR": "198.18.129.0/24",
                            "capacity": {"cpu": "4"}})


def test_cni_gives_pods_the_bridge_and_the_kubernetes_service_only(tmp_path: Path) -> None:
    net = RealNet(4)
    conf = cni_conflist(net, "real-node-1", net.pod_cidr(1), tmp_path, "10.96.0.1")
    (bridge,) = conf["plugins"]
    assert (bridge["type"], bridge["bridge"], bridge["isGateway"], bridge["ipMasq"]) == ("bridge", "kpbr4", True, False)
    (rng,) = bridge["ipam"]["ranges"][0]
    assert rng["subnet"] == "198.18.128.0/19" and rng["gateway"] == "198.18.128.1"
    assert rng["rangeStart"] == "198.18.129.2" and rng["rangeEnd"] == "198.18.129.254"
    assert bridge["ipam"]["routes"] == [{"dst": "10.96.0.1/32"}]  # no default route
    assert bridge["ipam"]["dataDir"] == str(tmp_path)


def test_containerd_config_has_the_settings_this_machine_needs(tmp_path: Path) -> None:
    p = configs.NodePaths(tmp_path / "n1")
    doc = tomllib.loads(configs.containerd_config(p))
    assert doc["version"] == 2 and doc["root"] == str(p.containerd_root) and doc["state"] == str(p.containerd_state)
    assert doc["grpc"]["address"] == str(p.containerd_socket)
    cri = doc["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["restrict_oom_score_adj"] is True
    assert cri["sandbox_image"] == configs.PAUSE_IMAGE
    runc = cri["containerd"]["runtimes"]["runc"]
    assert runc["runtime_type"] == "io.containerd.runc.v2" and runc["options"]["SystemdCgroup"] is False
    assert cri["cni"]["conf_dir"] == str(p.cni_conf_dir)


def test_kubelet_config_and_flags(tmp_path: Path) -> None:
    p = configs.NodePaths(tmp_path / "n1")
    cfg = configs.kubelet_config(p, node_ip="198.19.4.1", ca_cert=tmp_path / "ca.crt", cluster_dns="198.18.128.1",
                                 cluster_domain="cluster.local", taints=[{"key": "k", "value": "v", "effect": "NoSchedule"}],
                                 cgroup=configs.cgroup_root(4, "n1"))
    assert cfg["failCgroupV1"] is False and cfg["cgroupDriver"] == "cgroupfs" and cfg["cgroupRoot"] == "/kubepool-4-n1"
    assert cfg["address"] == cfg["healthzBindAddress"] == "198.19.4.1"
    assert cfg["containerRuntimeEndpoint"] == f"unix://{p.containerd_socket}"
    assert cfg["clusterDNS"] == ["198.18.128.1"] and cfg["makeIPTablesUtilChains"] is False
    assert cfg["registerWithTaints"] == [{"key": "k", "value": "v", "effect": "NoSchedule"}]
    assert cfg["podLogsDir"] == str(p.pod_logs) and cfg["authentication"]["anonymous"]["enabled"] is False
    argv = configs.kubelet_args("kubelet", p, node="n1", node_ip="198.19.4.1", labels={"b": "2", "a": "1"})
    assert f"--containerd={p.containerd_socket}" in argv and "--node-ip=198.19.4.1" in argv
    assert "--node-labels=a=1,b=2" in argv and "--hostname-override=n1" in argv


def test_iptables_rules_send_the_kubernetes_service_to_the_apiserver_and_drop_forwarding() -> None:
    net = RealNet(4)
    rules = host.iptables_rules(net, "10.96.0.1", 16483)
    assert ("nat", "KUBEPOOL-RN4", ["-d", "10.96.0.1/32", "-p", "tcp", "--dport", "443", "-j", "DNAT",
                                    "--to-destination", "127.0.0.1:16483"]) in rules
    drops = [r for t, c, r in rules if t == "filter"]
    assert all(r[-2:] == ["-j", "DROP"] for r in drops) and len(drops) == 2
    assert {c for _, c, _ in host.jumps(net)} == {"PREROUTING", "FORWARD"}


def test_oci_archive_is_a_named_image_layout() -> None:
    data, digest = images.oci_archive("localhost/x:1", {"pause": (b"\x7fELF", 0o755)}, ["/pause"], "65535:65535")
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        files = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}  # type: ignore[union-attr]
    index = json.loads(files["index.json"])
    (entry,) = index["manifests"]
    assert entry["digest"] == digest and entry["annotations"]["io.containerd.image.name"] == "localhost/x:1"
    for name, blob in files.items():
        if name.startswith("blobs/sha256/"):
            assert hashlib.sha256(blob).hexdigest() == name.rsplit("/", 1)[1]
    manifest = json.loads(files[f"blobs/sha256/{digest.split(':')[1]}"])
    config = json.loads(files[f"blobs/sha256/{manifest['config']['digest'].split(':')[1]}"])
    assert config["config"]["Entrypoint"] == ["/pause"] and config["rootfs"]["diff_ids"] == [manifest["layers"][0]["digest"]]


def test_corefile_serves_the_cluster_domain_on_the_gateway_and_forwards_nothing(tmp_path: Path) -> None:
    text = dns.corefile(RealNet(4), kubeconfig=tmp_path / "kc", cluster_domain="cluster.local", ready_port=16321)
    assert "bind 198.18.128.1" in text and "kubernetes cluster.local in-addr.arpa ip6.arpa" in text
    assert "ready 127.0.0.1:16321" in text and "forward" not in text


def test_disk_check_asks_for_the_unpacked_images_and_a_margin(tmp_path: Path) -> None:
    assert images.disk_needed([]) == 0
    assert images.disk_needed([1 << 30]) == int(3.5 * (1 << 30)) + (2 << 30)
    huge = tmp_path / "huge.oci.tar"
    with huge.open("wb") as f:
        f.truncate(1 << 42)  # sparse: a 4 TiB archive on paper
    with pytest.raises(images.ImageError, match="GiB free on the filesystem"):
        images.check_disk(tmp_path, [("n1", huge)])
    images.check_disk(tmp_path, [])


def test_disk_check_counts_a_layer_that_images_share_once_per_node(tmp_path: Path) -> None:
    base = {"etc/a": (b"x" * 1000, 0o644)}
    archives = {}
    for name, files in (("lean", base), ("marked", {**base, "etc/marker": (b"m", 0o644)})):
        archives[name] = tmp_path / f"{name}.oci.tar"
        archives[name].write_bytes(images.oci_archive(f"x/{name}:1", files, ["/x"], "1000")[0])
    lean, marked = images.archive_layers(archives["lean"]), images.archive_layers(archives["marked"])
    assert len(lean) == len(marked) == 1 and lean != marked  # one-layer images: nothing shared
    shared = {"sha256:" + "a" * 64: 900, "sha256:" + "b" * 64: 100}
    on_top = {**shared, "sha256:" + "c" * 64: 5}
    assert sorted(images.layer_sizes([("n1", shared), ("n1", on_top), ("n2", shared), ("n2", on_top)])) == \
        [5, 5, 100, 100, 900, 900]


def test_a_refused_host_command_fails_naming_it_and_what_it_said() -> None:
    with pytest.raises(host.HostError, match=r"`sh -c echo refused by the kernel >&2; exit 3` failed \(exit 3\): refused by"):
        host.sh("sh", "-c", "echo refused by the kernel >&2; exit 3")
    with pytest.raises(host.HostError, match="no-such-tool is not installed"):
        host.sh("no-such-tool", "x")


def _pod(ns: str, name: str, ip: str, labels: dict[str, str], ports: list[dict[str, object]] | None = None) -> dict[str, object]:
    return {"metadata": {"namespace": ns, "name": name, "labels": labels},
            "spec": {"containers": [{"name": "c", "ports": ports or []}]}, "status": {"podIP": ip}}


def test_netpol_rules_isolate_selected_pods_and_allow_what_the_rules_name() -> None:
    net = RealNet(4)
    job = {"kubepool.dev/job-uid": "u1"}
    pods = [_pod("a", "head", "198.18.129.2", job, [{"name": "gcs", "containerPort": 6379}]),
            _pod("a", "worker", "198.18.130.2", job), _pod("a", "other", "198.18.129.3", {}),
            _pod("b", "intruder", "198.18.130.3", job)]
    own = {"matchLabels": job}
    pol = {"metadata": {"namespace": "a", "name": "p"},
           "spec": {"podSelector": own, "policyTypes": ["Ingress"], "ingress": [{"from": [{"podSelector": own}]}]}}
    r = [" ".join(x) for x in netpol.rules(net, [pol], pods, {"a": {}, "b": {}})]
    assert r[0] == "-m conntrack --ctstate ESTABLISHED,RELATED -j RETURN"
    # head and worker are isolated: each accepts the job's two pods of namespace a, rejects the rest
    assert r[1:] == [
        "-d 198.18.129.2 -s 198.18.129.2 -j RETURN", "-d 198.18.129.2 -s 198.18.130.2 -j RETURN", "-d 198.18.129.2 -j REJECT",
        "-d 198.18.130.2 -s 198.18.129.2 -j RETURN", "-d 198.18.130.2 -s 198.18.130.2 -j RETURN", "-d 198.18.130.2 -j REJECT",
    ]
    # named port, namespaceSelector, ipBlock with except
    pol2 = {"metadata": {"namespace": "a", "name": "q"}, "spec": {
        "podSelector": {"matchExpressions": [{"key": "kubepool.dev/job-uid", "operator": "Exists"}]},
        "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"team": "x"}}},
                              {"ipBlock": {"cidr": "10.0.0.0/24", "except": ["10.0.0.128/25"]}}],
                     "ports": [{"port": "gcs"}, {"port": 8265, "protocol": "TCP"}]}]}}
    r2 = [" ".join(x) for x in netpol.rules(net, [pol2], pods[:1] + pods[3:], {"a": {}, "b": {"team": "x"}})]
    assert "-d 198.18.129.2 -s 198.18.130.3 -p tcp --dport 6379 -j RETURN" in r2
    assert "-d 198.18.129.2 -s 10.0.0.0/25 -p tcp --dport 8265 -j RETURN" in r2
    assert not any("10.0.0.128" in x for x in r2)
    assert netpol.egress_ignored([pol, {"metadata": {"namespace": "a", "name": "e"}, "spec": {"egress": [{}]}}]) == ["a/e"]
    text = netpol.restore_input(net, netpol.rules(net, [pol], pods, {}))
    assert text.startswith("*filter\n:KUBEPOOL-RN4-NP - [0:0]\n-A KUBEPOOL-RN4-NP -m conntrack") and text.endswith("COMMIT\n")


def test_cidr_minus() -> None:
    assert netpol.cidr_minus("10.0.0.0/24", ["10.0.0.0/25"]) == ["10.0.0.128/25"]
    assert netpol.cidr_minus("10.0.0.0/24", []) == ["10.0.0.0/24"]
    assert netpol.cidr_minus("10.0.0.0/24", ["10.0.0.0/16"]) == []
