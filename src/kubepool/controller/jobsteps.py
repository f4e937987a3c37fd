"""PURE: how an unfinished MLJob moves along PENDING → RUNNING → DONE/FAILED, as named steps in order of
precedence (STEPS), each reading one pass over the job (`Pass`). `jobstatus.compute_job_status` runs them."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta

from kubepool import naming
from kubepool.api import Backend, JobPhase, MLJob, MLJobStatus
from kubepool.contract import RunMode, runtime_failure_error, runtime_failure_reason
from kubepool.controller import vocabulary
from kubepool.controller.admission import Decision
from kubepool.controller.builders.common import Placement
from kubepool.controller.builders.pods import shared_claims
from kubepool.controller.jobpass import Observed, Pass, first_admitted, instances_of
from kubepool.controller.observed import FAILED, RUNNING, SUCCEEDED, PodView


# Each step reads the pass and either decides the job's status for this pass (returns True: the later steps do
# not run) or leaves it to the next one. The order is the order of precedence.
def _cancelled(p: Pass) -> bool:
    return p.spec.cancel and p.finish(JobPhase.CANCELLED, vocabulary.CANCELLED, "the job was cancelled; its pods are removed")


def _suspended(p: Pass) -> bool:
    """Paused (spec.suspend): no pods, no capacity, PENDING. An attempt it interrupts ends without counting
    against backoffLimit; the resumed job starts the next one from scratch."""
    if not p.spec.suspend:
        return False
    st = p.st
    if st.admitted_at is not None:
        st.attempt += 1
        st.suspended_attempts += 1
    st.admitted_at, st.start_time, st.ray_dashboard, st.instances = None, None, None, []
    st.instance_layout = None  # the resumed job starts from scratch: consecutive ids again
    queue = (p.job.metadata.get("labels") or {}).get(naming.LABEL_KUEUE_QUEUE)
    st.phase, st.reason = JobPhase.PENDING, vocabulary.SUSPENDED
    st.message = (f"suspended until Kueue admits it from LocalQueue {queue} (it sets spec.suspend to false)" if queue
                  else "suspended (spec.suspend): its pods are removed and its capacity released; it runs from "
                       "scratch when resumed")
    return True


def _resumed(p: Pass) -> bool:
    """A suspended job set to run again joins the end of its pools' queue (queuedAt) before it takes a decision."""
    st = p.st
    if st.reason != vocabulary.SUSPENDED:
        return False
    st.queued_at = p.now
    st.phase, st.reason, st.message = JobPhase.PENDING, vocabulary.RESUMED, "resumed: waiting for its turn in its pools' queue"
    return True


def _kuberay_missing(p: Pass) -> bool:
    return p.obs.backend is Backend.KUBERAY and not p.obs.kuberay_installed and p.finish(
        JobPhase.FAILED, vocabulary.KUBERAY_NOT_INSTALLED,
        "backend kuberay needs the ray.io RayCluster CRD, which is not installed")


def refused_credentials(credentials: Mapping[str, Mapping[str, str] | None]) -> str:
    """Why the job may not read its channels' credential Secrets ("" when it may): each must exist and opt in."""
    want = f"{naming.LABEL_CREDENTIALS}={naming.CREDENTIALS_OPT_IN}"
    why = [f"Secret {name} does not exist" if labels is None else
           f"Secret {name} lacks the label {want} (its owner's consent that jobs may read it)"
           for name, labels in credentials.items()
           if labels is None or labels.get(naming.LABEL_CREDENTIALS) != naming.CREDENTIALS_OPT_IN]
    return "; ".join(why) + "; channels[].source.s3.credentialsSecret" if why else ""


def _credentials_refused(p: Pass) -> bool:
    message = refused_credentials(p.obs.credentials)
    return bool(message) and p.finish(JobPhase.FAILED, vocabulary.CREDENTIALS_NOT_ALLOWED, message)


