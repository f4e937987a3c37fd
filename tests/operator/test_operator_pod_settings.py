"""A job's pod settings take effect on the real cluster: env from a Secret and a ConfigMap and a file from a
mounted ConfigMap reach the payload (its log says so); a group's labels, annotations, priority class,
ServiceAccount, tolerations and affinity are on that group's pods only, and the scheduler obeys them (a tainted
node reached only through the group's toleration, a node the affinity excludes left alone); a ServiceAccount
that does not exist leaves the job PENDING saying why. The real operator, API server, scheduler and nodes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from kubepool import naming
from support.operator_cluster import Operator, get_json, mljob, wait_for, wait_phase

JOB_TIMEOUT_S = 180
PRIORITY = "kp-test-pod-settings"


def _apply(kubectl: Any, namespace: str, obj: dict[str, Any]) -> None:
    kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(obj), check=True)


def _pods(kubectl: Any, namespace: str, job: str) -> dict[str, dict[str, Any]]:
    items = get_json(kubectl, namespace, "pods", "-l", f"{naming.LABEL_JOB}={job}")["items"]
    return {p["metadata"]["labels"][naming.LABEL_GROUP]: p for p in items}


@pytest.fixture
def priority_class(kubectl: Any) -> Iterator[str]:
    obj = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": PRIORITY}, "value": 1000}
    kubectl("apply", "-f", "-", input=json.dumps(obj), check=True)
    yield PRIORITY
    kubectl("delete", "priorityclass", PRIORITY, "--wait=false")


def test_env_from_secret_and_configmap_and_a_mounted_file_reach_the_payload(
        kubectl: Any, namespace: str, operator: Operator, compute_pool: Any) -> None:
    ns, pool = namespace, compute_pool("cpu", max_nodes=1)
    _apply(kubectl, ns, {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db"}, "stringData": {"password": "s3cret-7"}})
    _apply(kubectl, ns, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"},
                         "data": {"mode": "fast-3", "app.conf": "threads=11"}})
    script = ("import os; print('seen:', os.environ['DB_PASSWORD'], os.environ['MODE'], os.environ['APP_mode'], "
              "open('/etc/app/app.conf').read())")
    job = mljob("settings", computePool=pool, mode="parallel", entrypoint={"command": ["python", "-c", script]},
                env=[{"name": "DB_PASSWORD", "valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}}},
                     {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "mode"}}}],
                envFrom=[{"configMapRef": {"name": "settings"}, "prefix": "APP_"}],
                volumes=[{"name": "config", "configMap": {"name": "settings"}}],
                volumeMounts=[{"name": "config", "mountPath": "/etc/app", "readOnly": True}])
    _apply(kubectl, ns, job)
    st = wait_phase(kubectl, ns, "settings", {"DONE", "FAILED"}, JOB_TIMEOUT_S, operator)
    assert st["phase"] == "DONE", json.dumps(st, indent=1)
    [head] = _pods(kubectl, ns, "settings").values()
    logs = kubectl("logs", "-n", ns, head["metadata"]["name"], check=True).stdout
    assert "seen: s3cret-7 fast-3 fast-3 threads=11" in logs, logs


def test_a_groups_settings_are_on_its_pods_only_and_the_scheduler_obeys_them(
        kubectl: Any, namespace: str, operator: Operator, compute_pool: Any, priority_class: str) -> None:
    ns = namespace
    pool = compute_pool("cpu", max_nodes=2, nodeSelector={})  # every node: the groups' own settings place them
    _apply(kubectl, ns, {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "trainer"}})
    on_gpu = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "kubepool.dev/node-pool", "operator": "In", "values": ["gpu"]}]}]}}}
    not_cpu1 = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "kubepool.dev/node-pool", "operator": "In", "values": ["cpu"]},
                              {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["cpu-node-1"]}]}]}}}
    groups = [
        {"name": "tuned", "computePool": pool, "instanceCount": 1, "affinity": on_gpu,
         # the gpu nodes' taint: without this toleration the group's pod could not run anywhere
         "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
         "podLabels": {"team": "research"}, "podAnnotations": {"example.com/owner": "ml"},
         "priorityClassName": priority_class, "serviceAccountName": "trainer"},
        {"name": "plain", "computePool": pool, "instanceCount": 1, "affinity": not_cpu1},
    ]
    job = mljob("groups", instanceGroups=groups, mode="parallel", podLabels={"app": "demo"},
                entrypoint={"command": ["python", "-c", "print('ok')"]})
    _apply(kubectl, ns, job)
    st = wait_phase(kubectl, ns, "groups", {"DONE", "FAILED"}, JOB_TIMEOUT_S, operator)
    assert st["phase"] == "DONE", json.dumps(st, indent=1)
    pods = _pods(kubectl, ns, "groups")
    tuned, plain = pods["tuned"], pods["plain"]
    assert tuned["spec"]["nodeName"].startswith("gpu-node-"), tuned["spec"]["nodeName"]
    assert plain["spec"]["nodeName"] in ("cpu-node-2", "cpu-node-3"), plain["spec"]["nodeName"]
    assert tuned["metadata"]["labels"]["team"] == "research" and "team" not in plain["metadata"]["labels"]
    assert tuned["metadata"]["labels"]["app"] == plain["metadata"]["labels"]["app"] == "demo"
    assert tuned["metadata"]["annotations"]["example.com/owner"] == "ml"
    assert "example.com/owner" not in (plain["metadata"].get("annotations") or {})
    assert (tuned["spec"]["priorityClassName"], tuned["spec"]["priority"]) == (priority_class, 1000)
    assert "priorityClassName" not in plain["spec"]
    assert tuned["spec"]["serviceAccountName"] == "trainer"
    assert plain["spec"]["serviceAccountName"] == naming.RUNTIME_ACCOUNT


def test_a_missing_service_account_is_said_not_waited_on(
        kubectl: Any, namespace: str, operator: Operator, compute_pool: Any) -> None:
    ns, pool = namespace, compute_pool("cpu", max_nodes=1)
    _apply(kubectl, ns, mljob("ghost", computePool=pool, mode="parallel", serviceAccountName="ghost",
                              entrypoint={"command": ["python", "-c", "print('ran')"]}))

    def refused() -> dict[str, Any] | None:
        st = get_json(kubectl, ns, "mljob", "ghost").get("status") or {}
        return st if st.get("reason") == "ApiRefused" else None

    st = wait_for(refused, 30, "the refusal in the job's status")
    assert st["phase"] == "PENDING" and 'serviceaccount "ghost" not found' in st["message"], st
    events = get_json(kubectl, ns, "events", "--field-selector", "involvedObject.name=ghost")["items"]
    assert any(e["reason"] == "ApiRefused" and 'serviceaccount "ghost" not found' in e["message"] for e in events), events
    # Once it exists, the job runs.
    _apply(kubectl, ns, {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "ghost"}})
    st = wait_phase(kubectl, ns, "ghost", {"DONE", "FAILED"}, JOB_TIMEOUT_S, operator)
    assert st["phase"] == "DONE", json.dumps(st, indent=1)
