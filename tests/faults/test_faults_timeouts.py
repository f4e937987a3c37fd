"""Timeouts fire on time: the min-instances timeout (R4) within ±5 s of instancesTimeoutSeconds when pods never
start, and as the head's verdict when pods run but never join its Ray cluster; activeDeadlineSeconds → FAILED
DeadlineExceeded on time, ttlSecondsAfterFinished deletes the job on time."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import yaml
from faultkit import job, pod_running, record, sleep_cmd, wait_terminal

from kubepool.runtime.main import HEAD_START_SECONDS
from support.operator_cluster import Operator, get_json, wait_for

TOLERANCE_S = 5.0


def _t(ts: str) -> float:
    return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()


def test_timeouts_fire_on_time(cluster: Any, kubectl: Any, namespace: str, operator: Operator, small_pool: Any,
                               recorder: Any) -> None:
    pool = small_pool(max_nodes=3)
    # No node matches this pool: its pods stay Pending, so the min-instances timeout must fire.
    nowhere = small_pool(max_nodes=2, nodeSelector={"kubepool.dev/node-pool": "nowhere"})
    jobs = [
        job("starved", nowhere, sleep_cmd(1), targetInstances=2, instancesTimeoutSeconds=12),
        job("deadline", pool, sleep_cmd(300), activeDeadlineSeconds=12),
        job("ttl", pool, sleep_cmd(1), ttlSecondsAfterFinished=8),
    ]
    t0 = time.monotonic()
    kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump_all(jobs), check=True)
    st = wait_terminal(kubectl, namespace, ["starved", "deadline"], 90)
    starved, deadline = st["starved"], st["deadline"]
    assert (starved["phase"], starved["reason"]) == ("FAILED", "InstancesUnavailable"), starved
    took = _t(starved["completionTime"]) - _t(starved["admittedAt"])
    assert abs(took - 12) <= TOLERANCE_S, f"instances timeout fired after {took:.0f}s, not 12s"
    seen = (recorder.first_time("starved", {"FAILED"}) or 0) - (recorder.first_time("starved", {"PENDING"}) or 0)
    assert abs(seen - 12) <= TOLERANCE_S + 2, f"FAILED seen {seen:.1f}s after PENDING"
    assert (deadline["phase"], deadline["reason"]) == ("FAILED", "DeadlineExceeded"), deadline
    took = _t(deadline["completionTime"]) - _t(deadline["admittedAt"])
    assert abs(took - 12) <= TOLERANCE_S, f"activeDeadlineSeconds fired after {took:.0f}s, not 12s"
    wait_for(lambda: not [p for p in get_json(kubectl, namespace, "pods", "-l", "kubepool.dev/job=deadline")["items"]
                          if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")],
             30, "the deadline job's pods stopped")
    # TTL: the job is deleted ttlSecondsAfterFinished after it finished (the recorder saw it finish).
    done_at = wait_for(lambda: recorder.first_time("ttl", {"DONE"}), 90, "ttl DONE")
    wait_for(lambda: kubectl("get", "mljob", "ttl", "-n", namespace).returncode != 0, 40, "the ttl job deleted", 0.25)
    gone = time.monotonic() - done_at
    assert abs(gone - 8) <= TOLERANCE_S + 1, f"deleted {gone:.1f}s after DONE, not 8s"
    wait_for(lambda: not get_json(kubectl, namespace, "pods", "-l", "kubepool.dev/job=ttl")["items"], 60, "ttl pods gone")
    record(cluster, "timeouts", faults=3, jobs=3, lost=0, orphaned=0, converge_s=time.monotonic() - t0)


@contextmanager
def silent_endpoint(host: str = "127.0.5.23") -> Iterator[str]:
    """An HTTP endpoint that takes connections and never answers (nobody accepts from its listen backlog):
    an S3 client reading from it waits (connect and read timeouts, retries) far longer than the test."""
    with socket.socket() as s:
        s.bind((host, 0))
        s.listen(64)
        yield f"http://{host}:{s.getsockname()[1]}"


def test_instances_that_run_but_never_join_time_out(cluster: Any, kubectl: Any, namespace: str, operator: Operator,
                                                     small_pool: Any, recorder: Any) -> None:
    """Head mode, two groups: the worker's group alone reads a channel from an S3 endpoint that never answers,
    so its pod runs but never starts its Ray node: never Ready (Ready = joined, #38 item 4), so the job is never
    RUNNING. The head's gate must time out and fail the job InstancesUnavailable, as for pods that never start;
    not wait forever, not blame the head."""
    pool = small_pool(max_nodes=2)
    timeout = 20
    with silent_endpoint() as endpoint:
        body = job("unjoined", pool, ["python", "-c", "print('never runs')"], mode="head", instancesTimeoutSeconds=timeout,
                   instanceGroups=[{"name": "head", "computePool": pool, "instanceCount": 1},
                                   {"name": "late", "computePool": pool, "instanceCount": 1}],
                   channels=[{"name": "train", "instanceGroups": ["late"],
                              "source": {"s3": {"uri": "s3://nowhere/data", "endpointUrl": endpoint}}}],
                   env=[{"name": "AWS_ACCESS_KEY_ID", "value": "test"}, {"name": "AWS_SECRET_ACCESS_KEY", "value": "test"},
                        {"name": "AWS_DEFAULT_REGION", "value": "us-east-1"}])
        del body["spec"]["computePool"]
        kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(body), check=True)
        pod_running(kubectl, namespace, "unjoined", n=2)
        st = wait_terminal(kubectl, namespace, ["unjoined"], 240)["unjoined"]
    assert not recorder.first_time("unjoined", {"RUNNING"}), "RUNNING with an instance that never joined"
    assert (st["phase"], st["reason"]) == ("FAILED", "InstancesUnavailable"), st
    assert "InstancesTimeoutError" in st["message"] and "only 1" in st["message"], st["message"]
    waited = _t(st["completionTime"]) - _t(st["admittedAt"])
    # Snowflake's clock (#38 item 4): the head's gate counts from when its launcher starts waiting, after the head's
    # own start (seconds here, at most main.HEAD_START_SECONDS); API stamps are whole seconds, hence the tolerance.
    assert timeout - TOLERANCE_S <= waited <= timeout + HEAD_START_SECONDS, (
        f"failed {waited:.0f}s after admission, not instancesTimeoutSeconds={timeout} after the head started")
    record(cluster, "instances-never-joined", faults=1, jobs=1, lost=0, orphaned=0, converge_s=waited - timeout)
