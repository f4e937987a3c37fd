"""MLJob status: the phase machine (jobsteps), gate, timeouts, retries, conditions (pure)."""

from __future__ import annotations

import json
import sys

import pytest

from kubepool.api import Backend, JobPhase, MLJob, MLJobStatus
from kubepool.controller import jobstatus as S
from kubepool.controller import vocabulary
from kubepool.controller.admission import Decision
from kubepool.controller.jobstatus import Observed, compute_job_status
from support.factories import T0, at, job, pod, with_status

ADMIT3 = Decision(True, granted=3)


@pytest.fixture(autouse=True)
def _the_previous_status_is_never_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    """compute_job_status shares the previous status' lists and entries with the new one (a shallow copy), so no
    step may change them in place: every call in this module checks that the job's status is as it was."""
    real = S.compute_job_status

    def checked(j: MLJob, obs: Observed) -> MLJobStatus:
        before = j.status.model_dump(mode="json") if j.status else None
        new = real(j, obs)
        assert (j.status.model_dump(mode="json") if j.status else None) == before, "the previous status was changed"
        return new

    monkeypatch.setattr(sys.modules[__name__], "compute_job_status", checked)


def admitted(j: MLJob, granted: int = 3, **extra: object) -> MLJob:
    """The job as it is right after admission at T0."""
    st = compute_job_status(j, Observed(pods=[], now=T0, decision=Decision(True, granted=granted)))
    return with_status(j, st.model_copy(update=extra))


def run(j: MLJob, pods: list, t: float = 1, **kw: object) -> MLJobStatus:
    return compute_job_status(j, Observed(pods=pods, now=at(t), **kw))  # type: ignore[arg-type]


def test_admission_sets_instances_and_waits() -> None:
    st = compute_job_status(job(targetInstances=3, minInstances=2), Observed(pods=[], now=T0, decision=ADMIT3))
    assert st.phase is JobPhase.PENDING and st.reason == vocabulary.WAITING_FOR_INSTANCES
    assert st.admitted_at == T0 and len(st.instances) == 3 and st.ready == "0/3"
    assert "0 of 2 instances ready" in (st.message or "")


@pytest.mark.parametrize(("decision", "reason"), [
    (Decision(False, reason="Queued", message="waiting"), "Queued"),
    (Decision(False, reason="PoolNotFound", message="ComputePool x does not exist"), "PoolNotFound"),
], ids=["queued", "pool-not-found"])
def test_not_admitted(decision: Decision, reason: str) -> None:
    st = compute_job_status(job(), Observed(pods=[], now=T0, decision=decision))
    assert (st.phase, st.reason, st.admitted_at) == (JobPhase.PENDING, reason, None)
    cond = {c.type: c for c in st.conditions}
    assert cond["Admitted"].status == "False" and cond["Admitted"].reason == reason


@pytest.mark.parametrize(("credentials", "refused"), [
    ({"aws": {"kubepool.dev/credentials": "true"}}, ""),
    ({"aws": {}}, "Secret aws lacks the label kubepool.dev/credentials=true"),
    ({"aws": {"kubepool.dev/credentials": "yes"}}, "Secret aws lacks the label kubepool.dev/credentials=true"),
    ({"aws": None}, "Secret aws does not exist"),
], ids=["opted-in", "no-label", "other-value", "missing"])
def test_credentials_must_opt_in(credentials: dict, refused: str) -> None:
    """A channel's credentialsSecret is used only with its owner's label: else FAILED before admission."""
    st = compute_job_status(job(), Observed(pods=[], now=T0, decision=ADMIT3, credentials=credentials))
    if not refused:
        assert st.phase is JobPhase.PENDING and st.admitted_at == T0
        return
    assert (st.phase, st.reason, st.admitted_at) == (JobPhase.FAILED, vocabulary.CREDENTIALS_NOT_ALLOWED, None)
    assert refused in (st.message or "") and "credentialsSecret" in (st.message or "")