def refused_volumes(job: MLJob, instances: int, modes: Mapping[str, Sequence[str] | None]) -> str:
    """Why the job's instances cannot all write its output or checkpoint claim ("" when they can): more than one
    instance runs on more than one node, where only a ReadWriteMany claim can be mounted by all of them."""
    if instances <= 1:
        return ""
    fields = shared_claims(job)
    why = [f"{fields[name]}: PersistentVolumeClaim {name} is {', '.join(got) or 'without accessModes'}, but all "
           f"{instances} instances of the job write to it from their own nodes: it needs accessModes "
           f"[ReadWriteMany] (or use an s3 location)"
           for name, got in modes.items() if name in fields and got is not None and "ReadWriteMany" not in got]
    return "; ".join(why)


def _volumes_refused(p: Pass) -> bool:
    message = refused_volumes(p.job, len(p.layout), p.obs.claim_modes)
    return bool(message) and p.finish(JobPhase.FAILED, vocabulary.VOLUME_NOT_SHARED, message)


def _admission(p: Pass) -> bool:
    """A job not admitted yet takes the decision (and stays PENDING while refused); an admitted one follows a
    new grant (scale_cluster resized it)."""
    st, decision = p.st, p.obs.decision
    if st.admitted_at is None:
        d = decision or Decision(False, reason=vocabulary.PENDING, message="waiting for admission")
        if not d.admitted:
            st.phase, st.reason, st.message = JobPhase.PENDING, d.reason, d.message
            return True
        st.admitted_at = p.now
        st.instances = instances_of(p.job, p.layout, d.granted, [], st.attempt)
    elif decision is not None and decision.admitted and decision.granted != len(st.instances):
        st.instances = instances_of(p.job, p.layout, decision.granted, p.obs.pods, st.attempt)
    return False


def _deadline(p: Pass) -> bool:
    limit, since = p.spec.active_deadline_seconds, first_admitted(p.st)
    return bool(limit and since and p.now >= since + timedelta(seconds=limit)) and p.finish(
        JobPhase.FAILED, vocabulary.DEADLINE_EXCEEDED, f"the job ran longer than activeDeadlineSeconds={limit}")


def _observe(p: Pass) -> bool:
    p.current = [pod for pod in p.obs.pods if pod.attempt == p.st.attempt]
    p.head = next((pod for pod in p.current if pod.is_head), None)
    return False


def _every(p: Pass) -> bool:
    """parallel and sagemaker modes run the payload on every instance: as on SageMaker, the job is done when
    every instance succeeded and failed when any instance failed; in head mode the head's exit decides."""
    return p.spec.mode is not RunMode.HEAD


def _succeeded(p: Pass) -> bool:
    granted = len(p.st.instances)
    if _every(p) and granted and sum(1 for pod in p.current if pod.phase == SUCCEEDED) >= granted:
        p.observe_instances()
        return p.finish(JobPhase.DONE, vocabulary.COMPLETED, f"all {granted} instances finished successfully")
    if not _every(p) and p.head is not None and p.head.phase == SUCCEEDED:
        return _head_succeeded(p, p.head)
    return False


def workers_deadline(head: PodView, grace_seconds: int) -> datetime | None:
    """Until when a head-mode job whose head ended waits for its workers: workerGraceSeconds from the head's
    end (None: its end time is unreadable, so no wait)."""
    try:
        ended = datetime.fromisoformat(head.finished)
    except ValueError:
        return None
    return ended + timedelta(seconds=grace_seconds)


def _head_succeeded(p: Pass, head: PodView) -> bool:
    """The head said its workers may leave; each worker then keeps its own outputs (spec.output) before it exits.
    DONE waits until every worker pod that reached a node has ended, so DONE means the outputs are there and the
    workers' pods are not deleted under an upload; for at most workerGraceSeconds from the head's end, after which
    the workers still running are named (status and Event) as cut off. Not with KubeRay, which would recreate the
    head's pod and rerun the payload while the job waited."""
    st = p.st
    p.observe_instances()
    workers = [pod for pod in p.current if not pod.is_head and pod.node]
    running = [pod for pod in workers if not pod.terminated]
    until = workers_deadline(head, p.obs.worker_grace_seconds)
    if running and p.obs.backend is Backend.PODS and until is not None and p.now < until:
        st.phase, st.reason = JobPhase.RUNNING, vocabulary.WAITING_FOR_WORKERS
        st.start_time = st.start_time or p.now
        st.message = (f"the head finished successfully; waiting up to workerGraceSeconds={p.obs.worker_grace_seconds} "
                      f"for {_named(running)} to keep its outputs and exit")
        return True
    said = [f"{_named([pod])} failed after the head finished: {_said(pod.message) or f'exit code {pod.exit_code}'}"
            for pod in workers if pod.phase == FAILED]
    if running and p.obs.backend is Backend.PODS:
        said.insert(0, f"{_named(running)} still running workerGraceSeconds={p.obs.worker_grace_seconds} after the "
                       "head ended: stopped, what it had not yet kept of its outputs is lost")
        return p.finish(JobPhase.DONE, vocabulary.WORKERS_CUT_OFF, "; ".join(["the head finished successfully", *said]))
    return p.finish(JobPhase.DONE, vocabulary.COMPLETED, "; ".join(["the head finished successfully", *said]))


