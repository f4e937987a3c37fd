"""PURE plan of what to do with a job's children given its new status: pods to create or delete (or, with
`backend: kuberay`, the RayCluster to apply or delete and KubeRay's pods to let go), whether the shared
children must exist, whether the job itself is due for deletion (TTL), and when the next time-based change is
due (so the operator sleeps instead of polling)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from kubepool import naming
from kubepool.api import Backend, ComputePool, JobPhase, MLJob, MLJobStatus
from kubepool.controller import jobstatus as job_status
from kubepool.controller import vocabulary
from kubepool.controller.builders import JobRef, Obj, build_endpoint_slice, build_instance_pods
from kubepool.controller.builders.common import Placement, laid_out
from kubepool.controller.builders.raycluster import build_raycluster
from kubepool.controller.config import OperatorConfig
from kubepool.controller.jobsteps import workers_deadline
from kubepool.controller.observed import PodView

# How long pods on their way to an address hold the job's EndpointSlice back (_endpoints): on real nodes a pod has
# its address seconds after its creation, long before its container runs.
SLICE_WAIT = timedelta(seconds=10)
# Failures whose pods hold capacity for nothing: removed at once. Other endings (DONE, HeadFailed) give
# workers `worker_grace_seconds` to leave on their own first.
_REMOVE_AT_ONCE = {vocabulary.CANCELLED, vocabulary.INSTANCES_UNAVAILABLE, vocabulary.INSTANCES_LOST,
                   vocabulary.DEADLINE_EXCEEDED, vocabulary.WORKERS_CUT_OFF}


@dataclass
class Plan:
    ensure_children: bool = False
    create_pods: list[Obj] = field(default_factory=list)
    delete_pods: list[str] = field(default_factory=list)
    delete_job: bool = False
    apply_raycluster: Obj | None = None
    delete_raycluster: bool = False
    release_pods: list[PodView] = field(default_factory=list)  # KubeRay's deleted pods whose exit was seen
    endpoint_slice: Obj | None = None  # the headless Service's endpoints as they should be now (None: leave them)
    # pods on their way to an address: the slice is written now only to take back an address (slice_to_write)
    endpoint_slice_held: bool = False
    wake_at: datetime | None = None

    def wake(self, at: datetime) -> None:
        self.wake_at = at if self.wake_at is None else min(self.wake_at, at)


def plan_job(job: MLJob, st: MLJobStatus, pods: Sequence[PodView], pools: dict[str, ComputePool], *,
             cfg: OperatorConfig, now: datetime, backend: Backend = Backend.PODS,
             layout: Sequence[Placement] | None = None) -> Plan:
    """The plan of one pass: the steps below, in order (an unfinished job's steps, or a finished job's). `layout`:
    the pass's (builders.common.laid_out)."""
    plan = Plan()
    ctx = _Context(job, st, pods, pools, cfg, now, backend is Backend.KUBERAY, laid_out(job, layout))
    _release_held_pods(ctx, plan)
    if st.reason == vocabulary.SUSPENDED and st.phase is JobPhase.PENDING:
        _suspended(ctx, plan)
        return plan
    if st.admitted_at is None or st.phase is None:
        return plan
    steps = _FINISHED if st.phase.finished else _UNFINISHED
    for step in steps:
        step(ctx, plan)
    return plan


@dataclass(frozen=True)
class _Context:
    job: MLJob
    st: MLJobStatus
    pods: Sequence[PodView]
    pools: dict[str, ComputePool]
    cfg: OperatorConfig
    now: datetime
    kuberay: bool
    layout: Sequence[Placement]

    @property
    def live(self) -> list[PodView]:
        return [p for p in self.pods if not p.terminated and not p.deleting]

    @property
    def done_at(self) -> datetime:
        return self.st.completion_time or self.now


def _release_held_pods(c: _Context, plan: Plan) -> None:
    """A pod KubeRay deleted is held until its exit counted: a terminated pod of the running attempt is the
    outcome (the head's exit, a worker's release or failure); anything else has nothing left to tell."""
    finished = c.st.phase is not None and c.st.phase.finished
    plan.release_pods = [p for p in c.pods if p.deleting and naming.POD_FINALIZER in p.finalizers
                         and (finished or p.attempt != c.st.attempt or not p.terminated)]