def test_a_refusal_of_the_pods_is_the_reason_while_waiting_and_in_the_timeout() -> None:
    """An admitted job whose pods the API server refuses (a ResourceQuota) says so at once, and still fails at
    instancesTimeoutSeconds, saying why."""
    j = admitted(job(targetInstances=2))
    quota = 'pods "train-0" is forbidden: exceeded quota: no-pods, requested: pods=1, used: pods=0, limited: pods=0'
    st = run(j, [], t=1, refused=quota)
    assert (st.phase, st.reason) == (JobPhase.PENDING, vocabulary.API_REFUSED) and quota in (st.message or "")
    assert run(j, [], t=1).reason == vocabulary.WAITING_FOR_INSTANCES  # refusal gone: waiting again
    late = run(j, [], t=j.spec.instances_timeout_seconds + 1, refused=quota)
    assert (late.phase, late.reason) == (JobPhase.FAILED, vocabulary.INSTANCES_UNAVAILABLE) and quota in (late.message or "")


@pytest.mark.parametrize(("pods", "t", "phase", "reason"), [
    ([pod(0), pod(1, ready=False), pod(2, "Pending", False)], 1, JobPhase.PENDING, vocabulary.WAITING_FOR_INSTANCES),
    ([pod(0), pod(1), pod(2, "Pending", False)], 1, JobPhase.RUNNING, vocabulary.INSTANCES_READY),
    ([pod(0, "Pending", False), pod(1), pod(2, "Pending", False)], 31, JobPhase.FAILED, vocabulary.INSTANCES_UNAVAILABLE),
    ([pod(0, ready=False), pod(1, ready=False), pod(2, "Pending", False)], 31, JobPhase.PENDING, vocabulary.WAITING_FOR_INSTANCES),
    ([pod(0, "Succeeded", False), pod(1, "Succeeded", False), pod(2, "Succeeded", False)], 1, JobPhase.DONE,
     vocabulary.COMPLETED),
    ([pod(0, "Failed", False, message="ZeroDivisionError: boom", exit_code=1), pod(1)], 1, JobPhase.FAILED, vocabulary.HEAD_FAILED),
], ids=["gate-closed", "gate-open-min", "instances-timeout", "head-runs-its-gate-has-the-clock", "head-succeeded",
        "head-failed"])
def test_admitted_job(pods: list, t: float, phase: JobPhase, reason: str) -> None:
    j = admitted(job(targetInstances=3, minInstances=2, instancesTimeoutSeconds=30))
    st = run(j, pods, t)
    assert (st.phase, st.reason) == (phase, reason)
    if reason == vocabulary.INSTANCES_UNAVAILABLE:
        assert "1 of 2 required instances ready" in (st.message or "")
    if reason == vocabulary.HEAD_FAILED:
        assert st.message == "ZeroDivisionError: boom" and st.completion_time == at(t)


def test_only_head_mode_leaves_the_instances_clock_to_the_heads_launcher() -> None:
    """#38 item 4: in head mode the instances timeout counts from the launcher's wait (runtime/gate.py), so the
    operator does not fail a job whose head runs (pip install, downloads, Ray start take what they take); parallel
    mode has no gate: the operator's clock from admission still decides there."""
    pods = [pod(0, ready=False), pod(1, "Pending", False)]
    head = admitted(job(targetInstances=2, instancesTimeoutSeconds=30))
    assert run(head, pods, 31).phase is JobPhase.PENDING
    parallel = admitted(job(targetInstances=2, instancesTimeoutSeconds=30, mode="parallel"))
    assert (run(parallel, pods, 31).phase, run(parallel, pods, 31).reason) == (JobPhase.FAILED, vocabulary.INSTANCES_UNAVAILABLE)


def test_unscheduled_pods_are_not_alive() -> None:
    j = admitted(job(targetInstances=3, minInstances=2))
    running = with_status(j, run(j, [pod(0), pod(1), pod(2, "Pending", False)]))
    st = run(running, [pod(0), pod(1, "Failed", False), pod(2, "Pending", False)], 2)
    assert (st.phase, st.reason) == (JobPhase.FAILED, vocabulary.INSTANCES_LOST)


