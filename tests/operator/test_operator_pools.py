"""ComputePool minNodes (warm capacity) and autoSuspendSeconds on the local cluster: placeholder pods held on
distinct nodes, pre-empted by instances through the real kube-scheduler and recreated, auto-suspend and
auto-resume, and garbage collection with the pool. The operator watches only the test's namespace, so its
placeholders live there (the first watched namespace)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubepool import naming
from support.operator_cluster import (
    GATE_S,
    JOB_WAIT_S,
    Operator,
    free_port,
    get_json,
    mljob,
    wait_for,
    wait_phase,
)

# exclusive: a pool's warm capacity is held by every running operator, in its own namespace (see above).
pytestmark = pytest.mark.exclusive

JOB_TIMEOUT_S = JOB_WAIT_S
POD_TIMEOUT_S = 120.0
PAYLOAD = {"ok.py": "print('warm hello')\n__return__ = 1\n"}


def _payload(kubectl: Any, namespace: str) -> None:
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "payload"}, "data": PAYLOAD}
    kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(cm), check=True)


def _job(name: str, pool: str, instances: int) -> dict[str, Any]:
    return mljob(name, computePool=pool, entrypoint={"file": "ok.py"}, code={"configMap": "payload"},
                 targetInstances=instances, instancesTimeoutSeconds=GATE_S)


def placeholders(kubectl: Any, namespace: str, pool: str) -> list[dict[str, Any]]:
    """The pool's placeholder pods not being deleted."""
    sel = f"{naming.LABEL_POOL}={pool},{naming.LABEL_ROLE}={naming.ROLE_PLACEHOLDER}"
    items: list[dict[str, Any]] = get_json(kubectl, namespace, "pods", "-l", sel)["items"]
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]


def running_on(pods: list[dict[str, Any]]) -> list[str]:
    return sorted(p["spec"]["nodeName"] for p in pods if p["status"].get("phase") == "Running")


def pool_status(kubectl: Any, pool: str) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(kubectl("get", "computepool", pool, "-o", "json", check=True).stdout)
    return out.get("status") or {}


def warm(kubectl: Any, namespace: str, pool: str, n: int) -> list[str]:
    """Waits until exactly `n` placeholders run, on `n` distinct nodes, and the pool's status says so."""
    def ready() -> list[str] | None:
        nodes = running_on(placeholders(kubectl, namespace, pool))
        return nodes if len(nodes) == n and pool_status(kubectl, pool).get("warmInstances") == n else None

    nodes: list[str] = wait_for(ready, POD_TIMEOUT_S, f"{n} warm placeholder(s) of {pool}")
    assert len(set(nodes)) == n, f"placeholders share a node: {nodes}"
    return nodes


def preempted(kubectl: Any, namespace: str) -> set[str]:
    """Pods the scheduler pre-empted (its Event on each victim)."""
    out = get_json(kubectl, namespace, "events", "--field-selector", "reason=Preempted")
    return {e["involvedObject"]["name"] for e in out["items"]}


def job_pods(kubectl: Any, namespace: str, job: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = get_json(kubectl, namespace, "pods", "-l", f"{naming.LABEL_JOB}={job}")["items"]
    return items


def test_min_nodes_placeholders_yield_to_the_pools_job_and_come_back(
        kubectl: Any, namespace: str, operator: Operator, compute_pool: Any) -> None:
    _payload(kubectl, namespace)
    pool = compute_pool("cpu", max_nodes=3, minNodes=2)
    nodes = warm(kubectl, namespace, pool, 2)
    pods = placeholders(kubectl, namespace, pool)
    assert {p["metadata"]["name"] for p in pods} == {naming.placeholder_pod_name(pool, i) for i in range(2)}
    for p in pods:
        assert p["spec"]["priority"] == naming.PLACEHOLDER_PRIORITY  # resolved from the PriorityClass
        assert p["spec"]["preemptionPolicy"] == "Never"
        [owner] = p["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"]) == ("ComputePool", pool)
    st = pool_status(kubectl, pool)
    assert (st["phase"], st["instancesInUse"]) == ("IDLE", 0), st

    kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(_job("warmjob", pool, 2)), check=True)

    def both_running() -> list[str] | None:
        on = running_on(job_pods(kubectl, namespace, "warmjob"))
        return on if len(on) == 2 else None

    job_nodes = wait_for(both_running, JOB_TIMEOUT_S, "both instances Running")
    # Only one node was free: an instance took a warm node, its placeholder pre-empted by the scheduler or
    # deleted by the operator, whichever came first (two instances in use of minNodes=2 want no placeholder;
    # the next test makes the pre-emption certain).
    assert set(job_nodes) & set(nodes), "the instances took at least one warm node"
    st = wait_phase(kubectl, namespace, "warmjob", {"DONE", "FAILED"}, JOB_TIMEOUT_S, operator)
    assert st["phase"] == "DONE", json.dumps(st, indent=1)
    # The job is done: the warm nodes are held again, by new placeholders.
    warm(kubectl, namespace, pool, 2)
    before = {p["metadata"]["uid"] for p in pods}
    assert not before & {p["metadata"]["uid"] for p in placeholders(kubectl, namespace, pool)}
    assert pool_status(kubectl, pool)["instancesInUse"] == 0


