"""The local cluster's own endpoints admit only the client they serve: etcd only clients with a cert of the
cluster CA (the apiserver's), a process node's kubelet API (`kubectl logs`) only the apiserver's kubelet-client
identity. A cert of the same CA under another name (here the admin's, system:masters) is refused."""

from __future__ import annotations

import ssl
import time
import uuid

import httpx
import pytest
import yaml

from kubepool.local import components, processes
from kubepool.local.agent.config import KUBELET_PORT
from kubetest import Cluster, Kubectl

pytestmark = pytest.mark.cluster


def _tls(cluster: Cluster, client: str | None) -> ssl.SSLContext:
    pki = cluster.layout.pki
    ctx = ssl.create_default_context(cafile=str(pki.ca_cert))
    if client is not None:
        ctx.load_cert_chain(str(pki.cert(client)), str(pki.key(client)))
    return ctx


def _get(url: str, verify: ssl.SSLContext | bool) -> int | str:
    """The status code, or the name of the error when no HTTP answer came (a refused TLS handshake)."""
    try:
        return httpx.get(url, verify=verify, timeout=10).status_code
    except (httpx.HTTPError, ssl.SSLError, OSError) as e:
        return type(e).__name__


def test_etcd_refuses_clients_without_a_cluster_cert(cluster: Cluster) -> None:
    port = cluster.layout.ports.etcd
    health = f"https://127.0.0.1:{port}/health"
    assert _get(health, _tls(cluster, "apiserver-etcd-client")) == 200  # the apiserver's identity gets in
    refused = _get(health, _tls(cluster, None))
    assert not isinstance(refused, int), f"etcd answered {refused} to a client without a cert"
    plain = _get(f"http://127.0.0.1:{port}/health", True)
    assert plain != 200, "etcd answered plain HTTP"
    # The v3 KV API through the gRPC gateway: what a thief of Secrets would call.
    kv = httpx.Client(verify=_tls(cluster, None), timeout=10)
    with pytest.raises((httpx.HTTPError, ssl.SSLError, OSError)):
        kv.post(f"https://127.0.0.1:{port}/v3/kv/range", json={"key": "L3JlZ2lzdHJ5"})  # "/registry"
    assert processes.healthy(cluster.layout, components.control_plane(cluster.layout)[0])  # `up`'s own check


def _hello_pod(kubectl: Kubectl, namespace: str) -> tuple[str, str]:
    """A finished pod's name and the InternalIP of its process node."""
    name = f"hello-{uuid.uuid4().hex[:5]}"
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
           "spec": {"restartPolicy": "Never", "nodeSelector": {"kubepool.dev/node-pool": "cpu"},
                    "containers": [{"name": "main", "image": "kubepool/runtime:dev",
                                    "command": ["python", "-c", "print('hello')"]}]}}
    kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(pod), check=True)
    deadline = time.monotonic() + 90
    while (got := kubectl.json("get", "pod", name, "-n", namespace))["status"].get("phase") != "Succeeded":
        assert time.monotonic() < deadline, got["status"]
        time.sleep(0.5)
    node = kubectl.json("get", "node", got["spec"]["nodeName"])
    return name, next(a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP")


def test_node_log_api_serves_the_apiserver_alone(cluster: Cluster, kubectl: Kubectl, namespace: str) -> None:
    name, node_ip = _hello_pod(kubectl, namespace)
    assert kubectl("logs", name, "-n", namespace, check=True).stdout.strip() == "hello"  # through the apiserver
    url = f"https://{node_ip}:{KUBELET_PORT}/containerLogs/{namespace}/{name}/main"
    as_apiserver = _get(url, _tls(cluster, "kubelet-client"))
    assert as_apiserver == 200, f"the apiserver's own identity was refused ({as_apiserver})"
    admin = _get(url, _tls(cluster, "admin"))  # same CA, system:masters, but not the apiserver
    assert admin == 403, f"another client of the cluster CA read the logs ({admin})"
    anonymous = _get(url, _tls(cluster, None))
    assert not isinstance(anonymous, int), f"a client without a cert got {anonymous}"