def test_running_tolerates_losing_a_worker_above_min() -> None:
    j = admitted(job(targetInstances=3, minInstances=2))
    running = with_status(j, run(j, [pod(0), pod(1), pod(2)]))
    assert running.status is not None and running.status.phase is JobPhase.RUNNING
    st = run(running, [pod(0), pod(1), pod(2, "Failed", False)], 2)
    assert (st.phase, st.ready) == (JobPhase.RUNNING, "2/3")
    st = run(running, [pod(0), pod(1, "Failed", False), pod(2, "Failed", False)], 3)
    assert (st.phase, st.reason) == (JobPhase.FAILED, vocabulary.INSTANCES_LOST)


def test_not_ready_running_pod_is_not_lost_but_vanished_one_is() -> None:
    j = admitted(job(targetInstances=2))
    running = with_status(j, run(j, [pod(0), pod(1)]))
    assert run(running, [pod(0), pod(1, ready=False)], 2).phase is JobPhase.RUNNING
    assert run(running, [pod(0), pod(1, "Unknown", False)], 2).phase is JobPhase.RUNNING
    st = run(running, [pod(0)], 3)
    assert (st.phase, st.reason) == (JobPhase.FAILED, vocabulary.INSTANCES_LOST)
    assert "train-homogeneouscluster-1" in (st.message or "")


def test_released_workers_are_not_lost() -> None:
    j = admitted(job(targetInstances=3))
    running = with_status(j, run(j, [pod(0), pod(1), pod(2)]))
    st = run(running, [pod(0), pod(1, "Succeeded", False), pod(2, "Succeeded", False)], 5)
    assert st.phase is JobPhase.RUNNING
    st = run(running, [pod(0), pod(1, "Succeeded", False), pod(2, "Failed", False)], 6)
    assert st.phase is JobPhase.RUNNING  # released: the head's exit decides


@pytest.mark.parametrize("mode", ["parallel", "sagemaker"])
def test_every_instance_modes_end_when_all_instances_end(mode: str) -> None:
    """The payload runs on every instance: the head finishing first is not the end (SageMaker's rule)."""
    j = admitted(job(targetInstances=3, mode=mode))
    running = with_status(j, run(j, [pod(0), pod(1), pod(2)]))
    assert run(running, [pod(0, "Succeeded", False), pod(1), pod(2)], 2).phase is JobPhase.RUNNING
    done = run(running, [pod(0, "Succeeded", False), pod(1, "Succeeded", False), pod(2, "Succeeded", False)], 3)
    assert (done.phase, done.reason) == (JobPhase.DONE, vocabulary.COMPLETED)
    failed = run(running, [pod(0, "Succeeded", False), pod(1, "Failed", False, message="bad shard"), pod(2)], 3)
    assert (failed.phase, failed.reason) == (JobPhase.FAILED, vocabulary.INSTANCE_FAILED)
    assert failed.message == "instance 1 failed: bad shard"


def test_head_failure_retries_then_fails() -> None:
    j = admitted(job(targetInstances=2, backoffLimit=1))
    st = run(j, [pod(0, "Failed", False, message="oom"), pod(1)], 5)
    assert (st.phase, st.reason, st.attempt, st.admitted_at) == (JobPhase.PENDING, vocabulary.RETRYING, 1, at(5))
    assert [i.pod for i in st.instances] == ["train-homogeneouscluster-0-r1", "train-homogeneouscluster-1-r1"]
    retried = with_status(j, st)
    old = [pod(0, "Failed", False), pod(1)]
    st2 = run(retried, [*old, pod(0, "Failed", False, attempt=1, message="oom again")], 9)
    assert (st2.phase, st2.reason, st2.message) == (JobPhase.FAILED, vocabulary.HEAD_FAILED, "oom again")


@pytest.mark.parametrize(("spec", "kw", "reason"), [
    ({"cancel": True}, {}, vocabulary.CANCELLED),
    ({"backend": "kuberay"}, {"backend": Backend.KUBERAY}, vocabulary.KUBERAY_NOT_INSTALLED),
], ids=["cancel", "kuberay-missing"])
def test_terminal_without_pods(spec: dict, kw: dict, reason: str) -> None:
    st = compute_job_status(job(**spec), Observed(pods=[], now=T0, decision=ADMIT3, **kw))
    assert st.phase in (JobPhase.CANCELLED, JobPhase.FAILED) and st.reason == reason
    assert {c.type: c.status for c in st.conditions}["Failed"] == "True"