def test_instances_preempt_placeholders_which_are_recreated_and_never_block(
        kubectl: Any, namespace: str, operator: Operator, compute_pool: Any) -> None:
    """Deterministic pre-emption: the warm pool holds all three CPU nodes and keeps wanting them (its own
    instances in use stay 0), so another pool's job can only start by pre-empting its placeholders."""
    _payload(kubectl, namespace)
    warm_pool = compute_pool("cpu", whole_nodes=True, max_nodes=3, minNodes=3)
    warm(kubectl, namespace, warm_pool, 3)
    busy = compute_pool("cpu", whole_nodes=True, max_nodes=3)
    kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(_job("busyjob", busy, 2)), check=True)
    st = wait_phase(kubectl, namespace, "busyjob", {"DONE", "FAILED"}, JOB_TIMEOUT_S, operator)
    assert st["phase"] == "DONE", json.dumps(st, indent=1)
    victims = preempted(kubectl, namespace)
    assert len(victims & {naming.placeholder_pod_name(warm_pool, i) for i in range(3)}) >= 2, victims
    assert not victims & {p["metadata"]["name"] for p in job_pods(kubectl, namespace, "busyjob")}
    # The pre-empted placeholders were created again, and take their nodes back once the job's pods are gone.
    warm(kubectl, namespace, warm_pool, 3)


@pytest.fixture
def metered_operator(cluster: Any, crds: None, namespace: str, tmp_path: Path) -> Iterator[Operator]:
    """The operator with its metrics endpoint on a free loopback port."""
    op = Operator(cluster.kubeconfig, namespace, tmp_path / "operator.log", metrics_port=free_port())
    op.start()
    try:
        yield op
    finally:
        op.stop()


def pool_events(kubectl: Any, pool: str) -> list[tuple[str, str]]:
    """(type, reason) of the Events about the pool, oldest first (a cluster-scoped object's go to `default`)."""
    out = json.loads(kubectl("get", "events", "-A", "--field-selector",
                             f"involvedObject.kind=ComputePool,involvedObject.name={pool}", "-o", "json", check=True).stdout)
    return [(e["type"], e["reason"]) for e in sorted(out["items"], key=lambda e: e["metadata"]["creationTimestamp"])]


def test_auto_suspend_releases_warm_nodes_and_a_job_resumes_the_pool(
        kubectl: Any, namespace: str, metered_operator: Operator, compute_pool: Any) -> None:
    operator = metered_operator
    _payload(kubectl, namespace)
    pool = compute_pool("cpu", max_nodes=2, minNodes=1)
    warm(kubectl, namespace, pool, 1)
    # Idle since its creation, longer ago than the new timeout: suspended at once, its warm node released.
    kubectl("patch", "computepool", pool, "--type=merge", "-p", '{"spec": {"autoSuspendSeconds": 3}}', check=True)

    def suspended() -> dict[str, Any] | None:
        st = pool_status(kubectl, pool)
        gone = not placeholders(kubectl, namespace, pool) and st.get("warmInstances") == 0
        return st if st.get("phase") == "SUSPENDED" and gone else None

    st = wait_for(suspended, POD_TIMEOUT_S, f"{pool} auto-suspended without placeholders")
    cond = next(c for c in st["conditions"] if c["type"] == "Suspended")
    assert (cond["status"], cond["reason"]) == ("True", "AutoSuspended"), cond
    assert "autoSuspendSeconds=3" in cond["message"] and st["idleSince"] in cond["message"]

    kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(_job("resume", pool, 1)), check=True)
    wait_for(lambda: pool_status(kubectl, pool).get("phase") in ("IDLE", "ACTIVE"), POD_TIMEOUT_S,
             f"{pool} resumed by the job")
    st = wait_phase(kubectl, namespace, "resume", {"DONE", "FAILED"}, JOB_TIMEOUT_S, operator)
    assert st["phase"] == "DONE", json.dumps(st, indent=1)
    # Idle again: suspended again after autoSuspendSeconds, counted from the job's end.
    st = wait_for(suspended, POD_TIMEOUT_S, f"{pool} auto-suspended again")
    assert "Traceback" not in operator.logs(), operator.logs()[-3000:]
    assert st["idleSince"] >= json.loads(kubectl("get", "mljob", "resume", "-n", namespace, "-o", "json",
                                                 check=True).stdout)["status"]["completionTime"]
    # Each suspension and the resumption were announced on the pool, once each.
    events = wait_for(lambda: (e := pool_events(kubectl, pool)).count(("Normal", "AutoSuspended")) == 2 and e,
                      30, f"{pool}'s second AutoSuspended Event")
    assert [r for _, r in events if r in ("AutoSuspended", "Resumed")] == ["AutoSuspended", "Resumed", "AutoSuspended"]
    # The queue's metrics saw the job: admitted, started and finished once; the pool's gauges are its status.
    samples = operator.metrics()
    for name in ("queued", "start"):
        assert samples[f'kubepool_mljob_{name}_seconds_count{{pool="{pool}"}}'] == 1, name
    assert samples[f'kubepool_mljob_duration_seconds_count{{phase="DONE",pool="{pool}"}}'] == 1
    assert samples[f'kubepool_pool_max_instances{{pool="{pool}"}}'] == 2
    assert samples[f'kubepool_pool_instances_in_use{{pool="{pool}"}}'] == 0


def test_deleting_the_pool_removes_its_placeholders(kubectl: Any, namespace: str, operator: Operator,
                                                    compute_pool: Any) -> None:
    pool = compute_pool("cpu", max_nodes=2, minNodes=2)
    warm(kubectl, namespace, pool, 2)
    kubectl("delete", "computepool", pool, "--wait=true", check=True)
    sel = f"{naming.LABEL_POOL}={pool},{naming.LABEL_ROLE}={naming.ROLE_PLACEHOLDER}"
    wait_for(lambda: not get_json(kubectl, namespace, "pods", "-l", sel)["items"], POD_TIMEOUT_S,
             "the garbage collector to remove the placeholders")