def _named(pods: Sequence[PodView]) -> str:
    return ", ".join(f"instance {pod.instance_id} ({naming.sagemaker_host(pod.instance_id)}, pod {pod.name})"
                     for pod in sorted(pods, key=lambda pod: pod.instance_id))


def _failed(p: Pass) -> bool:
    """A head that failed, vanished while RUNNING or is being deleted (by hand, eviction, node loss) is a failed
    head: retried per backoffLimit, never merely counted as one lost instance. In parallel and sagemaker modes a
    failed peer fails the job the same way; a head that succeeded has only to wait for its peers, even while
    KubeRay deletes its terminated pod (held by the outcome finalizer until the job finishes)."""
    st, head, spec = p.st, p.head, p.spec
    failed_peer = next((pod for pod in p.current if _every(p) and not pod.is_head and pod.phase == FAILED), None)
    head_gone = head is None and st.phase is JobPhase.RUNNING
    head_deleted = head is not None and head.deleting and head.phase not in (FAILED, SUCCEEDED)
    if not ((head is not None and head.phase == FAILED) or head_gone or head_deleted or failed_peer is not None):
        return False
    why = ("the head's pod disappeared" if head is None else "the head's pod was deleted" if head_deleted
           else _said(head.message) or f"exit code {head.exit_code}" if head.phase == FAILED
           else f"instance {failed_peer.instance_id} failed: {_said(failed_peer.message) or f'exit code {failed_peer.exit_code}'}"
           if failed_peer is not None else "")
    if st.attempt - st.suspended_attempts < spec.backoff_limit:
        st.attempt += 1
        st.admitted_at = p.now  # the new attempt gets the whole instances timeout again
        p.observe_instances()
        st.phase, st.reason = JobPhase.PENDING, vocabulary.RETRYING
        st.message = vocabulary.cut(f"attempt {st.attempt - st.suspended_attempts} of {spec.backoff_limit} after the head failed: {why}")
        return True
    p.observe_instances()
    head_failed = head is None or head_deleted or head.phase == FAILED
    said = head if head_failed else failed_peer
    said_message = said.message if said is not None else None
    named = runtime_failure_reason(said_message)
    if named is not None:  # the runtime said what failed (e.g. PipInstallFailed): that is the job's reason
        return p.finish(JobPhase.FAILED, named, vocabulary.cut(runtime_failure_error(said_message) or why) or why)
    return p.finish(JobPhase.FAILED, vocabulary.HEAD_FAILED if head_failed else vocabulary.INSTANCE_FAILED, why)


def _said(message: str | None) -> str | None:
    """A failed instance's own words: the `error` of the runtime's termination message, else the message."""
    return runtime_failure_error(message) or message


def _ready_count(st: MLJobStatus) -> int:
    return sum(1 for i in st.instances if i.ready)


