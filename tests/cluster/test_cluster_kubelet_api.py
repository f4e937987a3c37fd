"""The apiserver reaches a node's kubelet API the way `kubectl logs` needs: at the node's InternalIP, verifying
the kubelet's serving cert against the cluster CA and presenting its own system:masters client cert.

The kubelet side is a minimal HTTPS server in this process (a cert from `issue_cert`, client certs required),
so this checks the control plane's half independently of the node agent."""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from kubepool.local.pki import create_ca, issue_cert
from kubetest import Cluster, Kubectl

pytestmark = pytest.mark.cluster
NODE_IP = "127.0.250.1"  # outside every configured node's address


class _Kubelet(BaseHTTPRequestHandler):
    peers: list[str] = []

    def do_GET(self) -> None:
        assert isinstance(self.connection, ssl.SSLSocket)
        self.peers.append(str((self.connection.getpeercert() or {}).get("subject")))
        body = f"log line from {self.path.split('?')[0]}\n".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # keep pytest output clean
        pass


@pytest.fixture
def fake_kubelet(request: pytest.FixtureRequest, cluster: Cluster, tmp_path: Path) -> Iterator[int]:
    """Serves on a free port of NODE_IP; `indirect` param "foreign" signs its cert with another CA."""
    pki = cluster.layout.pki
    ca_cert, ca_key = pki.ca_cert, pki.ca_key
    if getattr(request, "param", "") == "foreign":
        ca_cert, ca_key = tmp_path / "other-ca.crt", tmp_path / "other-ca.key"
        pem, key_pem = create_ca("not-the-cluster-ca")
        ca_cert.write_bytes(pem)
        ca_key.write_bytes(key_pem)
    cert, key = issue_cert(ca_cert, ca_key, cn="system:node:probe", orgs=("system:nodes",),
                           ips=(NODE_IP,), server=True)
    (tmp_path / "k.crt").write_bytes(cert)
    (tmp_path / "k.key").write_bytes(key)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(tmp_path / "k.crt", tmp_path / "k.key")
    ctx.load_verify_locations(pki.ca_cert)
    ctx.verify_mode = ssl.CERT_REQUIRED  # like a kubelet: only clients with a cluster-CA cert
    with socket.socket() as s:  # a free port on the node IP
        s.bind((NODE_IP, 0))
        port = int(s.getsockname()[1])
    server = ThreadingHTTPServer((NODE_IP, port), _Kubelet)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield port
    finally:
        server.shutdown()
        server.server_close()


def _probe_node(kubectl: Kubectl, port: int) -> str:
    node = f"kubelet-probe-{uuid.uuid4().hex[:6]}"
    kubectl("create", "-f", "-", check=True, input=json.dumps({
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": node},
        "spec": {"taints": [{"key": "kubepool.dev/probe", "effect": "NoSchedule"}]},
        "status": {
            "addresses": [{"type": "InternalIP", "address": NODE_IP}, {"type": "Hostname", "address": node}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": port}},
        },
    }))
    return node


def _logs(kubectl: Kubectl, namespace: str, port: int) -> subprocess.CompletedProcess[str]:
    node = _probe_node(kubectl, port)
    try:
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
               "spec": {"nodeName": node, "containers": [{"name": "c", "image": "fake.invalid/x:1"}]}}
        kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(pod), check=True)
        return kubectl("logs", "-n", namespace, "p", "-c", "c")
    finally:
        kubectl("delete", "pod", "p", "-n", namespace, "--force", "--grace-period=0")
        kubectl("delete", "node", node, "--wait=false")


def test_kubectl_logs_goes_through_verified_tls(kubectl: Kubectl, namespace: str, fake_kubelet: int) -> None:
    out = _logs(kubectl, namespace, fake_kubelet)
    assert out.returncode == 0, out.stderr
    assert out.stdout == f"log line from /containerLogs/{namespace}/p/c\n"
    assert "'commonName', 'kube-apiserver-kubelet-client'" in _Kubelet.peers[-1]


@pytest.mark.parametrize("fake_kubelet", ["foreign"], indirect=True)
def test_a_kubelet_cert_from_another_ca_is_rejected(kubectl: Kubectl, namespace: str, fake_kubelet: int) -> None:
    out = _logs(kubectl, namespace, fake_kubelet)
    assert out.returncode != 0
    assert "x509" in out.stderr or "certificate" in out.stderr, out.stderr
