"""The SageMaker API server's objects in the chart (templates/sagemaker-api.yaml), offline: on by default as
`<release>-sagemaker-api` on port 8080 with the operator's image, its selector apart from the operator's, its
settings reaching the process that reads them, and its rights: exactly reading ComputePools, getting one Secret (the
access keys', which its Service names for the CLI) in the release namespace only, and impersonating
ServiceAccounts, in the listed namespaces only when there are some."""

from __future__ import annotations

import json
from typing import Any

import pytest
from chartlib import NAMESPACE, RELEASE, by_kind, is_sagemaker_api

from kubepool.cli.sagemaker import KEYS_SECRET_ANNOTATION
from kubepool.sagemaker_api.__main__ import ENV, parse
from support.operator_cluster import wait_for

NAME = f"{RELEASE}-kubepool-sagemaker-api"
KEYS = f"{NAME}-keys"


def _mine(objs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in by_kind(objs, kind) if is_sagemaker_api(o)]


def _rules(objs: list[dict[str, Any]]) -> dict[tuple[str, str], set[str]]:
    out: dict[tuple[str, str], set[str]] = {}
    for role in _mine(objs, "ClusterRole") + _mine(objs, "Role"):
        for r in role["rules"]:
            for g in r["apiGroups"]:
                for res in r["resources"]:
                    out.setdefault((g, res), set()).update(r["verbs"])
    return out