def _suspended(c: _Context, plan: Plan) -> None:
    """A suspended job keeps nothing running: its pods (every attempt's) go at once, KubeRay's with its cluster.
    The shared children (Service, contract, token) stay for the resumed job."""
    if c.kuberay:
        plan.delete_raycluster = True
    plan.delete_pods = [p.name for p in c.live]


def _shared_children(c: _Context, plan: Plan) -> None:
    plan.ensure_children = True


def _instances(c: _Context, plan: Plan) -> None:
    """The granted instances: the RayCluster sized to them, or their pods. After a shrink (scale_cluster) the
    pods of instances no longer granted go; never below minInstances, and never the head: a grant that small is a stale or
    inconsistent view, and acting on it would kill a running job."""
    st, pods = c.st, c.pods
    granted = len(st.instances)
    shrink_ok = granted >= max(1, c.job.spec.resolved_min())
    # Ids are stable across resizes (builders.layout): a shrink's pods are those whose id left the layout, which
    # need not be the highest ids (a group before the last one shrank).
    kept = {i.instance_id for i in st.instances}
    beyond = [p for p in c.live if shrink_ok and p.attempt == st.attempt and p.instance_id not in kept]
    if c.kuberay:
        doomed: dict[str, list[str]] = {}
        for p in beyond:
            doomed.setdefault(p.group, []).append(p.name)
        plan.apply_raycluster = build_raycluster(c.job, c.pools, granted=granted, attempt=st.attempt, cfg=c.cfg,
                                                 workers_to_delete=doomed, layout=c.layout)
        # A first group shrunk back to the head alone has no worker group any more, and KubeRay leaves the pods
        # of a group it no longer has: the operator deletes them (the outcome finalizer is released as usual).
        kept_groups = {g["groupName"] for g in plan.apply_raycluster["spec"].get("workerGroupSpecs") or []}
        plan.delete_pods = [p.name for p in beyond if p.group not in kept_groups]
        return
    # The head first: workers are created once it holds a node. Created together, the scheduler may place the
    # workers on the last free nodes of the pool and leave the head Pending, with every worker waiting for a head
    # that never comes (minInstances < targetInstances on a pool short of nodes).
    head_placed = any(p.is_head and p.node and p.attempt == st.attempt and not p.deleting for p in pods)
    plan.create_pods = build_instance_pods(c.job, c.pools, granted=granted, attempt=st.attempt, cfg=c.cfg,
                                           head_only=not head_placed, skip={p.name for p in pods}, layout=c.layout)
    plan.delete_pods = [p.name for p in beyond]


def _earlier_attempts(c: _Context, plan: Plan) -> None:
    plan.delete_pods += [p.name for p in c.live if p.attempt != c.st.attempt]


def _retry_after_earlier_attempts_ended(c: _Context, plan: Plan) -> None:
    """A retry's pods are created only once every earlier attempt's pod that reached a node has ended or is gone:
    its last checkpoint sync or output upload (on SIGTERM, within the deletion's grace) cannot race the new
    attempt's restore. The pod watch brings the next pass; a pod stuck on a lost node holds the retry until
    instancesTimeoutSeconds fails it (the loss is reported, not hidden)."""
    if any(p.attempt != c.st.attempt and p.node and not p.terminated for p in c.pods):
        plan.create_pods = []


def _endpoints(c: _Context, plan: Plan) -> None:
    """The slice is held while a pod of the attempt is on its way to an address: one write for instances that
    start together, not one per address (the head's alone, then each worker's). On its way: live, no address yet,
    and not held off a node by the scheduler (a pool short of nodes), or about to be created this pass. Each holds
    the slice for at most SLICE_WAIT from its creation (pods to create: from the newest pod's), so a pod that
    never gets an address, or a create refused, does not keep the others out of DNS. A held slice is still
    written when it takes back an address (a retry's: the earlier attempt's head must not resolve)."""
    pods = [p for p in c.pods if p.attempt == c.st.attempt]
    plan.endpoint_slice = build_endpoint_slice(JobRef.of(c.job), pods)
    held = [p.created for p in pods if p.ip is None and not p.unschedulable and not p.terminated and not p.deleting]
    if plan.create_pods and pods:
        held.append(max(p.created for p in pods))
    until = [t + SLICE_WAIT for t in map(_timestamp, held) if t is not None and t + SLICE_WAIT > c.now]
    if until:
        plan.endpoint_slice_held = True
        plan.wake(min(until))