def test_deadline_counts_from_first_admission_across_retries() -> None:
    j = admitted(job(targetInstances=1, activeDeadlineSeconds=10, backoffLimit=1))
    running = run(j, [pod(0)], 5)
    assert running.phase is JobPhase.RUNNING and running.start_time == at(5)
    retried = with_status(j, run(with_status(j, running), [pod(0, "Failed", False)], 6))
    assert retried.status is not None and retried.status.admitted_at == at(6)
    st = run(retried, [pod(0, attempt=1)], 10)
    assert (st.phase, st.reason) == (JobPhase.FAILED, vocabulary.DEADLINE_EXCEEDED)


def test_finished_is_sticky_and_status_is_stable() -> None:
    j = admitted(job(targetInstances=1))
    done = with_status(j, run(j, [pod(0, "Succeeded", False)], 3))
    again = run(done, [pod(0, "Succeeded", False)], 100)
    assert again.phase is JobPhase.DONE and not S.status_changed(done.status, again)


def test_condition_transition_time_kept() -> None:
    j = admitted(job(targetInstances=2))
    st1 = with_status(j, run(j, [pod(0), pod(1, ready=False)], 1))
    st2 = run(st1, [pod(0), pod(1, ready=False)], 50)
    assert {c.type: c.last_transition_time for c in st2.conditions}["Admitted"] == T0


def test_shrink_then_grow_waits_for_the_new_instance_while_the_old_pod_leaves() -> None:
    """scale_cluster(2) then scale_cluster(3) at once: the shrunk instance's pod is still terminating when the
    grown job counts its members. The grown instance takes a new id (algo-3), never the leaving one's (algo-2), and
    that pod, no longer an instance of the job, is not a lost member."""
    from dataclasses import replace

    j = admitted(job(targetInstances=3))
    running = with_status(j, run(j, [pod(0), pod(1), pod(2)]))
    shrunk_job = job(targetInstances=2, status=running.status.model_dump(by_alias=True, mode="json"))  # type: ignore[union-attr]
    leaving = replace(pod(2), deleting=True)
    shrunk = with_status(shrunk_job, run(shrunk_job, [pod(0), pod(1), leaving], 2, decision=Decision(True, granted=2)))
    assert shrunk.status is not None and (shrunk.status.phase, len(shrunk.status.instances)) == (JobPhase.RUNNING, 2)
    assert shrunk.status.instance_layout is not None and shrunk.status.instance_layout.next_id == 3
    grown_job = job(targetInstances=3, status=shrunk.status.model_dump(by_alias=True, mode="json"))
    grown = with_status(grown_job, run(grown_job, [pod(0), pod(1), leaving], 3, decision=Decision(True, granted=3)))
    assert grown.status is not None and grown.status.phase is JobPhase.RUNNING
    assert [(i.instance_id, i.host, i.phase) for i in grown.status.instances] == [
        (0, "algo-1", "Running"), (1, "algo-2", "Running"), (3, "algo-4", None)]
    st = run(grown, [pod(0), pod(1), leaving], 4)  # the next pass reads that entry back: still not lost
    assert st.phase is JobPhase.RUNNING, st.message
    successor = replace(pod(3, "Pending", False), name="train-successor")
    st = run(grown, [pod(0), pod(1), leaving, successor], 5)
    assert st.phase is JobPhase.RUNNING and st.instances[2].pod == "train-successor"


def test_a_member_deleted_while_running_is_lost() -> None:
    from dataclasses import replace

    j = admitted(job(targetInstances=3))
    running = with_status(j, run(j, [pod(0), pod(1), pod(2)]))
    st = run(running, [pod(0), pod(1), replace(pod(2), deleting=True)], 2)
    assert (st.phase, st.reason) == (JobPhase.FAILED, vocabulary.INSTANCES_LOST)


def test_the_gate_counts_the_head() -> None:
    """Two ready workers of a 2-of-3 job are not a running job while the head is Pending: it runs the payload."""
    j = admitted(job(targetInstances=3, minInstances=2))
    st = run(j, [pod(0, "Pending", False), pod(1), pod(2)])
    assert (st.phase, st.reason) == (JobPhase.PENDING, vocabulary.WAITING_FOR_INSTANCES)
    assert "the head is not ready" in (st.message or "")
    assert run(j, [pod(0), pod(1), pod(2, "Pending", False)]).phase is JobPhase.RUNNING


