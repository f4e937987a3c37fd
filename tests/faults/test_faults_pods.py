"""Pod and node loss: a deleted or killed worker above minInstances leaves the job running to DONE; below it
the job FAILS InstancesLost; a deleted head FAILS the job (backoffLimit 0) or retries it (backoffLimit 1).
Each verdict within 30 s of the fault (measured from its injection, an upper bound on "visible")."""

from __future__ import annotations

import json
import time
from typing import Any

import yaml
from faultkit import (
    job,
    kill_group,
    orphans,
    pod_process_group,
    pod_running,
    record,
    sleep_cmd,
    wait_terminal,
)

from kubepool import naming
from support.operator_cluster import Operator, get_json, wait_for, wait_phase

VERDICT_S = 30.0


def _role(pods: list[dict[str, Any]], role: str) -> dict[str, Any]:
    return next(p for p in pods if p["metadata"]["labels"].get(naming.LABEL_ROLE) == role)


def _pod_failed_at(kubectl: Any, namespace: str, name: str) -> float:
    """Waits until the pod is visibly gone (Failed, deleting or deleted); returns when that was seen."""
    def gone() -> bool:
        proc = kubectl("get", "pod", name, "-n", namespace, "-o", "json")
        if proc.returncode != 0:
            assert "NotFound" in proc.stderr, proc.stderr
            return True
        p = json.loads(proc.stdout)  # one read: a second one may find the pod already gone
        return p["status"].get("phase") == "Failed" or bool(p["metadata"].get("deletionTimestamp"))

    wait_for(gone, 60, f"pod {name} failed or deleted", 0.25)
    return time.monotonic()


def test_worker_and_head_loss(cluster: Any, kubectl: Any, namespace: str, operator: Operator, small_pool: Any,
                              recorder: Any) -> None:
    pool = small_pool(max_nodes=3)
    pool2 = small_pool(max_nodes=3)
    pool3 = small_pool(max_nodes=3)
    jobs = [
        # Head mode (Ray): minInstances rules. In parallel mode any failed instance fails the job (SageMaker's rule).
        job("above-min", pool, sleep_cmd(40), mode="head", targetInstances=3, minInstances=2, instancesTimeoutSeconds=180),
        job("below-min", pool2, sleep_cmd(120), targetInstances=2),                 # lose 1 worker: FAILED
        job("killed", pool3, sleep_cmd(120), targetInstances=2),                    # worker's processes killed
        job("head-gone", pool3, sleep_cmd(120)),                                    # head deleted, no retries
        # head deleted, retried; long enough to be still running when the test gets to it on a busy machine
        job("head-retry", pool2, sleep_cmd(45), backoffLimit=1),
    ]
    kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump_all(jobs), check=True)
    for name, n in (("above-min", 3), ("below-min", 2), ("killed", 2), ("head-gone", 1), ("head-retry", 1)):
        try:
            pod_running(kubectl, namespace, name, n=n)
        except AssertionError as e:  # say why: the job's status and where its pods are
            raise AssertionError(f"{e}\n{kubectl('get', 'mljob', name, '-n', namespace, '-o', 'yaml').stdout[-2500:]}\n"
                                 f"{kubectl('get', 'pods', '-n', namespace, '-o', 'wide').stdout}") from None
        wait_phase(kubectl, namespace, name, {"RUNNING"}, 180, operator)
    verdicts: dict[str, float] = {}

    def pods(name: str) -> list[dict[str, Any]]:
        return get_json(kubectl, namespace, "pods", "-l", f"{naming.LABEL_JOB}={name}")["items"]

    # 1. above minInstances: delete one worker; the job keeps running and ends DONE.
    worker = _role(pods("above-min"), "worker")["metadata"]["name"]
    kubectl("delete", "pod", worker, "-n", namespace, "--wait=false", check=True)
    # 2. below minInstances: delete the only worker.
    lost = _role(pods("below-min"), "worker")["metadata"]["name"]
    injected = {"below-min": time.monotonic()}
    kubectl("delete", "pod", lost, "-n", namespace, "--wait=false", check=True)
    _pod_failed_at(kubectl, namespace, lost)
    # 3. kill -9 a worker's whole process group (the pod's container), found from the agent's per-pod state.
    victim = _role(pods("killed"), "worker")
    injected["killed"] = time.monotonic()
    kill_group(pod_process_group(cluster, victim))
    _pod_failed_at(kubectl, namespace, victim["metadata"]["name"])
    # 4. delete the head (backoffLimit 0) and 5. the head of a job that may retry once.
    head = _role(pods("head-gone"), "head")["metadata"]["name"]
    injected["head-gone"] = time.monotonic()
    kubectl("delete", "pod", head, "-n", namespace, "--wait=false", check=True)
    _pod_failed_at(kubectl, namespace, head)
    retry_head = _role(pods("head-retry"), "head")["metadata"]["name"]
    injected["head-retry"] = time.monotonic()
    kubectl("delete", "pod", retry_head, "-n", namespace, "--wait=false", check=True)
    _pod_failed_at(kubectl, namespace, retry_head)

    st = wait_phase(kubectl, namespace, "below-min", {"FAILED", "DONE"}, VERDICT_S + 30, operator)
    verdicts["below-min"] = (recorder.first_time("below-min", {"FAILED"}) or time.monotonic()) - injected["below-min"]
    # Deleting marks the pod first (InstancesLost); a parallel-mode instance seen Failed first is InstanceFailed.
    assert (st["phase"], st["reason"]) in {("FAILED", "InstancesLost"), ("FAILED", "InstanceFailed")}, st
    st = wait_phase(kubectl, namespace, "killed", {"FAILED", "DONE"}, VERDICT_S + 30, operator)
    verdicts["killed"] = (recorder.first_time("killed", {"FAILED"}) or time.monotonic()) - injected["killed"]
    assert (st["phase"], st["reason"]) in {("FAILED", "InstancesLost"), ("FAILED", "InstanceFailed")}, st
    st = wait_phase(kubectl, namespace, "head-gone", {"FAILED", "DONE"}, VERDICT_S + 30, operator)
    verdicts["head-gone"] = (recorder.first_time("head-gone", {"FAILED"}) or time.monotonic()) - injected["head-gone"]
    assert (st["phase"], st["reason"]) == ("FAILED", "HeadFailed"), st
    retried = wait_for(lambda: recorder.first_reason("head-retry", "Retrying"), VERDICT_S + 30, "a retry")
    verdicts["head-retry"] = retried - injected["head-retry"]
    final = wait_terminal(kubectl, namespace, ["above-min", "head-retry"], 240)
    assert final["above-min"]["phase"] == "DONE", final["above-min"]
    assert final["head-retry"]["phase"] == "DONE" and final["head-retry"]["attempt"] == 1, final["head-retry"]
    late = {k: round(v, 1) for k, v in verdicts.items() if v > VERDICT_S}
    assert not late, f"verdicts later than {VERDICT_S:.0f}s after the fault: {late}"
    assert not recorder.backwards(), recorder.backwards()
    wait_for(lambda: not orphans(kubectl, namespace), 30, "no orphaned pods")
    record(cluster, "pod-loss", faults=5, jobs=5, lost=0, orphaned=len(orphans(kubectl, namespace)),
           converge_s=max(verdicts.values()), verdicts={k: round(v, 1) for k, v in verdicts.items()})
