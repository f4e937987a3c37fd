"""Pure regressions for the bugs the fault suite found (no cluster): the verdicts the cluster tests time."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from kubepool.api import JobPhase, MLJob
from kubepool.controller import vocabulary
from kubepool.controller.admission import Decision
from kubepool.controller.jobstatus import Observed, compute_job_status
from kubepool.controller.observed import PodView
from support.factories import at, job, pod, with_status


def _running(j: MLJob, n: int) -> MLJob:
    st = compute_job_status(j, Observed(pods=[], now=at(0), decision=Decision(True, granted=n)))
    st = compute_job_status(with_status(j, st), Observed(pods=[pod(i) for i in range(n)], now=at(1)))
    assert st.phase is JobPhase.RUNNING
    return with_status(j, st)


def _deleting(p: PodView) -> PodView:
    return dataclasses.replace(p, deleting=True)


def test_deleted_head_is_a_head_failure_not_a_lost_instance() -> None:
    j = _running(job(targetInstances=2), 2)
    st = compute_job_status(j, Observed(pods=[_deleting(pod(0)), pod(1)], now=at(5)))
    assert (st.phase, st.reason, st.message) == (JobPhase.FAILED, vocabulary.HEAD_FAILED, "the head's pod was deleted")


def test_deleted_head_is_retried_per_backoff_limit() -> None:
    j = _running(job(targetInstances=1, backoffLimit=1), 1)
    st = compute_job_status(j, Observed(pods=[_deleting(pod(0))], now=at(5)))
    assert (st.phase, st.reason, st.attempt) == (JobPhase.PENDING, vocabulary.RETRYING, 1)


def test_deleted_worker_below_min_is_lost_above_min_runs_on() -> None:
    above = _running(job(targetInstances=3, minInstances=2), 3)
    st = compute_job_status(above, Observed(pods=[pod(0), _deleting(pod(1)), pod(2)], now=at(5)))
    assert st.phase is JobPhase.RUNNING
    below = _running(job(targetInstances=2), 2)
    st = compute_job_status(below, Observed(pods=[pod(0), _deleting(pod(1))], now=at(5)))
    assert (st.phase, st.reason) == (JobPhase.FAILED, vocabulary.INSTANCES_LOST)


def test_env_values_reach_the_payload_literally() -> None:
    from kubepool.controller.builders import build_instance_pods
    from kubepool.controller.config import OperatorConfig
    from kubepool.local.agent.podspec import expand
    from support.factories import pool

    hostile = "$(HOME) $$(X) $(KUBEPOOL_INSTANCE_ID) ; rm -rf / `id` $"
    j = job(targetInstances=1, env=[{"name": "LIT", "value": hostile}])
    spec = build_instance_pods(j, {"cpu": pool()}, granted=1, attempt=0, cfg=OperatorConfig())[0]["spec"]
    value = next(e["value"] for e in spec["containers"][0]["env"] if e["name"] == "LIT")
    assert expand(value, {"HOME": "/root", "X": "x", "KUBEPOOL_INSTANCE_ID": "0"}) == hostile


def test_parallel_mode_runs_without_instances_that_were_never_admitted(monkeypatch: object) -> None:
    """min < target on a short pool: the operator creates only the admitted prefix of instances; the others'
    names never resolve, and the instances must not wait for them until the instances timeout."""
    import socket
    import time

    from kubepool.controller.builders import build_job_contract
    from kubepool.runtime import main as runtime
    from support.factories import pool

    doc = build_job_contract(job(targetInstances=3, minInstances=2, mode="parallel", instancesTimeoutSeconds=600),
                             {"cpu": pool()})
    known = {doc.instances[1].dns: "10.0.0.2"}

    def resolve(name: str) -> str:
        if name in known:
            return known[name]
        raise socket.gaierror(-2, "Name or service not known")

    monkeypatch.setattr(socket, "gethostbyname", resolve)  # type: ignore[attr-defined]
    doc = doc.model_copy(update={"min_wait_seconds": 0.5})
    started = time.monotonic()
    ips = runtime.parallel_ips(doc, doc.identity(0), {"KUBEPOOL_POD_IP": "10.0.0.1"}, time.monotonic() + 600)
    assert ips == ["10.0.0.1", "10.0.0.2"] and time.monotonic() - started < 5


def test_live_instances_flags_two_live_pods_of_one_instance_at_once() -> None:
    """The recorder's continuous duplicate check (faultkit.LiveInstances), fed watch events."""
    from faultkit import LiveInstances

    seen = LiveInstances()
    seen.on_event("ADDED", "j-g-0", "uid1", "0", False, "Pending")
    seen.on_event("MODIFIED", "j-g-0", "uid1", "0", False, "Running")  # the same pod again: no duplicate
    seen.on_event("ADDED", "k-g-0", "uid2", "0", False, "Running")  # another job's instance 0
    seen.on_event("MODIFIED", "j-g-0", "uid1", "0", False, "Failed")  # attempt 0 ended ...
    seen.on_event("ADDED", "j-g-0-r1", "uid1", "0", False, "Pending")  # ... so its retry may start
    seen.on_event("ADDED", "j-g-1-r1", "uid1", "1", False, "Pending")
    seen.on_event("MODIFIED", "j-g-1-r1", "uid1", "1", True, "Running")  # being deleted, on no node: gone
    seen.on_event("ADDED", "j-g-1-r1", "uid1", "1", False, "Pending")  # re-created under its name
    assert seen.violations == []
    seen.on_event("ADDED", "j-g-0-r2", "uid1", "0", False, "Pending")  # while j-g-0-r1 still lives
    assert len(seen.violations) == 1 and "j-g-0-r2 live with j-g-0-r1" in seen.violations[0]
    seen.on_event("DELETED", "j-g-0-r1", "uid1", "0", False, "Running")
    seen.on_event("MODIFIED", "j-g-0-r2", "uid1", "0", True, "Running", "node-a")  # deleted, still on its node
    seen.on_event("ADDED", "j-g-0-r3", "uid1", "0", False, "Pending")  # its retry may not start yet
    assert len(seen.violations) == 2 and "j-g-0-r3 live with j-g-0-r2" in seen.violations[1]
    seen.on_event("MODIFIED", "j-g-0-r2", "uid1", "0", True, "Failed", "node-a")  # ended: the slot is free
    seen.on_event("MODIFIED", "j-g-0-r3", "uid1", "0", False, "Running", "node-b")
    assert len(seen.violations) == 2
    seen.reset()  # a re-listed watch starts from what it lists
    assert seen.live == {}