@pytest.mark.parametrize(("spec", "url"), [({}, True), ({"ray": {"dashboard": False}}, False), ({"mode": "parallel"}, False)],
                         ids=["head-mode", "dashboard-off", "no-ray"])
def test_dashboard_address_only_where_one_runs(spec: dict, url: bool) -> None:
    j = admitted(job(targetInstances=2, **spec), granted=2)
    st = run(j, [pod(0), pod(1)])
    assert st.phase is JobPhase.RUNNING and (st.ray_dashboard is not None) is url


def test_the_conditions_written_are_the_ones_the_crd_describes() -> None:
    from kubepool.api.mljob import JOB_CONDITION_TYPES

    st = compute_job_status(job(), Observed(pods=[], now=T0))
    assert tuple(c.type for c in st.conditions) == JOB_CONDITION_TYPES
    assert all(c.observed_generation == 1 for c in st.conditions)
    described = MLJobStatus.model_fields["conditions"].description or ""
    assert all(t in described for t in JOB_CONDITION_TYPES) and "Running" not in described


def test_instances_that_never_joined_the_head_are_instances_unavailable() -> None:
    """R4's second path: every pod ran (the operator saw the job RUNNING), a worker never joined the head's Ray
    cluster, and the head's gate timed out: the same verdict as instances that never started."""
    from kubepool.contract import INSTANCES_UNAVAILABLE

    said = json.dumps({"error": "InstancesTimeoutError: waiting for 2 instances, only 1 available",
                       "success": False, "exitCode": 1, "instance": 0, "reason": INSTANCES_UNAVAILABLE})
    j = admitted(job(targetInstances=2))
    st = run(j, [pod(0, "Failed", False, message=said, exit_code=1), pod(1)], 1)
    assert (st.phase, st.reason) == (JobPhase.FAILED, vocabulary.INSTANCES_UNAVAILABLE) and "only 1 available" in (st.message or "")


def test_a_failure_the_runtime_names_is_the_jobs_reason() -> None:
    from kubepool.contract import PIP_INSTALL_FAILED

    said = json.dumps({"error": "pip install tabulate failed (exit 1):\nNo matching distribution found for tabulate",
                       "success": False, "exitCode": 1, "instance": 0, "reason": PIP_INSTALL_FAILED})
    j = admitted(job(targetInstances=2))
    st = run(j, [pod(0, "Failed", False, message=said, exit_code=1), pod(1)], 1)
    assert (st.phase, st.reason) == (JobPhase.FAILED, PIP_INSTALL_FAILED)
    assert st.message is not None and st.message.endswith("No matching distribution found for tabulate")
    # A reason the runtime does not give is not taken from a payload's own JSON output.
    forged = json.dumps({"error": "x", "reason": "Completed"})
    assert run(j, [pod(0, "Failed", False, message=forged, exit_code=1), pod(1)], 1).reason == vocabulary.HEAD_FAILED


def test_a_done_job_names_its_outputs() -> None:
    out = {"s3": {"uri": "s3://models/runs"}}
    j = admitted(job(targetInstances=2, output=out))
    done = run(j, [pod(0, "Succeeded", False), pod(1)], 1)
    assert done.phase is JobPhase.DONE and done.outputs is not None
    assert (done.outputs.model_artifacts, done.outputs.output_data) == (
        "s3://models/runs/train/output/model.tar.gz", "s3://models/runs/train/output/output.tar.gz")
    failed = run(j, [pod(0, "Failed", False, exit_code=1), pod(1)], 1)
    assert failed.phase is JobPhase.FAILED and failed.outputs is None  # as SageMaker: ModelArtifacts on success
    assert run(admitted(job(targetInstances=2)), [pod(0, "Succeeded", False), pod(1)], 1).outputs is None
    pvc = run(admitted(job(output={"persistentVolumeClaim": {"claimName": "results", "subPath": "team"}})),
              [pod(0, "Succeeded", False)], 1)
    assert pvc.outputs is not None and pvc.outputs.model_artifacts == "pvc://results/team/train/output/model.tar.gz"
