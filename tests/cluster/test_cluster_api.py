"""The local control plane behaves like a real cluster: version, RBAC with ServiceAccount tokens, garbage
collection, CRDs with documented schemas."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import httpx
import pytest
import yaml

from kubepool.local import kwok, layout
from kubetest import Cluster, Kubectl

pytestmark = [pytest.mark.cluster, pytest.mark.api]


def _eventually(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out after {timeout:.0f}s waiting for {what}"
        time.sleep(0.3)


def test_apiserver_reports_the_pinned_version(kubectl: Kubectl) -> None:
    out = kubectl.json("version")
    assert layout.kube_version() == "v1.36.3"
    assert out["serverVersion"]["gitVersion"] == "v1.36.3"
    assert out["clientVersion"]["gitVersion"] == "v1.36.3"


def test_rbac_gates_a_service_account_token(cluster: Cluster, kubectl: Kubectl, namespace: str) -> None:
    kubectl("create", "serviceaccount", "reader", "-n", namespace, check=True)
    kubectl("create", "configmap", "cm1", "-n", namespace, "--from-literal=k=v", check=True)
    # `kubectl create token` goes through the TokenRequest API.
    token = kubectl("create", "token", "reader", "-n", namespace, "--duration=10m", check=True).stdout.strip()
    client = httpx.Client(
        base_url=cluster.layout.apiserver_url, verify=str(cluster.layout.pki.ca_cert),
        headers={"Authorization": f"Bearer {token}"}, timeout=10,
    )

    def list_cms(ns: str) -> int:
        return client.get(f"/api/v1/namespaces/{ns}/configmaps").status_code

    assert client.get("/api/v1/namespaces/default/configmaps").status_code == 403
    assert list_cms(namespace) == 403
    kubectl("create", "role", "cm-reader", "-n", namespace, "--verb=get,list", "--resource=configmaps", check=True)
    kubectl(
        "create", "rolebinding", "reader-cm", "-n", namespace, "--role=cm-reader",
        f"--serviceaccount={namespace}:reader", check=True,
    )
    _eventually(lambda: list_cms(namespace) == 200, 10, "the RoleBinding to take effect")
    names = [i["metadata"]["name"] for i in client.get(f"/api/v1/namespaces/{namespace}/configmaps").json()["items"]]
    assert "cm1" in names
    assert list_cms("default") == 403  # a Role grants nothing outside its namespace
    assert client.get("/api/v1/namespaces/default/configmaps").status_code == 403
    # Unauthenticated requests are rejected outright.
    anon = httpx.get(f"{cluster.layout.apiserver_url}/api/v1/namespaces/{namespace}/configmaps",
                     verify=str(cluster.layout.pki.ca_cert), timeout=10)
    assert anon.status_code in (401, 403)


def _deployment(name: str, replicas: int) -> str:
    """A Deployment whose pods land on kwok fake nodes only (nothing runs; kwok reports them Running)."""
    return json.dumps({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "nodeSelector": {"type": "kwok"},
                    "tolerations": [kwok.FAKE_TOLERATION],
                    "containers": [{"name": "c", "image": "fake.invalid/pause:1"}],
                },
            },
        },
    })


def _running(kubectl: Kubectl, namespace: str, selector: str) -> int:
    out = kubectl("get", "pods", "-n", namespace, "-l", selector, "--field-selector=status.phase=Running",
                  "-o", "name", check=True).stdout
    return len(out.split())


def test_garbage_collection_removes_replicasets_and_pods(cluster: Cluster, kubectl: Kubectl, namespace: str) -> None:
    kwok.ensure_fake_nodes(cluster.layout, 1)
    kubectl("apply", "-n", namespace, "-f", "-", input=_deployment("gc", 3), check=True)
    _eventually(lambda: _running(kubectl, namespace, "app=gc") == 3, 60, "3 Running pods")
    rs = kubectl("get", "rs", "-n", namespace, "-l", "app=gc", "-o", "name", check=True).stdout.split()
    assert len(rs) == 1

    kubectl("delete", "deployment", "gc", "-n", namespace, "--wait=false", check=True)

    def gone() -> bool:
        left = kubectl("get", "rs,pods", "-n", namespace, "-l", "app=gc", "-o", "name", check=True).stdout
        return not left.strip()

    _eventually(gone, 60, "the garbage collector to delete the ReplicaSet and its pods")


CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.test.kubepool.dev"},
    "spec": {
        "group": "test.kubepool.dev",
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
        "versions": [{
            "name": "v1",
            "served": True,
            "storage": True,
            "schema": {"openAPIV3Schema": {
                "type": "object",
                "description": "A Widget is a test resource.",
                "properties": {"spec": {
                    "type": "object",
                    "description": "Desired state of the widget.",
                    "properties": {"size": {"type": "integer", "minimum": 1,
                                            "description": "How many sprockets the widget has."}},
                }},
            }},
        }],
    },
}


def test_crd_applies_and_explain_shows_descriptions(kubectl: Kubectl, namespace: str) -> None:
    kubectl("apply", "-f", "-", input=yaml.safe_dump(CRD), check=True)
    try:
        kubectl.wait_established("widgets.test.kubepool.dev")
        # explain reads the published OpenAPI, which lags the Established condition by a moment.
        def explained() -> bool:
            out = kubectl("explain", "widgets.spec", "--api-version=test.kubepool.dev/v1").stdout
            return "How many sprockets the widget has." in out and "Desired state of the widget." in out

        _eventually(explained, 30, "kubectl explain to show the CRD's descriptions")
        widget = {"apiVersion": "test.kubepool.dev/v1", "kind": "Widget", "metadata": {"name": "w"},
                  "spec": {"size": 0}}
        bad = kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(widget))
        assert bad.returncode != 0 and "spec.size" in bad.stderr  # the schema is enforced
        widget["spec"] = {"size": 3}
        kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(widget), check=True)
    finally:
        kubectl("delete", "crd", "widgets.test.kubepool.dev", "--wait=false")