def test_an_output_prefix_is_claimed_by_the_first_job_of_its_name_and_refused_to_the_next(tmp_path: Path) -> None:
    """A job deleted and created again under its name: the new one's instances find the earlier uid's marker
    under `<location>/<job>/` and write nothing there (runtime.ownership, claimed before the payload)."""
    from kubepool.contract import OutputTarget
    from kubepool.runtime import outputs, ownership

    store = outputs._Store(OutputTarget(location="pvc://out/models", local_path=str(tmp_path)), {})
    uri = ownership.claim(store, "pvc://out/models", "ns", "train", "uid-1")
    assert uri == "pvc://out/models/train/kubepool-owner.json"
    assert json.loads((tmp_path / "train" / "kubepool-owner.json").read_text())["uid"] == "uid-1"
    assert ownership.claim(store, "pvc://out/models/", "ns", "train", "uid-1") == uri  # another instance, a retry
    with pytest.raises(ownership.OutputLocationOwned, match=r"another MLJob ns/train \(uid uid-1\): nothing was written"):
        ownership.claim(store, "pvc://out/models", "ns", "train", "uid-2")
    assert json.loads((tmp_path / "train" / "kubepool-owner.json").read_text())["uid"] == "uid-1"
    assert ownership.claim(store, "pvc://out/models", "ns", "other", "uid-2")  # another name: its own prefix
