"""The control plane's command lines and config files, pure functions of a `Layout` (unit-tested as such)."""

from __future__ import annotations

import base64
import sys
from typing import Any

from kubepool.local.layout import Layout

AGENT_MODULE = "kubepool.local.agent"


def etcd_url(lay: Layout) -> str:
    return f"https://127.0.0.1:{lay.ports.etcd}"


def etcd_args(lay: Layout) -> list[str]:
    p = lay.pki
    peer = f"https://127.0.0.1:{lay.ports.etcd_peer}"
    client = etcd_url(lay)
    # TLS with client-cert auth on both ports: loopback is shared with every process of the host, and etcd
    # holds every Secret in the clear.
    tls = [f"--cert-file={p.cert('etcd')}", f"--key-file={p.key('etcd')}", f"--trusted-ca-file={p.ca_cert}",
           "--client-cert-auth=true"]
    peer_tls = [f"--peer-cert-file={p.cert('etcd')}", f"--peer-key-file={p.key('etcd')}",
                f"--peer-trusted-ca-file={p.ca_cert}", "--peer-client-cert-auth=true"]
    return [
        lay.bin("etcd"),
        "--name=local",
        f"--data-dir={lay.etcd_data}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=local={peer}",
        *tls,
        *peer_tls,
        # A throwaway test store: durability is not worth the fsync latency on a shared disk.
        "--unsafe-no-fsync=true",
        "--auto-compaction-retention=1",
        "--quota-backend-bytes=8589934592",
        "--max-request-bytes=10485760",  # large CRDs (KubeRay's are ~1 MiB)
        "--log-level=warn",
    ]


def apiserver_args(lay: Layout) -> list[str]:
    p = lay.pki
    return [
        lay.bin("kube-apiserver"),
        f"--etcd-servers={etcd_url(lay)}",
        f"--etcd-cafile={p.ca_cert}",
        f"--etcd-certfile={p.cert('apiserver-etcd-client')}",
        f"--etcd-keyfile={p.key('apiserver-etcd-client')}",
        "--bind-address=127.0.0.1",
        f"--secure-port={lay.ports.apiserver}",
        # Loopback advertise address: the endpoint reconciler rejects loopback endpoints, so turn it off.
        "--advertise-address=127.0.0.1",
        "--endpoint-reconciler-type=none",
        f"--tls-cert-file={p.cert('apiserver')}",
        f"--tls-private-key-file={p.key('apiserver')}",
        f"--client-ca-file={p.ca_cert}",
        f"--service-account-issuer=https://kubernetes.default.svc.{lay.cluster_domain}",
        f"--service-account-key-file={p.sa_pub}",
        f"--service-account-signing-key-file={p.sa_key}",
        f"--service-cluster-ip-range={lay.service_cidr}",
        "--authorization-mode=Node,RBAC",
        "--allow-privileged=true",
        f"--kubelet-client-certificate={p.cert('kubelet-client')}",
        f"--kubelet-client-key={p.key('kubelet-client')}",
        "--kubelet-preferred-address-types=InternalIP",
        # Node agents serve certs from the same CA with their InternalIP as SAN: verify them for real.
        f"--kubelet-certificate-authority={p.ca_cert}",
        f"--cert-dir={lay.state_dir / 'pki' / 'generated'}",
        # Room for scale tests (1000 pods from 100 fake nodes) on top of the defaults (400/200).
        "--max-requests-inflight=1000",
        "--max-mutating-requests-inflight=500",
    ]


def controller_manager_args(lay: Layout) -> list[str]:
    p = lay.pki
    return [
        lay.bin("kube-controller-manager"),
        f"--kubeconfig={lay.component_kubeconfig('controller-manager')}",
        "--bind-address=127.0.0.1",
        f"--secure-port={lay.ports.controller_manager}",
        "--leader-elect=false",  # a single instance: skip the lease wait on every restart
        "--use-service-account-credentials=true",
        f"--service-account-private-key-file={p.sa_key}",
        f"--root-ca-file={p.ca_cert}",
        f"--cluster-signing-cert-file={p.ca_cert}",
        f"--cluster-signing-key-file={p.ca_key}",
        f"--service-cluster-ip-range={lay.service_cidr}",
        "--cluster-name=kubepool-local",
        # Default client QPS (20) makes a 1000-replica Deployment take ~50 s just to create its pods.
        "--kube-api-qps=200",
        "--kube-api-burst=400",
        "--concurrent-replicaset-syncs=10",
    ]


def scheduler_config(lay: Layout) -> dict[str, Any]:
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {
            "kubeconfig": str(lay.component_kubeconfig("scheduler")),
            "qps": 200,
            "burst": 400,
        },
        "leaderElection": {"leaderElect": False},
    }


def scheduler_args(lay: Layout) -> list[str]:
    return [
        lay.bin("kube-scheduler"),
        f"--config={lay.scheduler_config}",
        "--bind-address=127.0.0.1",
        f"--secure-port={lay.ports.scheduler}",
    ]


def agent_args(lay: Layout, node: str) -> list[str]:
    return [sys.executable, "-m", AGENT_MODULE, "--state-dir", str(lay.state_dir), "--node", node]


def kubeconfig(server: str, ca_pem: bytes, cert_pem: bytes, key_pem: bytes, user: str) -> dict[str, Any]:
    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "kubepool-local", "cluster": {"server": server, "certificate-authority-data": b64(ca_pem)}}],
        "users": [{"name": user, "user": {"client-certificate-data": b64(cert_pem), "client-key-data": b64(key_pem)}}],
        "contexts": [{"name": "kubepool-local", "context": {"cluster": "kubepool-local", "user": user}}],
        "current-context": "kubepool-local",
    }

