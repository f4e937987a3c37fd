"""suspend pauses and resumes a job as Job, JobSet and RayJob do; cancel ends it (pure: the status steps, the
plan of its children, its place in the queue)."""

from __future__ import annotations

from kubepool import naming
from kubepool.api import Backend, ConditionStatus, JobPhase, MLJob, MLJobStatus
from kubepool.controller import vocabulary
from kubepool.controller.admission import Decision, decide, waiting_in_order
from kubepool.controller.config import OperatorConfig
from kubepool.controller.jobstatus import Observed, compute_job_status
from kubepool.controller.plan import plan_job
from kubepool.controller.view import claim_of
from support.factories import T0, at, job, pod, pool, with_status

CFG = OperatorConfig()
POOLS = {"cpu": pool()}
ADMIT2 = Decision(True, granted=2)


def _pass(j: MLJob, pods: list, t: float, decision: Decision | None = None) -> MLJob:
    return with_status(j, compute_job_status(j, Observed(pods=pods, now=at(t), decision=decision)))


def _spec(j: MLJob, **update: object) -> MLJob:
    return j.model_copy(update={"spec": j.spec.model_copy(update=update)})


def _conditions(st: MLJobStatus | None) -> dict[str, tuple[str, str]]:
    assert st is not None
    return {c.type: (c.status, c.reason) for c in st.conditions}


def _running(**spec: object) -> MLJob:
    j = _pass(job(targetInstances=2, **spec), [], 0, ADMIT2)
    return _pass(j, [pod(0), pod(1)], 1)


def test_suspending_a_running_job_removes_its_pods_and_releases_its_capacity() -> None:
    j = _running()
    assert j.status is not None and j.status.phase is JobPhase.RUNNING
    paused = _pass(_spec(j, suspend=True), [pod(0), pod(1)], 5)
    st = paused.status
    assert st is not None and (st.phase, st.reason) == (JobPhase.PENDING, vocabulary.SUSPENDED)
    assert st.admitted_at is None and st.instances == [] and st.start_time is None
    assert (st.attempt, st.suspended_attempts) == (1, 1)  # the interrupted attempt ends, uncounted
    assert _conditions(st)["Suspended"] == (ConditionStatus.TRUE, vocabulary.SUSPENDED)
    assert _conditions(st)["Admitted"][0] == ConditionStatus.FALSE
    assert claim_of(paused, "ns", "train").granted == 0
    plan = plan_job(paused, st, [pod(0), pod(1)], POOLS, cfg=CFG, now=at(5))
    assert sorted(plan.delete_pods) == ["train-homogeneouscluster-0", "train-homogeneouscluster-1"]
    assert plan.create_pods == [] and not plan.ensure_children
    kuberay = plan_job(paused, st, [pod(0)], POOLS, cfg=CFG, now=at(5), backend=Backend.KUBERAY)
    assert kuberay.delete_raycluster and kuberay.apply_raycluster is None


def test_a_suspended_job_takes_no_decision_and_creates_nothing() -> None:
    j = _pass(job(targetInstances=2, suspend=True), [], 0, ADMIT2)  # created suspended, e.g. for Kueue
    st = j.status
    assert st is not None and (st.phase, st.reason, st.admitted_at, st.attempt) == (JobPhase.PENDING, vocabulary.SUSPENDED, None, 0)
    assert plan_job(j, st, [], POOLS, cfg=CFG, now=at(0)).create_pods == []


def test_kueues_queue_is_named_while_it_holds_the_job() -> None:
    j = job(suspend=True)
    j.metadata["labels"] = {naming.LABEL_KUEUE_QUEUE: "team-a"}
    st = compute_job_status(j, Observed(pods=[], now=T0))
    assert st.reason == vocabulary.SUSPENDED and "until Kueue admits it from LocalQueue team-a" in (st.message or "")


def test_a_resumed_job_queues_again_then_runs_a_new_attempt_from_scratch() -> None:
    paused = _pass(_spec(_running(), suspend=True), [pod(0), pod(1)], 5)
    resumed = _pass(_spec(paused, suspend=False), [], 20, ADMIT2)  # this pass only records its place
    st = resumed.status
    assert st is not None and (st.phase, st.reason, st.admitted_at, st.queued_at) == (JobPhase.PENDING, vocabulary.RESUMED, None, at(20))
    assert _conditions(st)["Suspended"] == (ConditionStatus.FALSE, vocabulary.RESUMED)
    again = _pass(resumed, [], 21, ADMIT2)
    assert again.status is not None and again.status.admitted_at == at(21)
    plan = plan_job(again, again.status, [], POOLS, cfg=CFG, now=at(21))
    assert [p["metadata"]["name"] for p in plan.create_pods] == ["train-homogeneouscluster-0-r1"]  # head first
    assert _conditions(again.status)["Suspended"] == (ConditionStatus.FALSE, vocabulary.RESUMED)


def test_an_attempt_a_suspension_ended_does_not_count_against_backoff_limit() -> None:
    paused = _pass(_spec(_running(backoffLimit=1), suspend=True), [pod(0), pod(1)], 5)
    resumed = _pass(_pass(_spec(paused, suspend=False), [], 6), [], 7, ADMIT2)
    failed = [pod(0, "Failed", False, attempt=1, message="oom"), pod(1, attempt=1)]
    st = compute_job_status(resumed, Observed(pods=failed, now=at(9)))
    assert (st.phase, st.reason, st.attempt) == (JobPhase.PENDING, vocabulary.RETRYING, 2)
    assert "attempt 1 of 1" in (st.message or "")
    retried = with_status(resumed, st)
    st2 = compute_job_status(retried, Observed(pods=[pod(0, "Failed", False, attempt=2, message="oom")], now=at(12)))
    assert (st2.phase, st2.reason) == (JobPhase.FAILED, vocabulary.HEAD_FAILED)


def test_a_resumed_job_waits_behind_jobs_queued_while_it_was_suspended() -> None:
    resumed = _pass(_spec(_pass(job("old", suspend=True), [], 0), suspend=False), [], 30)
    newer = job("newer", created="2026-01-01T12:00:10Z")  # created after "old", before its resume
    claims = [claim_of(resumed, "ns", "old"), claim_of(newer, "ns", "newer")]
    assert [c.name for c in waiting_in_order(claims, ["cpu"])] == ["newer", "old"]
    assert decide(claims[0], claims, {"cpu": 1}).reason == "Queued"


def test_cancel_ends_the_job_for_good() -> None:
    j = _spec(_running(), cancel=True)
    st = compute_job_status(j, Observed(pods=[pod(0), pod(1)], now=at(5)))
    assert (st.phase, st.reason) == (JobPhase.CANCELLED, vocabulary.CANCELLED)
    assert _conditions(st)["Failed"] == (ConditionStatus.TRUE, vocabulary.CANCELLED)
    plan = plan_job(with_status(j, st), st, [pod(0), pod(1)], POOLS, cfg=CFG, now=at(5))
    assert sorted(plan.delete_pods) == ["train-homogeneouscluster-0", "train-homogeneouscluster-1"]
