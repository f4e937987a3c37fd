"""The operator end to end on the local cluster: real pods running the real runtime (Ray), capacity and
queueing, the min-instances gate and its timeout, head failure, deletion, and an operator restart mid-job.
Each test has its own namespace and pools; the operator watches only that namespace."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubepool import contract, naming
from kubepool.api.kuberay import RAYCLUSTER_CRD
from kubepool.local import kwok
from kubetest import Kubectl
from support.operator_cluster import GATE_S, JOB_WAIT_S, ROOT, Operator, get_json, mljob, wait_for, wait_phase
from support.spare_cluster import spare_cluster

JOB_TIMEOUT_S = JOB_WAIT_S
PAYLOAD = {
    "ok.py": "import socket\nprint('hello from', socket.gethostname())\n__return__ = 42\n",
    # Runs until the instances' joined probes (every 2 s, slower on a loaded machine) have shown RUNNING.
    "ok-seen-running.py": "import socket, time\ntime.sleep(10)\nprint('hello from', socket.gethostname())\n__return__ = 42\n",
    "sleep.py": "import sys, time\ntime.sleep(float(sys.argv[1]))\nprint('slept')\n",
    "fail.py": "raise ValueError('boom-42 from the head')\n",
}


@pytest.fixture
def payload(kubectl: Any, namespace: str) -> str:
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "payload"}, "data": PAYLOAD}
    kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(cm), check=True)
    return "payload"


def spec(pool: str, file: str = "ok.py", *args: str, **extra: Any) -> dict[str, Any]:
    return {"computePool": pool, "entrypoint": {"file": file}, "args": list(args), "code": {"configMap": "payload"},
            "instancesTimeoutSeconds": GATE_S, **extra}


def pods_of(kubectl: Any, namespace: str, job: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = get_json(kubectl, namespace, "pods", "-l", f"{naming.LABEL_JOB}={job}")["items"]
    return items


def events_of(kubectl: Any, namespace: str, job: str) -> list[str]:
    out = get_json(kubectl, namespace, "events", "--field-selector", f"involvedObject.name={job}")
    return [e["reason"] for e in out["items"]]


def blocker(apply: Callable[[dict[str, Any]], None], pool: str, n: int) -> dict[str, Any]:
    """A tiny pod labelled as an instance of `pool`: the pool's anti-affinity keeps instances off its node."""
    term = {"labelSelector": {"matchLabels": {naming.LABEL_POOL: pool}}, "namespaceSelector": {},
            "topologyKey": "kubernetes.io/hostname"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"blocker-{n}", "labels": {naming.LABEL_POOL: pool}},
            "spec": {"nodeSelector": {"kubepool.dev/node-pool": "cpu"}, "restartPolicy": "Never",
                     "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}},
                     "containers": [{"name": "sleep", "image": "local", "command": ["python", "-c", "import time; time.sleep(900)"],
                                     "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}}


def scene(kubectl: Any, namespace: str) -> str:
    """Where every pod of the namespace ran, and its events: what a scheduling failure is read from."""
    pods = kubectl("get", "pods", "-n", namespace, "-o", "wide", "--show-labels").stdout
    events = kubectl("get", "events", "-n", namespace, "--sort-by=.lastTimestamp").stdout
    return f"\n--- pods:\n{pods}\n--- events:\n{events[-6000:]}"


def run_blockers(kubectl: Any, apply: Callable[[dict[str, Any]], None], namespace: str, pool: str, count: int) -> None:
    for i in range(count):
        apply(blocker(apply, pool, i))
    for i in range(count):
        kubectl("wait", "-n", namespace, f"pod/blocker-{i}", "--for=jsonpath={.status.phase}=Running", "--timeout=90s", check=True)


def test_three_instances_on_three_nodes_done(kubectl: Any, namespace: str, operator: Operator, compute_pool: Any,
                                             apply: Any, payload: str) -> None:
    pool = compute_pool("cpu", max_nodes=3)
    apply(mljob("three", **spec(pool, "ok-seen-running.py", targetInstances=3)))
    st = wait_phase(kubectl, namespace, "three", {"DONE", "FAILED"}, JOB_TIMEOUT_S, operator)
    assert st["phase"] == "DONE", json.dumps(st, indent=1)
    pods = pods_of(kubectl, namespace, "three")
    assert sorted(p["metadata"]["labels"][naming.LABEL_ROLE] for p in pods) == ["head", "worker", "worker"]
    assert len({p["spec"]["nodeName"] for p in pods}) == 3, "one instance per node"
    head = next(p for p in pods if p["metadata"]["labels"][naming.LABEL_ROLE] == "head")
    assert head["status"]["phase"] == "Succeeded"
    # The head kept its outcome on its own job (what job.result() reads), as the pod that wrote it.
    job_obj = get_json(kubectl, namespace, "mljob", "three")
    kept = contract.StoredResult.model_validate_json(job_obj["metadata"]["annotations"][naming.result_annotation(0)])
    assert (kept.pod, kept.success, kept.data is not None) == (head["metadata"]["name"], True, True), kept
    assert not any(naming.result_annotation(i) in job_obj["metadata"]["annotations"] for i in (1, 2))  # workers: only failures
    assert {"WaitingForInstances", "InstancesReady", "Completed"} <= set(events_of(kubectl, namespace, "three"))
    # The job's children exist and are owned by it (GC removes them with the job).
    for kind, name in [("service", "three-svc"), ("secret", "three-contract"), ("networkpolicy", "three-ray")]:
        obj = get_json(kubectl, namespace, kind, name)
        assert obj["metadata"]["ownerReferences"][0]["name"] == "three", kind
    # One Secret holds the contract and the Ray token; no contract ConfigMap.
    assert set(get_json(kubectl, namespace, "secret", "three-contract")["data"]) == {contract.CONTRACT_FILENAME, naming.RAY_TOKEN_KEY}
    assert kubectl("get", "configmap", "three-contract", "-n", namespace).returncode != 0
    # The namespace's runtime account is shared by its jobs and owned by none.
    for kind in ("serviceaccount", "role", "rolebinding"):
        assert "ownerReferences" not in get_json(kubectl, namespace, kind, naming.RUNTIME_ACCOUNT)["metadata"], kind
    assert {p["spec"]["serviceAccountName"] for p in pods} == {naming.RUNTIME_ACCOUNT}
    pool_status = json.loads(kubectl("get", "computepool", pool, "-o", "json", check=True).stdout)["status"]
    assert pool_status["readyNodes"] >= 3 and pool_status["phase"] in ("IDLE", "ACTIVE")


def test_two_groups_pods_and_contract_then_delete_leaves_nothing(kubectl: Any, namespace: str, operator: Operator,
                                                                   compute_pool: Any, apply: Any, payload: str) -> None:
    cpu, gpu = compute_pool("cpu", max_nodes=2), compute_pool("gpu", max_nodes=2)
    groups = [{"name": "instance_group_1", "computePool": cpu, "instanceCount": 2},
              {"name": "gpu_group", "computePool": gpu, "instanceCount": 1}]
    apply(mljob("hetero", entrypoint={"file": "sleep.py"}, args=["60"], code={"configMap": "payload"},
                instanceGroups=groups, distributionInstanceGroups=["gpu_group"], mode="sagemaker",
                instancesTimeoutSeconds=GATE_S))
    pods = wait_for(lambda: (p := pods_of(kubectl, namespace, "hetero")) and len(p) == 3 and p, 60, "3 pods")
    by_group: dict[str, list[dict[str, Any]]] = {}
    for p in pods:
        by_group.setdefault(p["metadata"]["labels"][naming.LABEL_GROUP], []).append(p)
    assert sorted((g, len(ps)) for g, ps in by_group.items()) == [("gpu-group", 1), ("instance-group-1", 2)]
    gpu_pod = by_group["gpu-group"][0]
    assert gpu_pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert gpu_pod["spec"]["nodeSelector"] == {"kubepool.dev/node-pool": "gpu"}
    secret = get_json(kubectl, namespace, "secret", naming.job_secret_name("hetero"))
    doc = contract.parse_contract(base64.b64decode(secret["data"][contract.CONTRACT_FILENAME]).decode())
    assert [(g.name, g.count, g.gpus) for g in doc.groups] == [("instance_group_1", 2, 0), ("gpu_group", 1, 1)]
    for p in pods:
        env = {e["name"]: e.get("value") for e in p["spec"]["containers"][0]["env"]}
        me = doc.identity(int(env[contract.ENV_INSTANCE_ID]))
        assert naming.dns_label(me.group) == p["metadata"]["labels"][naming.LABEL_GROUP]
        assert me.host == p["spec"]["hostname"] and doc.instances[me.instance_id].pod == p["metadata"]["name"]
    assert doc.distribution_instance_groups == ["gpu_group"]
    # Process nodes give pods loopback addresses, which an EndpointSlice may not carry: the Service has no
    # selector and no slice (test_endpoint_slice_on_fake_nodes covers the slice); their /etc/hosts still works.
    assert "selector" not in get_json(kubectl, namespace, "service", "hetero-svc")["spec"]
    # Deleting the job removes every pod (owner references + background GC), running or not.
    kubectl("delete", "mljob", "hetero", "-n", namespace, "--wait=true", check=True)
    wait_for(lambda: not pods_of(kubectl, namespace, "hetero"), 90, "no pods left after deleting the job")


def test_endpoint_slice_on_fake_nodes(kubectl: Any, namespace: str, operator: Operator, compute_pool: Any,
                                      apply: Any, cluster: Any) -> None:
    """The headless Service has no selector: the operator writes its EndpointSlice, one endpoint per instance with
    its SageMaker hostname, which the API server validates and the garbage collector removes with the job. On kwok
    fake nodes (routable pod addresses; nothing runs there, kwok reports the pods Running and Ready)."""
    had_second = kubectl("get", "node", "kwok-node-1").returncode == 0
    kwok.ensure_fake_nodes(cluster.layout, 2)
    try:
        pool = compute_pool("fake", max_nodes=2, instanceFamily="CPU_X64_S", tolerations=[kwok.FAKE_TOLERATION])
        apply(mljob("dns", computePool=pool, targetInstances=2, image="fake.invalid/x:1",
                    entrypoint={"command": ["true"]}))

        def endpoints() -> dict[str, tuple[str, str]] | None:
            pods = {p["metadata"]["name"]: p for p in pods_of(kubectl, namespace, "dns")}
            out = kubectl("get", "endpointslice", "dns-svc", "-n", namespace, "-o", "json")
            got = json.loads(out.stdout) if out.returncode == 0 else {}
            eps = {e["targetRef"]["name"]: (e.get("hostname", ""), e["addresses"][0]) for e in got.get("endpoints") or []}
            want = {n: (p["spec"]["hostname"], p.get("status", {}).get("podIP")) for n, p in pods.items()}
            return eps if len(want) == 2 and eps == want else None

        eps = wait_for(endpoints, 90, "an EndpointSlice listing both instances")
        assert sorted(h for h, _ in eps.values()) == ["algo-1", "algo-2"]
        labels = get_json(kubectl, namespace, "endpointslice", "dns-svc")["metadata"]["labels"]
        assert labels[naming.LABEL_SERVICE_NAME] == "dns-svc"
        assert "selector" not in get_json(kubectl, namespace, "service", "dns-svc")["spec"]
        kubectl("delete", "mljob", "dns", "-n", namespace, "--wait=true", check=True)
        wait_for(lambda: kubectl("get", "endpointslice", "dns-svc", "-n", namespace).returncode != 0, 60,
                 "the EndpointSlice garbage-collected with its job")
    finally:
        if not had_second:  # other tests expect kwok-node-0 alone
            kubectl("delete", "node", "kwok-node-1", "--wait=false")


def test_min_of_target_runs_with_two_free_nodes(kubectl: Any, namespace: str, operator: Operator, compute_pool: Any,
                                                apply: Any, payload: str) -> None:
    pool = compute_pool("cpu", max_nodes=3)
    run_blockers(kubectl, apply, namespace, pool, 1)
    apply(mljob("minjob", **spec(pool, "sleep.py", "5", targetInstances=3, minInstances=2)))
    st = wait_phase(kubectl, namespace, "minjob", {"RUNNING", "DONE", "FAILED"}, JOB_TIMEOUT_S, operator)
    assert st["phase"] in ("RUNNING", "DONE"), json.dumps(st, indent=1)
    st = wait_phase(kubectl, namespace, "minjob", {"DONE", "FAILED"}, JOB_TIMEOUT_S, operator)
    assert st["phase"] == "DONE" and st["readyInstances"] <= 2, json.dumps(st, indent=1) + scene(kubectl, namespace)
    pending = [p for p in pods_of(kubectl, namespace, "minjob") if p["status"].get("phase") == "Pending"]
    assert len(pending) <= 1


def test_min_not_reached_fails_instances_unavailable(kubectl: Any, namespace: str, operator: Operator,
                                                     compute_pool: Any, apply: Any, payload: str) -> None:
    pool = compute_pool("cpu", max_nodes=3)
    run_blockers(kubectl, apply, namespace, pool, 2)
    apply(mljob("starved", **spec(pool, targetInstances=3, minInstances=2, instancesTimeoutSeconds=10)))
    st = wait_phase(kubectl, namespace, "starved", {"FAILED", "RUNNING", "DONE"}, 90, operator)
    assert (st["phase"], st["reason"]) == ("FAILED", "InstancesUnavailable"), json.dumps(st, indent=1)
    # The head runs on the free node, so its launcher's gate times out, in Snowflake's launcher's words (#38 item 4).
    assert "Timed out waiting for 2 instances, only 1 available" in st["message"], st["message"]
    wait_for(lambda: all(p["status"].get("phase") in ("Succeeded", "Failed") or p["metadata"].get("deletionTimestamp")
                         for p in pods_of(kubectl, namespace, "starved")) or not pods_of(kubectl, namespace, "starved"),
             60, "the starved job's pods removed")


def test_full_pool_queues_next_job(kubectl: Any, namespace: str, operator: Operator, compute_pool: Any, apply: Any,
                                   payload: str) -> None:
    pool = compute_pool("cpu", max_nodes=1)
    apply(mljob("first", **spec(pool, "sleep.py", "8")))
    wait_phase(kubectl, namespace, "first", {"PENDING", "RUNNING"}, 30, operator)
    apply(mljob("second", **spec(pool)))
    st = wait_phase(kubectl, namespace, "second", {"PENDING"}, 30, operator)
    assert st["reason"] == "Queued" and not pods_of(kubectl, namespace, "second")
    first = wait_phase(kubectl, namespace, "first", {"DONE", "FAILED"}, JOB_TIMEOUT_S, operator)
    assert first["phase"] == "DONE"
    second = wait_phase(kubectl, namespace, "second", {"DONE", "FAILED"}, JOB_TIMEOUT_S, operator)
    assert second["phase"] == "DONE" and second["admittedAt"] >= first["completionTime"]


def test_operator_restart_mid_job(kubectl: Any, namespace: str, operator: Operator, compute_pool: Any, apply: Any,
                                  payload: str) -> None:
    pool = compute_pool("cpu", max_nodes=2)
    apply(mljob("restart", **spec(pool, "sleep.py", "10", targetInstances=2)))
    wait_for(lambda: len(pods_of(kubectl, namespace, "restart")) == 2, 60, "2 pods")
    before = {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods_of(kubectl, namespace, "restart")}
    operator.stop(kill=True)
    operator.start()
    st = wait_phase(kubectl, namespace, "restart", {"DONE", "FAILED"}, JOB_TIMEOUT_S, operator)
    assert st["phase"] == "DONE", json.dumps(st, indent=1)
    after = {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods_of(kubectl, namespace, "restart")}
    assert after == before, "no duplicate or replaced pods"


def test_head_failure_fails_with_its_message(kubectl: Any, namespace: str, operator: Operator, compute_pool: Any,
                                             apply: Any, payload: str) -> None:
    pool = compute_pool("cpu", max_nodes=1)
    apply(mljob("broken", **spec(pool, "fail.py")))
    st = wait_phase(kubectl, namespace, "broken", {"DONE", "FAILED"}, JOB_TIMEOUT_S, operator)
    assert (st["phase"], st["reason"]) == ("FAILED", "HeadFailed")
    assert "boom-42 from the head" in st["message"]
    assert "HeadFailed" in events_of(kubectl, namespace, "broken")


def test_pool_appears_later_then_cancel_cancels(kubectl: Any, namespace: str, operator: Operator, apply: Any,
                                                 compute_pool: Any, payload: str) -> None:
    apply(mljob("waiting", **spec("op-later-pool", "sleep.py", "60")))
    st = wait_phase(kubectl, namespace, "waiting", {"PENDING"}, 30, operator)
    assert st["reason"] == "PoolNotFound"
    wait_for(lambda: "PoolNotFound" in events_of(kubectl, namespace, "waiting"), 20, "a PoolNotFound event")
    later = {"apiVersion": "kubepool.dev/v1alpha1", "kind": "ComputePool", "metadata": {"name": "op-later-pool"},
             "spec": {"instanceFamily": "CPU_X64_S", "minNodes": 0, "maxNodes": 1,
                      "nodeSelector": {"kubepool.dev/node-pool": "cpu"}}}
    kubectl("apply", "-f", "-", input=yaml.safe_dump(later), check=True)
    try:
        wait_for(lambda: pods_of(kubectl, namespace, "waiting"), 30, "the job admitted once its pool exists")
        kubectl("patch", "mljob", "waiting", "-n", namespace, "--type=merge", "-p", '{"spec":{"cancel":true}}', check=True)
        st = wait_phase(kubectl, namespace, "waiting", {"CANCELLED"}, 30, operator)
        assert st["reason"] == "Cancelled"
        wait_for(lambda: all(p["metadata"].get("deletionTimestamp") for p in pods_of(kubectl, namespace, "waiting")),
                 30, "pods terminating")
    finally:
        kubectl("delete", "computepool", "op-later-pool", "--wait=false")


def test_kuberay_backend_without_crd_fails(cluster: Any, tmp_path: Path) -> None:
    """On a control plane without KubeRay's CRDs (a spare cluster: the shared one has them installed for
    tests/kuberay), a kuberay job fails at once and creates nothing."""
    with spare_cluster(tmp_path) as state:
        kubectl = Kubectl(cluster.layout.bin("kubectl"), state / "kubeconfig")
        assert kubectl("get", "crd", RAYCLUSTER_CRD).returncode != 0
        kubectl("apply", "--server-side", "-f", str(ROOT / "crds"), check=True)
        kubectl.wait_established("mljobs.kubepool.dev", "computepools.kubepool.dev")
        pool = {"apiVersion": "kubepool.dev/v1alpha1", "kind": "ComputePool", "metadata": {"name": "cpu"},
                "spec": {"instanceFamily": "CPU_X64_S", "minNodes": 0, "maxNodes": 1}}
        job = mljob("ray", computePool="cpu", backend="kuberay", entrypoint={"command": ["python", "-c", "pass"]})
        kubectl("apply", "-n", "default", "-f", "-", input=yaml.safe_dump_all([pool, job]), check=True)
        operator = Operator(state / "kubeconfig", "default", tmp_path / "operator.log")
        operator.start()
        try:
            st = wait_phase(kubectl, "default", "ray", {"FAILED", "PENDING", "RUNNING"}, 60, operator)
            assert (st["phase"], st["reason"]) == ("FAILED", "KubeRayNotInstalled"), st
            assert not pods_of(kubectl, "default", "ray")
            assert kubectl("get", "rayclusters.ray.io", "-n", "default").returncode != 0  # no such kind at all
        finally:
            operator.stop()