def slice_to_write(plan: Plan, written: Obj | None) -> Obj | None:
    """PURE: the slice a pass writes, given the one this process wrote last (None: none, or not since its start):
    none when unchanged; a held one only where it takes back an address `written` published."""
    new = plan.endpoint_slice
    if new is None or new == written:
        return None
    if plan.endpoint_slice_held and not (written is not None and _addresses(written) - _addresses(new)):
        return None
    return new


def _addresses(s: Obj) -> set[str]:
    return {a for e in s.get("endpoints") or [] for a in e.get("addresses") or []}


def _timestamp(value: str) -> datetime | None:
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


def _deadlines(c: _Context, plan: Plan) -> None:
    st, spec = c.st, c.job.spec
    assert st.admitted_at is not None
    if st.phase is JobPhase.PENDING:
        plan.wake(st.admitted_at + timedelta(seconds=spec.instances_timeout_seconds))
    since = job_status.first_admitted(st)
    if spec.active_deadline_seconds and since:
        plan.wake(since + timedelta(seconds=spec.active_deadline_seconds))
    if st.reason == vocabulary.WAITING_FOR_WORKERS:  # a worker stuck past the grace must not hold the job RUNNING
        head = next((p for p in c.pods if p.is_head and p.attempt == st.attempt), None)
        until = workers_deadline(head, c.cfg.worker_grace_seconds) if head is not None else None
        if until is not None:
            plan.wake(until)


def _cleanup(c: _Context, plan: Plan) -> None:
    """A finished job's instances go: KubeRay's cluster at once (KubeRay would recreate every pod that ends, the
    head included, and rerun the payload; its workers already had the head's word to leave), pods at once after
    failures that hold capacity for nothing, else after worker_grace_seconds (workers leave on their own)."""
    live = c.live
    if c.kuberay:
        plan.delete_raycluster = bool(c.pods)
    elif c.st.reason in _REMOVE_AT_ONCE or c.st.phase is JobPhase.CANCELLED:
        plan.delete_pods = [p.name for p in live]
    else:
        grace_end = c.done_at + timedelta(seconds=c.cfg.worker_grace_seconds)
        if c.now >= grace_end:
            plan.delete_pods = [p.name for p in live]
        elif live:
            plan.wake(grace_end)


def _ttl(c: _Context, plan: Plan) -> None:
    ttl = c.job.spec.ttl_seconds_after_finished
    if ttl is None:
        return
    expiry = c.done_at + timedelta(seconds=ttl)
    if c.now >= expiry:
        plan.delete_job = True
    else:
        plan.wake(expiry)


_UNFINISHED: tuple[Callable[[_Context, Plan], None], ...] = (
    _shared_children, _instances, _earlier_attempts, _retry_after_earlier_attempts_ended, _endpoints, _deadlines)
_FINISHED: tuple[Callable[[_Context, Plan], None], ...] = (_cleanup, _ttl)


# What an existing object of a child's name is to the job (`existing_child`), after its create answered 409.
OWNED = "owned"  # the job's own: nothing to do
GOING = "going"  # gone since, being deleted, or an earlier job's of the same name (deleted: the garbage collector
#                  removes it): create again once it is gone
FOREIGN = "foreign"  # nobody's the operator knows (e.g. the user's own Service of that name): refused


def existing_child(meta: Obj | None, ref: JobRef) -> str:
    """PURE: whether the object found under a child's name (its metadata; None: gone) is the job's own. Same-name
    re-creates make this matter: a job deleted and created again within a second finds its predecessor's
    children still there, owned by the old uid, and about to be garbage-collected."""
    if meta is None or meta.get("deletionTimestamp"):
        return GOING
    owners = meta.get("ownerReferences") or []
    if any(o.get("uid") == ref.uid for o in owners):
        return OWNED
    if any(o.get("kind") == naming.MLJOB_KIND and str(o.get("apiVersion", "")).split("/")[0] == naming.GROUP
           and o.get("name") == ref.name for o in owners):
        return GOING
    return FOREIGN
