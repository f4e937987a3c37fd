"""The queue's wake-ups. Admission under a burst: jobs created in the same second are decided in any order
(same-second jobs queue by name, "job-12" before "job-2"), and every one must be admitted when the pool has room
for all of them (regression for jobs left PENDING/Queued behind an older job that had been admitted meanwhile).
A pool's new spec wakes the jobs waiting for it."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from kubepool import naming
from support.operator_cluster import Operator, get_json, mljob, wait_for

pytestmark = pytest.mark.cluster
JOBS = 8


def test_burst_of_jobs_is_admitted_whatever_the_decision_order(kubectl: Any, namespace: str, operator: Operator,
                                                                compute_pool: Any) -> None:
    # No node carries this label: the pods stay unscheduled, so only admission is exercised (nothing runs).
    pool = compute_pool("cpu", max_nodes=JOBS, nodeSelector={"kubepool.dev/node-pool": "nowhere"})
    names = [f"job-{i}" for i in range(1, JOBS + 1)]  # job-1, job-10.., job-2: name order != creation order
    burst = {"apiVersion": "v1", "kind": "List",
             "items": [mljob(n, computePool=pool, entrypoint={"file": "main.py"}) for n in names]}
    kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(burst), check=True)

    def queued() -> list[str]:
        items = get_json(kubectl, namespace, "mljobs")["items"]
        return [j["metadata"]["name"] for j in items if not (j.get("status") or {}).get("admittedAt")]

    # Well under the 30 s safety re-check: the admissions themselves must wake the jobs behind them.
    wait_for(lambda: len(get_json(kubectl, namespace, "mljobs")["items"]) == JOBS and not queued(), 20,
             "every job of the burst admitted", interval=1.0)


def test_a_raised_max_nodes_admits_the_queued_job_and_the_pool_carries_nothing_of_the_operator(
        kubectl: Any, namespace: str, operator: Operator, compute_pool: Any) -> None:
    """A pool's spec change wakes the jobs waiting for it (its event's new generation), well before the queue's
    30 s re-check would; the operator writes a pool's status and nothing else of it (no annotation of kopf's)."""
    pool = compute_pool("cpu", max_nodes=1, nodeSelector={"kubepool.dev/node-pool": "nowhere"})
    for name in ("first", "second"):
        kubectl("apply", "-n", namespace, "-f", "-", check=True,
                input=yaml.safe_dump(mljob(name, computePool=pool, entrypoint={"file": "main.py"})))
        if name == "first":
            wait_for(lambda: (get_json(kubectl, namespace, "mljobs")["items"][0].get("status") or {}).get("admittedAt"),
                     20, "the first job admitted", interval=0.5)

    def second() -> dict[str, Any]:
        job = next(j for j in get_json(kubectl, namespace, "mljobs")["items"] if j["metadata"]["name"] == "second")
        return job.get("status") or {}

    wait_for(lambda: second().get("reason") == "Queued", 20, "the second job queued behind the first", interval=0.5)
    kubectl("patch", "computepool", pool, "--type=merge", "-p", '{"spec": {"maxNodes": 2}}', check=True)
    wait_for(lambda: second().get("admittedAt"), 15, "the second job admitted once maxNodes is 2", interval=0.5)
    body = json.loads(kubectl("get", "computepool", pool, "-o", "json", "--show-managed-fields", check=True).stdout)
    assert not [a for a in body["metadata"].get("annotations") or {} if a.startswith(f"{naming.GROUP}/")], body["metadata"]
    written = {(m["manager"], m.get("subresource", "")) for m in body["metadata"]["managedFields"]}
    assert all(s == "status" for m, s in written if not m.startswith("kubectl")), written
