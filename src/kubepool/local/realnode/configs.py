"""containerd's and the kubelet's configuration of one real node, and their command lines (pure).

Every setting here that differs from the upstream default is one a feasibility run on this kind of machine
found necessary (docs/local-nodes.md, "Real nodes"): cgroup v1 with the cgroupfs driver, no CAP_SYS_RESOURCE
(containerd's restrict_oom_score_adj), a private containerd socket, per-node paths so several kubelets
share one host, and no image GC or disk eviction on a shared, mostly full disk.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubepool.local.realnode.network import CNI_BIN_DIR

# The pause image is built here (kubepool.local.realnode.images): nothing can be pulled.
PAUSE_IMAGE = "localhost/kubepool/pause:3.10.2"
KUBELET_HEALTHZ_PORT = 10248  # the kubelet's default, on healthzBindAddress


def kubelet_health_url(node_ip: str) -> str:
    return f"http://{node_ip}:{KUBELET_HEALTHZ_PORT}/healthz"


@dataclass(frozen=True)
class NodePaths:
    """Where one real node keeps its state: `<state-dir>/realnodes/<node>/`."""

    dir: Path

    @property
    def containerd_root(self) -> Path:
        return self.dir / "containerd" / "root"

    @property
    def containerd_state(self) -> Path:
        return self.dir / "containerd" / "state"

    @property
    def containerd_config(self) -> Path:
        return self.dir / "containerd" / "config.toml"

    @property
    def containerd_socket(self) -> Path:
        return self.dir / "containerd" / "containerd.sock"

    @property
    def registry_hosts_dir(self) -> Path:
        """containerd's registry host configs (`<host:port>/hosts.toml`), shared by the nodes of one cluster:
        kubepool.local.realnode.registry writes them; containerd reads them at each pull."""
        return self.dir.parent / "certs.d"

    @property
    def cni_conf_dir(self) -> Path:
        return self.dir / "cni" / "net.d"

    @property
    def ipam_dir(self) -> Path:
        return self.dir / "cni" / "ipam"

    @property
    def kubelet_root(self) -> Path:
        return self.dir / "kubelet"

    @property
    def kubelet_config(self) -> Path:
        return self.dir / "kubelet-config.yaml"

    @property
    def kubeconfig(self) -> Path:
        return self.dir / "kubelet.conf"

    @property
    def serving_cert(self) -> Path:
        return self.dir / "kubelet-serving.crt"

    @property
    def serving_key(self) -> Path:
        return self.dir / "kubelet-serving.key"

    @property
    def pod_logs(self) -> Path:
        return self.dir / "pod-logs"

    @property
    def resolv_conf(self) -> Path:
        return self.dir / "resolv.conf"


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return json.dumps(str(value))  # a TOML basic string is a JSON string for these values


def containerd_config(paths: NodePaths) -> str:
    """containerd 1.6's config (version 2) for one node: its own root, state, socket and CNI dir."""
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    tables: list[tuple[str, dict[str, Any]]] = [
        ("", {"version": 2, "root": paths.containerd_root, "state": paths.containerd_state}),
        ("grpc", {"address": paths.containerd_socket}),
        (cri, {
            "sandbox_image": PAUSE_IMAGE,
            # No CAP_SYS_RESOURCE in this kind of VM: without it runc cannot set a pod's OOM score lower
            # than its own, and every sandbox fails ("can't get final child's PID from pipe: EOF").
            "restrict_oom_score_adj": True,
            # exec/attach/port-forward: the kubelet proxies to this server, on loopback, any free port.
            "stream_server_address": "127.0.0.1",
            "stream_server_port": "0",
        }),
        (f"{cri}.containerd", {"snapshotter": "overlayfs", "default_runtime_name": "runc"}),
        (f"{cri}.containerd.runtimes.runc", {"runtime_type": "io.containerd.runc.v2"}),
        # cgroup v1 host without systemd as init: the cgroupfs driver, as the kubelet's.
        (f"{cri}.containerd.runtimes.runc.options", {"SystemdCgroup": False}),
        (f"{cri}.cni", {"bin_dir": CNI_BIN_DIR, "conf_dir": paths.cni_conf_dir}),
        # Registries the nodes pull from (their CA, https), as `kubepool.local.realnode.registry.trust` wrote them.
        (f"{cri}.registry", {"config_path": paths.registry_hosts_dir}),
        ('plugins."io.containerd.internal.v1.opt"', {"path": paths.dir / "containerd" / "opt"}),
    ]
    lines = ["# kubepool real node: written by `kubepool local up`, do not edit"]
    for name, values in tables:
        if name:
            lines += ["", f"[{name}]"]
        lines += [f"{k} = {_toml(v)}" for k, v in values.items()]
    return "\n".join(lines) + "\n"


def cgroup_root(slot: int, node: str) -> str:
    """The node's own cgroup (created by `host`): its pods' `kubepods` hierarchy lives under it, apart from
    another kubelet's on the same host."""
    return f"/kubepool-{slot}-{node}"


def kubelet_config(
    paths: NodePaths, *, node_ip: str, ca_cert: Path, cluster_dns: str, cluster_domain: str,
    taints: list[dict[str, str]], cgroup: str,
) -> dict[str, Any]:
    """The KubeletConfiguration of one node."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": node_ip,  # the API (10250) and healthz (10248) on the node's own IP: kubelets of one host
        "healthzBindAddress": node_ip,  # never clash
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(ca_cert)},
        },
        "authorization": {"mode": "Webhook"},
        "tlsCertFile": str(paths.serving_cert),
        "tlsPrivateKeyFile": str(paths.serving_key),
        "containerRuntimeEndpoint": f"unix://{paths.containerd_socket}",
        # cgroup v1 (hybrid) host: the kubelet refuses v1 unless told, and systemd is not the init here.
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": cgroup,
        "clusterDNS": [cluster_dns],
        "clusterDomain": cluster_domain,
        "resolvConf": str(paths.resolv_conf),
        "podLogsDir": str(paths.pod_logs),  # the kubelet removes pod log dirs it does not know: one per node
        "registerWithTaints": [dict(t) for t in taints],
        # The kubelet would otherwise create KUBE-* iptables chains on the host that nothing here needs.
        "makeIPTablesUtilChains": False,
        "failSwapOn": False,  # a host with swap would otherwise be refused
        # The images are imported, never pulled: image GC must not delete them, and a shared disk that is
        # 85% full must not mark the node DiskPressure and evict every pod.
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
    }


def kubelet_args(kubelet: str, paths: NodePaths, *, node: str, node_ip: str, labels: dict[str, str]) -> list[str]:
    argv = [
        kubelet,
        f"--config={paths.kubelet_config}",
        f"--kubeconfig={paths.kubeconfig}",
        f"--root-dir={paths.kubelet_root}",
        f"--hostname-override={node}",
        f"--node-ip={node_ip}",
        # The stats code dials containerd's default socket unless told (deprecated flag, still read in 1.36).
        f"--containerd={paths.containerd_socket}",
        "--v=1",
    ]
    if labels:
        argv.append("--node-labels=" + ",".join(f"{k}={v}" for k, v in sorted(labels.items())))
    return argv


def containerd_args(containerd: str, paths: NodePaths) -> list[str]:
    return [containerd, f"--config={paths.containerd_config}"]
