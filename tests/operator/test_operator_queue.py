"""Admission under a burst: jobs created in the same second are decided in any order (same-second jobs queue
by name, "job-12" before "job-2"), and every one must be admitted when the pool has room for all of them.
Regression for jobs left PENDING/Queued behind an older job that had been admitted meanwhile."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

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