def _running(p: Pass) -> bool:
    """A RUNNING job stays RUNNING unless it lost instances below its minimum. Only definite losses count: a
    failed, deleted or vanished pod. A scheduled pod that is briefly not Ready or not Running (its node agent
    restarting) is not lost; a never-scheduled one is not alive. A worker exits 0 only when the head releases it:
    from then on the head's own exit decides the outcome."""
    st, current = p.st, p.current
    if st.phase is not JobPhase.RUNNING:
        return False
    releasing = any(not pod.is_head and pod.phase == SUCCEEDED for pod in current)
    # An instance that succeeded is not lost, though KubeRay deletes its pod (held until the job finishes).
    alive = sum(1 for pod in current if pod.phase == SUCCEEDED or pod.phase != FAILED and not pod.deleting and pod.node)
    # A minimum raised past what ever ran (scale_cluster grew the job) waits for the new instances: they join,
    # they are not lost (scale_cluster rolls back on its own timeout).
    placed = p.placed_before | {pod.instance_id for pod in current if pod.node and not pod.deleting}
    required = min(p.spec.resolved_min(), len(placed))
    if alive < required and not releasing:
        seen = {pod.instance_id for pod in current}
        lost = [pod.name for pod in current if pod.phase == FAILED or pod.deleting]
        lost += [i.pod for i in st.instances if i.instance_id not in seen]
        return p.finish(JobPhase.FAILED, vocabulary.INSTANCES_LOST,
                        f"only {alive} of {required} required instances remain (lost: {', '.join(lost) or 'none'})")
    st.reason, st.message = vocabulary.INSTANCES_READY, f"{_ready_count(st)} of {p.spec.resolved_target()} instances ready"
    return True


def _head_ready(st: MLJobStatus) -> bool:
    return bool(st.instances) and st.instances[0].ready  # the gate counts the head: nothing runs without it


def _started(p: Pass) -> bool:
    st, ready = p.st, _ready_count(p.st)
    if ready < p.spec.resolved_min() or not _head_ready(st):
        return False
    st.phase, st.reason, st.message = JobPhase.RUNNING, vocabulary.INSTANCES_READY, f"{ready} of {p.spec.resolved_target()} instances ready"
    st.start_time = st.start_time or p.now
    return True


def _instances_timeout(p: Pass) -> bool:
    """From admission, instancesTimeoutSeconds for the instances to be Ready. In head mode, once the head runs, the
    clock is its launcher's (Snowflake's: from when it starts waiting, after pip install, downloads and Ray start;
    runtime/gate.py), which fails the job itself; here only a head that never started running times out."""
    st, spec = p.st, p.spec
    assert st.admitted_at is not None
    if p.now < st.admitted_at + timedelta(seconds=spec.instances_timeout_seconds):
        return False
    if spec.mode is RunMode.HEAD and p.head is not None and p.head.phase == RUNNING and not p.head.deleting:
        return False
    return p.finish(JobPhase.FAILED, vocabulary.INSTANCES_UNAVAILABLE,
                    f"{_ready_count(st)} of {spec.resolved_min()} required instances ready after "
                    f"instancesTimeoutSeconds={spec.instances_timeout_seconds}"
                    + (f"; the API server refused: {p.obs.refused}" if p.obs.refused else ""))


def _waiting(p: Pass) -> bool:
    st, spec = p.st, p.spec
    if p.obs.refused:
        st.phase, st.reason = JobPhase.PENDING, vocabulary.API_REFUSED
        st.message = f"the API server refused: {p.obs.refused}; retrying with backoff until instancesTimeoutSeconds"
        return True
    st.phase, st.reason = JobPhase.PENDING, vocabulary.WAITING_FOR_INSTANCES
    st.message = (f"{_ready_count(st)} of {spec.resolved_min()} instances ready (target {spec.resolved_target()})"
                  + ("" if _head_ready(st) else "; the head is not ready"))
    return True


def _instances_observed(p: Pass) -> bool:
    p.observe_instances()
    return False


# PENDING → RUNNING → DONE/FAILED, in order of precedence.
STEPS: tuple[Callable[[Pass], bool], ...] = (
    _cancelled, _suspended, _resumed, _kuberay_missing, _credentials_refused, _volumes_refused, _admission, _deadline, _observe, _succeeded, _failed, _instances_observed,
    _running, _started, _instances_timeout, _waiting,
)


def advance(job: MLJob, st: MLJobStatus, obs: Observed, layout: Sequence[Placement]) -> None:
    """Move an unfinished job along PENDING → RUNNING → DONE/FAILED: the first of STEPS that decides wins."""
    # A pod that was already Terminating when its entry was written is the leftover of a shrink (scale_cluster
    # down, then up again), not a member that can be lost.
    p = Pass(job, st, obs, placed_before={i.instance_id for i in st.instances if i.node and i.phase != vocabulary.TERMINATING},
             layout=layout)
    for step in STEPS:
        if step(p):
            return
