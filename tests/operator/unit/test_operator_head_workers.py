"""Head mode, #39 §3 "nothing lost": after the head succeeded, DONE waits for the workers still keeping their
outputs (spec.output), for at most workerGraceSeconds from the head's end; a worker cut off by that bound is
named in the status and the Event, never lost silently (pure: jobsteps, plan)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from kubepool import naming
from kubepool.api import Backend, JobPhase, MLJob, MLJobStatus
from kubepool.controller import jobreconcile, vocabulary
from kubepool.controller.admission import Decision
from kubepool.controller.config import OperatorConfig
from kubepool.controller.jobstatus import Observed, compute_job_status
from kubepool.controller.observed import PodView
from kubepool.controller.plan import plan_job
from support.factories import T0, at, job, pod, with_status

HEAD_ENDED = 10  # seconds after T0
WORKER = "train-homogeneouscluster-1"


def _admitted() -> MLJob:
    j = job(targetInstances=2)
    st = compute_job_status(j, Observed(pods=[], now=T0, decision=Decision(True, granted=2)))
    return with_status(j, st)


def _head() -> PodView:
    return replace(pod(0, "Succeeded", False), finished=at(HEAD_ENDED).strftime("%Y-%m-%dT%H:%M:%SZ"))


def _status(j: MLJob, worker: PodView, t: float, **kw: Any) -> MLJobStatus:
    return compute_job_status(j, Observed(pods=[_head(), worker], now=at(t), **kw))


def test_done_waits_for_a_worker_still_keeping_its_outputs() -> None:
    """While the worker uploads, the job stays RUNNING saying for whom it waits; the plan wakes at the bound and
    deletes nothing; the worker's exit makes it DONE then."""
    j = _admitted()
    waiting = _status(j, pod(1), HEAD_ENDED + 2)
    assert (waiting.phase, waiting.reason, waiting.completion_time) == (JobPhase.RUNNING, vocabulary.WAITING_FOR_WORKERS, None)
    assert f"instance 1 (algo-2, pod {WORKER})" in (waiting.message or "") and waiting.outputs is None
    plan = plan_job(j, waiting, [_head(), pod(1)], {}, cfg=OperatorConfig(worker_grace_seconds=30), now=at(12))
    assert plan.delete_pods == [] and plan.wake_at == at(HEAD_ENDED + 30)
    done = _status(with_status(j, waiting), pod(1, "Succeeded", False), HEAD_ENDED + 3)
    assert (done.phase, done.reason, done.completion_time) == (JobPhase.DONE, vocabulary.COMPLETED, at(HEAD_ENDED + 3))
    assert done.message == "the head finished successfully"


@pytest.mark.parametrize(("grace", "t", "cut"), [(30, HEAD_ENDED + 29, False), (30, HEAD_ENDED + 30, True),
                                                 (5, HEAD_ENDED + 4, False), (5, HEAD_ENDED + 5, True)],
                         ids=["30-within", "30-past", "5-within", "5-past"])
def test_a_worker_still_running_at_the_bound_is_reported_cut_off(grace: int, t: float, cut: bool) -> None:
    """workerGraceSeconds (the operator's KUBEPOOL_OPERATOR_WORKER_GRACE_SECONDS) bounds the wait: a stuck worker
    cannot hold the job RUNNING, and the one cut off is named in the status (and its Event: a Warning); its pod
    is deleted at once."""
    j = _admitted()
    st = _status(j, pod(1), t, worker_grace_seconds=grace)
    if not cut:
        assert (st.phase, st.reason) == (JobPhase.RUNNING, vocabulary.WAITING_FOR_WORKERS)
        return
    assert (st.phase, st.reason) == (JobPhase.DONE, vocabulary.WORKERS_CUT_OFF)
    assert f"instance 1 (algo-2, pod {WORKER}) still running workerGraceSeconds={grace}" in (st.message or "")
    complete = next(c for c in st.conditions if c.type == "Complete")
    assert complete.status == "True" and WORKER in complete.message
    assert vocabulary.WORKERS_CUT_OFF in jobreconcile._WARNING_REASONS
    plan = plan_job(j, st, [_head(), pod(1)], {}, cfg=OperatorConfig(worker_grace_seconds=grace), now=at(t))
    assert plan.delete_pods == [WORKER]


def test_a_worker_that_failed_after_the_head_is_named() -> None:
    st = _status(_admitted(), pod(1, "Failed", False, message="outputs could not be kept: EndpointConnectionError",
                                  exit_code=1), HEAD_ENDED + 1)
    assert (st.phase, st.reason) == (JobPhase.DONE, vocabulary.COMPLETED)
    assert "instance 1 (algo-2" in (st.message or "") and "outputs could not be kept" in (st.message or "")


def test_a_head_without_an_end_time_waits_for_nothing_and_says_so() -> None:
    st = compute_job_status(_admitted(), Observed(pods=[pod(0, "Succeeded", False), pod(1)], now=at(1)))
    assert (st.phase, st.reason) == (JobPhase.DONE, vocabulary.WORKERS_CUT_OFF)


def test_kuberay_does_not_wait() -> None:
    """KubeRay would recreate the ended head's pod and rerun the payload while the job waited."""
    st = _status(_admitted(), pod(1), HEAD_ENDED + 1, backend=Backend.KUBERAY, kuberay_installed=True)
    assert (st.phase, st.reason) == (JobPhase.DONE, vocabulary.COMPLETED)


def test_the_pod_view_reads_the_containers_end_time() -> None:
    body = {"metadata": {"name": "p", "labels": {naming.LABEL_INSTANCE: "0"}}, "spec": {"nodeName": "n"},
            "status": {"phase": "Succeeded", "containerStatuses": [{"state": {"terminated": {
                "exitCode": 0, "finishedAt": "2026-01-01T12:00:10Z"}}}]}}
    view = PodView.of(body)
    assert (view.is_head, view.finished) == (True, "2026-01-01T12:00:10Z")
