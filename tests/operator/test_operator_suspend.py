"""suspend pauses and resumes a job, as Job, JobSet and RayJob do, so a queue manager (Kueue) can hold it: a
RUNNING job suspended loses its pods and its capacity at once (the job queued behind it starts), stays PENDING
with reason Suspended, and once resumed queues again and runs from scratch to DONE, its suspended attempt not
counted against backoffLimit. A job created suspended with Kueue's queue label starts nothing and holds no place
in the queue until Kueue's admission (here: the same patch) sets suspend false. The real operator, API server, scheduler and nodes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from kubepool import naming
from support.operator_cluster import ROOT, Operator, get_json, mljob, wait_for, wait_phase

JOB_TIMEOUT_S = 180
SLEEPER = "import time; print('started'); time.sleep(25); print('finished')"


def _pods(kubectl: Any, namespace: str, job: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = get_json(kubectl, namespace, "pods", "-l", f"{naming.LABEL_JOB}={job}")["items"]
    return items


def _patch(kubectl: Any, namespace: str, job: str, suspend: bool) -> None:
    kubectl("patch", "mljob", job, "-n", namespace, "--type=merge", "-p", json.dumps({"spec": {"suspend": suspend}}),
            check=True)


def _conditions(kubectl: Any, namespace: str, job: str) -> dict[str, tuple[str, str]]:
    st = get_json(kubectl, namespace, "mljob", job)["status"]
    return {c["type"]: (c["status"], c["reason"]) for c in st["conditions"]}


def _status(kubectl: Any, namespace: str, job: str) -> dict[str, Any]:
    st: dict[str, Any] = get_json(kubectl, namespace, "mljob", job).get("status") or {}
    return st


def test_suspend_frees_a_running_jobs_capacity_and_resume_runs_it_again(
        kubectl: Any, namespace: str, operator: Operator, compute_pool: Any) -> None:
    ns, pool = namespace, compute_pool("cpu", max_nodes=1)
    first = mljob("first", computePool=pool, mode="parallel", backoffLimit=0,
                  entrypoint={"command": ["python", "-c", SLEEPER]})
    kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(first), check=True)
    wait_phase(kubectl, ns, "first", {"RUNNING"}, JOB_TIMEOUT_S, operator)
    second = mljob("second", computePool=pool, mode="parallel", entrypoint={"command": ["python", "-c", "print('second')"]})
    kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(second), check=True)
    assert wait_phase(kubectl, ns, "second", {"PENDING"}, 30, operator)["reason"] == "Queued"

    _patch(kubectl, ns, "first", True)
    st = wait_for(lambda: (s := _status(kubectl, ns, "first")).get("reason") == "Suspended" and s, 30, "first suspended")
    assert st["phase"] == "PENDING" and "admittedAt" not in st and st["suspendedAttempts"] == 1, st
    assert _conditions(kubectl, ns, "first")["Suspended"] == ("True", "Suspended")
    wait_for(lambda: not _pods(kubectl, ns, "first"), 60, "first's pods deleted")
    # Its capacity went with it: the job queued behind it runs.
    st = wait_phase(kubectl, ns, "second", {"DONE", "FAILED"}, JOB_TIMEOUT_S, operator)
    assert st["phase"] == "DONE", json.dumps(st, indent=1)
    assert _status(kubectl, ns, "first")["reason"] == "Suspended"  # still held while suspended

    _patch(kubectl, ns, "first", False)
    st = wait_phase(kubectl, ns, "first", {"DONE", "FAILED"}, JOB_TIMEOUT_S, operator)
    assert st["phase"] == "DONE", json.dumps(st, indent=1)
    assert (st["attempt"], st["suspendedAttempts"]) == (1, 1) and "queuedAt" in st, st
    assert _conditions(kubectl, ns, "first")["Suspended"] == ("False", "Resumed")
    [pod] = _pods(kubectl, ns, "first")
    assert pod["metadata"]["labels"][naming.LABEL_ATTEMPT] == "1"  # a new attempt, from scratch
    logs = kubectl("logs", "-n", ns, pod["metadata"]["name"], check=True).stdout
    assert "started" in logs and "finished" in logs
    reasons = [e["reason"] for e in get_json(kubectl, ns, "events", "--field-selector", "involvedObject.name=first")["items"]]
    assert {"Suspended", "Resumed"} <= set(reasons), reasons


@pytest.fixture
def kueue_policy(kubectl: Any, namespace: str) -> Iterator[None]:
    """deploy/kueue's MutatingAdmissionPolicy, its binding narrowed to the test's namespace."""
    docs = list(yaml.safe_load_all((ROOT / "deploy" / "kueue" / "suspend-queued-mljobs.yaml").read_text()))
    for d in docs:
        d["metadata"]["name"] += f"-{namespace}"
        if d["kind"] == "MutatingAdmissionPolicyBinding":
            d["spec"]["policyName"] += f"-{namespace}"
            d["spec"]["matchResources"] = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}}
    kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs), check=True)
    yield
    for d in docs:
        kubectl("delete", d["kind"].lower(), d["metadata"]["name"], "--wait=false")


def test_a_job_queued_by_kueue_is_created_suspended_and_starts_nothing_until_admitted(
        kubectl: Any, namespace: str, operator: Operator, compute_pool: Any, kueue_policy: None) -> None:
    ns, pool = namespace, compute_pool("cpu", max_nodes=1)
    job = mljob("held", computePool=pool, mode="parallel", entrypoint={"command": ["python", "-c", "print('admitted')"]})
    job["metadata"]["labels"] = {naming.LABEL_KUEUE_QUEUE: "team-a"}

    def stored_suspended() -> bool:  # the policy's binding may take a moment to be in force
        proc = kubectl("create", "-n", ns, "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(job), check=True)
        return bool(json.loads(proc.stdout)["spec"].get("suspend"))

    wait_for(stored_suspended, 30, "the policy suspending a queued MLJob at creation")
    kubectl("create", "-n", ns, "-f", "-", input=json.dumps(job), check=True)
    assert get_json(kubectl, ns, "mljob", "held")["spec"]["suspend"] is True  # asked nothing: defaulted
    st = wait_for(lambda: (s := _status(kubectl, ns, "held")).get("reason") == "Suspended" and s, 30, "held suspended")
    assert st["phase"] == "PENDING" and "until Kueue admits it from LocalQueue team-a" in st["message"], st
    assert not _pods(kubectl, ns, "held")
    # It holds no place in the queue either: a later job takes the pool's only slot at once.
    later = mljob("later", computePool=pool, mode="parallel", entrypoint={"command": ["python", "-c", "print('later')"]})
    kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(later), check=True)
    assert wait_phase(kubectl, ns, "later", {"DONE", "FAILED"}, JOB_TIMEOUT_S, operator)["phase"] == "DONE"
    assert not _pods(kubectl, ns, "held") and _status(kubectl, ns, "held")["reason"] == "Suspended"
    _patch(kubectl, ns, "held", False)  # what Kueue does when it admits the workload
    st = wait_phase(kubectl, ns, "held", {"DONE", "FAILED"}, JOB_TIMEOUT_S, operator)
    assert st["phase"] == "DONE" and st["attempt"] == 0, json.dumps(st, indent=1)
