"""API refusals reach the user at once: a ResourceQuota that refuses a job's pods puts the refusal in the job's
status and a Warning Event within seconds (not as InstancesUnavailable when instancesTimeoutSeconds runs out),
the operator retries with growing, jittered delays instead of every 5 s, and the job runs once the quota goes.
The real operator and API server."""

from __future__ import annotations

import json
import re
import time
from typing import Any

from kubepool import naming
from support.operator_cluster import Operator, get_json, mljob, wait_for, wait_phase

REFUSAL_WITHIN_S = 20.0


def test_a_quota_refusal_reaches_the_job_at_once_and_is_retried_with_backoff(
        kubectl: Any, namespace: str, operator: Operator, compute_pool: Any) -> None:
    ns, pool = namespace, compute_pool("cpu", max_nodes=2)
    quota = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "no-pods"}, "spec": {"hard": {"pods": "0"}}}
    kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(quota), check=True)
    wait_for(lambda: get_json(kubectl, ns, "resourcequota", "no-pods").get("status", {}).get("hard"), 30,
             "the quota controller to count the namespace")

    job = mljob("quota", computePool=pool, mode="parallel", entrypoint={"command": ["python", "-c", "print('ran')"]})
    started = time.monotonic()
    kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(job), check=True)

    def refused() -> dict[str, Any] | None:
        st = get_json(kubectl, ns, "mljob", "quota").get("status") or {}
        return st if st.get("reason") == "ApiRefused" else None

    st = wait_for(refused, REFUSAL_WITHIN_S, "the refusal in the job's status")
    assert st["phase"] == "PENDING" and "exceeded quota: no-pods" in st["message"], st
    assert time.monotonic() - started < REFUSAL_WITHIN_S
    events = get_json(kubectl, ns, "events", "--field-selector", "involvedObject.name=quota")["items"]
    assert any(e["reason"] == "ApiRefused" and e["type"] == "Warning" and "exceeded quota" in e["message"]
               for e in events), [(e["reason"], e["message"]) for e in events]

    # Retries back off: retry n waits about 2^(n-1) s (upper half, jittered), not a fixed 5 s.
    pattern = re.compile(rf"MLJob {re.escape(ns)}/quota: .*exceeded quota.*; retry (\d+) in ([0-9.]+)s")

    def retries() -> list[tuple[int, float]] | None:
        found = [(int(m[1]), float(m[2])) for m in pattern.finditer(operator.logs())]
        return found if len(found) >= 4 else None

    found = wait_for(retries, 60, "four retries in the operator's log")
    numbers, delays = [n for n, _ in found], [d for _, d in found]
    assert numbers[:4] == [1, 2, 3, 4], found
    for n, d in found[:4]:
        assert 2 ** (n - 1) / 2 <= d <= 2 ** (n - 1), found
    assert delays[3] > delays[0], found

    # The quota goes: the next retry creates the pods and the job runs.
    kubectl("delete", "resourcequota", "no-pods", "-n", ns, check=True)
    wait_for(lambda: get_json(kubectl, ns, "pods", "-l", f"{naming.LABEL_JOB}=quota")["items"], 60, "the job's pod")
    st = wait_phase(kubectl, ns, "quota", {"DONE", "FAILED"}, 180, operator)
    assert st["phase"] == "DONE", json.dumps(st, indent=1)