def test_on_by_default(render: Any) -> None:
    objs = render(sagemaker_api=True)
    (deploy,) = _mine(objs, "Deployment")
    (operator,) = [d for d in by_kind(objs, "Deployment") if not is_sagemaker_api(d)]
    (svc,) = _mine(objs, "Service")
    assert deploy["metadata"]["name"] == svc["metadata"]["name"] == NAME
    assert svc["spec"]["ports"] == [{"name": "http", "port": 8080, "targetPort": "http", "protocol": "TCP"}]
    assert svc["spec"]["selector"] == deploy["spec"]["selector"]["matchLabels"]
    assert svc["spec"]["selector"] != operator["spec"]["selector"]["matchLabels"]  # never the operator's pods
    (container,) = deploy["spec"]["template"]["spec"]["containers"]
    assert container["image"] == operator["spec"]["template"]["spec"]["containers"][0]["image"]
    assert container["command"] == ["python", "-m", "kubepool.sagemaker_api"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/healthz"
    assert deploy["spec"]["template"]["spec"]["serviceAccountName"] == NAME
    assert [o["metadata"]["name"] for o in _mine(objs, "ServiceAccount")] == [NAME]
    assert not _mine(render("--set", "sagemakerApi.enabled=false", sagemaker_api=True), "Deployment")


def test_values_reach_the_server(render: Any, monkeypatch: Any) -> None:
    objs = render("--set", "sagemakerApi.port=9443", "--set", "sagemakerApi.s3EndpointUrl=http://minio:9000",
                  "--set", "sagemakerApi.s3CredentialsSecret=s3-keys", "--set", "sagemakerApi.tls.secretName=api-tls",
                  "--set", "sagemakerApi.namespaces={team-a,team-b}", sagemaker_api=True)
    (deploy,) = _mine(objs, "Deployment")
    (container,) = deploy["spec"]["template"]["spec"]["containers"]
    env = {e["name"].removeprefix(ENV): e["value"] for e in container["env"] if "value" in e}
    for k, v in env.items():
        monkeypatch.setenv(ENV + k, v)
    # The downward API gives it its pod's namespace: the release's.
    (keys_ns,) = [e for e in container["env"] if e["name"] == ENV + "KEYS_NAMESPACE"]
    assert keys_ns["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert deploy["metadata"]["namespace"] == NAMESPACE
    monkeypatch.setenv(ENV + "KEYS_NAMESPACE", NAMESPACE)
    ns = parse(container.get("args", []))  # what `python -m kubepool.sagemaker_api` reads
    assert (ns.port, ns.namespace, ns.s3_endpoint_url, ns.s3_credentials_secret, ns.keys_namespace, ns.keys_secret) == (
        9443, ["team-a", "team-b"], "http://minio:9000", "s3-keys", NAMESPACE, KEYS)
    assert (ns.tls_cert, ns.tls_key) == ("/etc/kubepool/tls/tls.crt", "/etc/kubepool/tls/tls.key")
    volumes = {v["name"]: v for v in deploy["spec"]["template"]["spec"]["volumes"]}
    assert volumes["tls"]["secret"]["secretName"] == "api-tls"
    assert container["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
    (svc,) = _mine(objs, "Service")
    assert svc["spec"]["ports"][0]["port"] == 9443


def test_least_rights(render: Any) -> None:
    objs = render(sagemaker_api=True)
    assert _rules(objs) == {("kubepool.dev", "computepools"): {"get", "list"}, ("", "secrets"): {"get"},
                            ("", "serviceaccounts"): {"impersonate"}}
    bindings = _mine(objs, "ClusterRoleBinding")
    assert {b["roleRef"]["name"] for b in bindings} == {NAME, f"{NAME}-pools"}
    assert all(s == {"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}
               for b in bindings + _mine(objs, "RoleBinding") for s in b["subjects"])
    # Secrets: one Role, in the release namespace, bound there; no cluster-wide role names them.
    (keys_role,) = [r for r in _mine(objs, "Role") if any("secrets" in x["resources"] for x in r["rules"])]
    assert keys_role["metadata"]["namespace"] == NAMESPACE
    # One Secret by name (RBAC takes no prefix): not the operator's nor any other Secret of the namespace. The
    # server reads it (its setting) and the CLI adds keys to it (the Service's annotation).
    assert [x.get("resourceNames") for x in keys_role["rules"] if "secrets" in x["resources"]] == [[KEYS]]
    (deploy,), (svc,) = _mine(objs, "Deployment"), _mine(objs, "Service")
    (container,) = deploy["spec"]["template"]["spec"]["containers"]
    assert {"name": ENV + "KEYS_SECRET", "value": KEYS} in container["env"]
    assert svc["metadata"]["annotations"][KEYS_SECRET_ANNOTATION] == KEYS
    assert not [r for r in _mine(objs, "ClusterRole") if any("secrets" in x["resources"] for x in r["rules"])]
    (keys_binding,) = [b for b in _mine(objs, "RoleBinding") if b["roleRef"]["name"] == keys_role["metadata"]["name"]]
    assert keys_binding["metadata"]["namespace"] == NAMESPACE and keys_binding["roleRef"]["kind"] == "Role"


def test_listed_namespaces_bind_the_key_rights_there_only(render: Any) -> None:
    for args in (["--set", "sagemakerApi.namespaces={team-a,team-b}"],
                 ["--set", "operator.watchNamespaces={team-a,team-b}"]):
        objs = render(*args, sagemaker_api=True)
        assert [b["roleRef"]["name"] for b in _mine(objs, "ClusterRoleBinding")] == [f"{NAME}-pools"]
        impersonation = [b for b in _mine(objs, "RoleBinding") if b["roleRef"]["name"] == NAME]
        assert sorted(b["metadata"]["namespace"] for b in impersonation) == ["team-a", "team-b"]
        assert {b["roleRef"]["name"] for b in _mine(objs, "RoleBinding")} == {NAME, f"{NAME}-keys"}


@pytest.mark.cluster
def test_the_servers_account_gets_the_keys_secret_and_no_other(render: Any, kubectl: Any, namespace: str) -> None:
    """The chart's keys Role and RoleBinding, as rendered, applied in a namespace of the test cluster: the API
    server (RBAC's authorizer) lets the SageMaker API server's ServiceAccount get the keys Secret, and no other
    Secret of the namespace (the operator's, a key Secret of the old one-per-key form), nor list or watch them."""
    rendered = render(sagemaker_api=True)
    objs = [o for o in _mine(rendered, "Role") + _mine(rendered, "RoleBinding") if o["metadata"]["name"] == KEYS]
    assert [o["kind"] for o in objs] == ["Role", "RoleBinding"], objs
    for o in objs:
        o["metadata"]["namespace"] = namespace
        for s in o.get("subjects") or []:
            s["namespace"] = namespace
        kubectl("apply", "-f", "-", input=json.dumps(o), check=True)
    who = f"system:serviceaccount:{namespace}:{NAME}"

    def may(verb: str, what: str) -> bool:
        return bool(kubectl("auth", "can-i", verb, what, "-n", namespace, "--as", who).stdout.strip() == "yes")

    wait_for(lambda: may("get", f"secrets/{KEYS}"), 30, f"the keys Role in force for {who}")
    for other in (f"secrets/{RELEASE}-kubepool", "secrets/sagemaker-key-kpaaaaaaaaaaaaaaaaaa", "secrets/s3-keys"):
        assert not may("get", other), other
    assert not may("list", "secrets") and not may("watch", "secrets")
    assert not may("update", f"secrets/{KEYS}") and not may("patch", f"secrets/{KEYS}")
