"""PURE status functions: an MLJob's status from its spec, previous status, observed pods, admission
decision and the time; a ComputePool's status from its nodes and the jobs' claims. No I/O, no clock."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from kubepool import naming
from kubepool.api import (
    Backend,
    ComputePool,
    ComputePoolStatus,
    Condition,
    ConditionStatus,
    InstanceStatus,
    JobPhase,
    MLJob,
    MLJobStatus,
    PoolPhase,
)
from kubepool.contract import RunMode
from kubepool.controller.admission import Claim, Decision, usage
from kubepool.controller.builders.common import placement_of
from kubepool.controller.builders.placeholders import desired_placeholders
from kubepool.controller.observed import FAILED, SUCCEEDED, NodeView, PlaceholderView, PodView

MESSAGE_MAX = 2048  # status.message: enough for a traceback's tail, small enough for `kubectl get -o yaml`

# Reasons (status.reason and Event reasons).
WAITING_FOR_INSTANCES = "WaitingForInstances"
INSTANCES_READY = "InstancesReady"
INSTANCES_UNAVAILABLE = "InstancesUnavailable"
INSTANCES_LOST = "InstancesLost"
COMPLETED = "Completed"
HEAD_FAILED = "HeadFailed"
INSTANCE_FAILED = "InstanceFailed"
RETRYING = "Retrying"
DEADLINE_EXCEEDED = "DeadlineExceeded"
SUSPENDED = "Suspended"
KUBERAY_NOT_INSTALLED = "KubeRayNotInstalled"


@dataclass(frozen=True)
class Observed:
    """Everything the job's status depends on besides the job itself."""

    pods: Sequence[PodView]
    now: datetime
    decision: Decision | None = None  # for a job not admitted yet
    backend: Backend = Backend.PODS  # resolved (spec or operator default)
    kuberay_installed: bool = False


def _cut(text: str | None) -> str | None:
    return text if text is None or len(text) <= MESSAGE_MAX else "…" + text[-(MESSAGE_MAX - 1):]


def _conditions(prev: Sequence[Condition], st: MLJobStatus, ready_ok: bool, now: datetime,
                generation: int | None) -> list[Condition]:
    """Admitted, InstancesReady, Complete, Failed; a condition keeps its transition time while unchanged."""
    phase = st.phase
    want = [
        ("Admitted", st.admitted_at is not None, "Admitted" if st.admitted_at else (st.reason or "Pending")),
        ("InstancesReady", ready_ok, INSTANCES_READY if ready_ok else WAITING_FOR_INSTANCES),
        ("Complete", phase is JobPhase.DONE, COMPLETED if phase is JobPhase.DONE else "NotComplete"),
        ("Failed", phase in (JobPhase.FAILED, JobPhase.CANCELLED),
         (st.reason or "Failed") if phase in (JobPhase.FAILED, JobPhase.CANCELLED) else "NotFailed"),
    ]
    old = {c.type: c for c in prev}
    out = []
    for ctype, true, reason in want:
        status = ConditionStatus.TRUE if true else ConditionStatus.FALSE
        before = old.get(ctype)
        since = before.last_transition_time if before is not None and before.status == status else now
        message = (st.message or "") if true or ctype == "Admitted" else ""
        out.append(Condition(type=ctype, status=status, reason=reason, message=message[:MESSAGE_MAX],
                             last_transition_time=since, observed_generation=generation))
    return out


TERMINATING = "Terminating"  # an instance entry's phase while its pod is being deleted and still runs (as kubectl says)


def _instances(job: MLJob, granted: int, pods: Sequence[PodView], attempt: int) -> list[InstanceStatus]:
    # An instance can have two pods for a while: one leaving (deleted by a shrink) and its successor (KubeRay
    # names pods itself, so a grow right after a shrink makes a new one at once). The live one is the instance.
    mine = {p.instance_id: p for p in sorted((p for p in pods if p.attempt == attempt), key=lambda p: not p.deleting)}
    out = []
    for inst in placement_of(job)[:granted]:
        pod = mine.get(inst.instance_id)
        out.append(InstanceStatus(
            instance_id=inst.instance_id, group=inst.group, rank_in_group=inst.rank,
            host=naming.sagemaker_host(inst.instance_id),
            pod=pod.name if pod else naming.pod_name(job.metadata["name"], inst.group, inst.rank, attempt),
            node=pod.node if pod else None, ready=bool(pod and pod.ready),
            phase=(TERMINATING if pod.deleting and not pod.terminated else pod.phase) if pod else None,
            exit_code=pod.exit_code if pod else None, message=_cut(pod.message) if pod else None,
        ))
    return out


def first_admitted(st: MLJobStatus) -> datetime | None:
    """When the job was first admitted: activeDeadlineSeconds counts from here, across retries (the Admitted
    condition keeps its transition time while it stays True; admittedAt restarts with each attempt)."""
    cond = next((c for c in st.conditions if c.type == "Admitted" and c.status == ConditionStatus.TRUE), None)
    return cond.last_transition_time if cond is not None and cond.last_transition_time else st.admitted_at


def _finish(st: MLJobStatus, phase: JobPhase, reason: str, message: str, now: datetime) -> None:
    st.phase, st.reason, st.message = phase, reason, _cut(message)
    st.completion_time = st.completion_time or now


def _advance(job: MLJob, st: MLJobStatus, obs: Observed) -> None:
    """Move an unfinished job along PENDING → RUNNING → DONE/FAILED."""
    spec, now = job.spec, obs.now
    target, minimum = spec.resolved_target(), spec.resolved_min()
    if spec.suspend:
        return _finish(st, JobPhase.CANCELLED, SUSPENDED, "the job was suspended; its pods are removed", now)
    # Instances whose pod was scheduled and not yet leaving: a pod that was already Terminating when its entry was
    # written is the leftover of a shrink (scale_cluster down, then up again), not a member that can be lost.
    placed_before = {i.instance_id for i in st.instances if i.node and i.phase != TERMINATING}
    if obs.backend is Backend.KUBERAY:
        if not obs.kuberay_installed:
            return _finish(st, JobPhase.FAILED, KUBERAY_NOT_INSTALLED,
                           "backend kuberay needs the ray.io RayCluster CRD, which is not installed", now)
    if st.admitted_at is None:
        d = obs.decision or Decision(False, reason="Pending", message="waiting for admission")
        if not d.admitted:
            st.phase, st.reason, st.message = JobPhase.PENDING, d.reason, d.message
            return None
        st.admitted_at = now
        st.instances = _instances(job, d.granted, [], st.attempt)
    elif obs.decision is not None and obs.decision.admitted and obs.decision.granted != len(st.instances):
        st.instances = _instances(job, obs.decision.granted, obs.pods, st.attempt)  # resized (scale_cluster)
    since = first_admitted(st)
    if spec.active_deadline_seconds and since and now >= since + timedelta(seconds=spec.active_deadline_seconds):
        return _finish(st, JobPhase.FAILED, DEADLINE_EXCEEDED,
                       f"the job ran longer than activeDeadlineSeconds={spec.active_deadline_seconds}", now)
    granted = len(st.instances)
    current = [p for p in obs.pods if p.attempt == st.attempt]
    head = next((p for p in current if p.is_head), None)
    # parallel and sagemaker modes run the payload on every instance: as on SageMaker, the job is done when
    # every instance succeeded and failed when any instance failed; in head mode the head's exit decides.
    every = spec.mode is not RunMode.HEAD
    if every and granted and sum(1 for p in current if p.phase == SUCCEEDED) >= granted:
        st.instances = _instances(job, granted, obs.pods, st.attempt)
        return _finish(st, JobPhase.DONE, COMPLETED, f"all {granted} instances finished successfully", now)
    if not every and head is not None and head.phase == SUCCEEDED:
        st.instances = _instances(job, granted, obs.pods, st.attempt)
        return _finish(st, JobPhase.DONE, COMPLETED, "the head finished successfully", now)
    failed_peer = next((p for p in current if every and not p.is_head and p.phase == FAILED), None)
    # A head that failed, vanished while RUNNING or is being deleted (by hand, eviction, node loss) is a failed
    # head: retried per backoffLimit, never merely counted as one lost instance.
    head_gone = head is None and st.phase is JobPhase.RUNNING
    # In parallel and sagemaker modes a head that succeeded has only to wait for its peers, even while KubeRay
    # deletes its terminated pod (held by the outcome finalizer until the job finishes).
    head_deleted = head is not None and head.deleting and head.phase not in (FAILED, SUCCEEDED)
    if (head is not None and head.phase == FAILED) or head_gone or head_deleted or failed_peer is not None:
        why = ("the head's pod disappeared" if head is None else "the head's pod was deleted" if head_deleted
               else head.message or f"exit code {head.exit_code}" if head.phase == FAILED
               else f"instance {failed_peer.instance_id} failed: {failed_peer.message or f'exit code {failed_peer.exit_code}'}"
               if failed_peer is not None else "")
        if st.attempt < spec.backoff_limit:
            st.attempt += 1
            st.admitted_at = now  # the new attempt gets the whole instances timeout again
            st.instances = _instances(job, granted, obs.pods, st.attempt)
            st.phase, st.reason = JobPhase.PENDING, RETRYING
            st.message = _cut(f"attempt {st.attempt} of {spec.backoff_limit} after the head failed: {why}")
            return None
        st.instances = _instances(job, granted, obs.pods, st.attempt)
        head_failed = head is None or head_deleted or head.phase == FAILED
        return _finish(st, JobPhase.FAILED, HEAD_FAILED if head_failed else INSTANCE_FAILED, why, now)
    st.instances = _instances(job, granted, obs.pods, st.attempt)
    ready = sum(1 for i in st.instances if i.ready)
    if st.phase is JobPhase.RUNNING:
        # Only definite losses count: a failed, deleted or vanished pod. A scheduled pod that is briefly not
        # Ready or not Running (its node agent restarting) is not lost; a never-scheduled one is not alive. A
        # worker exits 0 only when the head releases it: from then on the head's own exit decides the outcome.
        releasing = any(not p.is_head and p.phase == SUCCEEDED for p in current)
        # An instance that succeeded is not lost, though KubeRay deletes its pod (held until the job finishes).
        alive = sum(1 for p in current if p.phase == SUCCEEDED or p.phase != FAILED and not p.deleting and p.node)
        # A minimum raised past what ever ran (scale_cluster grew the job) waits for the new instances: they
        # join, they are not lost (scale_cluster rolls back on its own timeout).
        placed = placed_before | {p.instance_id for p in current if p.node and not p.deleting}
        required = min(minimum, len(placed))
        if alive < required and not releasing:
            seen = {p.instance_id for p in current}
            lost = [p.name for p in current if p.phase == FAILED or p.deleting]
            lost += [i.pod for i in st.instances if i.instance_id not in seen]
            return _finish(st, JobPhase.FAILED, INSTANCES_LOST,
                           f"only {alive} of {required} required instances remain (lost: {', '.join(lost) or 'none'})", now)
        st.reason, st.message = INSTANCES_READY, f"{ready} of {target} instances ready"
        return None
    head_ready = bool(st.instances) and st.instances[0].ready  # the gate counts the head: nothing runs without it
    if ready >= minimum and head_ready:
        st.phase, st.reason, st.message = JobPhase.RUNNING, INSTANCES_READY, f"{ready} of {target} instances ready"
        st.start_time = st.start_time or now
        return None
    assert st.admitted_at is not None
    if now >= st.admitted_at + timedelta(seconds=spec.instances_timeout_seconds):
        return _finish(st, JobPhase.FAILED, INSTANCES_UNAVAILABLE,
                       f"{ready} of {minimum} required instances ready after instancesTimeoutSeconds="
                       f"{spec.instances_timeout_seconds}", now)
    st.phase, st.reason = JobPhase.PENDING, WAITING_FOR_INSTANCES
    st.message = f"{ready} of {minimum} instances ready (target {target})" + ("" if head_ready else "; the head is not ready")
    return None


def compute_job_status(job: MLJob, obs: Observed) -> MLJobStatus:
    """The job's next status. Finished jobs keep their phase; instance entries still follow the pods."""
    prev = job.status or MLJobStatus()
    st = prev.model_copy(deep=True)
    st.target_instances, st.min_instances = job.spec.resolved_target(), job.spec.resolved_min()
    st.pools = ",".join(dict.fromkeys(p.pool for p in placement_of(job)))
    generation = job.metadata.get("generation")
    st.observed_generation = generation
    if prev.phase is not None and prev.phase.finished:
        if st.instances:
            # A finished job's record outlives its pods (KubeRay's all go when the job ends): an instance whose
            # pod is gone keeps what was last seen of it.
            seen = {p.instance_id for p in obs.pods if p.attempt == st.attempt}
            last = {i.instance_id: i for i in prev.instances}
            st.instances = [i if i.instance_id in seen or i.instance_id not in last else last[i.instance_id]
                            for i in _instances(job, len(st.instances), obs.pods, st.attempt)]
    else:
        _advance(job, st, obs)
        # Only where a dashboard runs: head mode (the others start no Ray) with spec.ray.dashboard on.
        if st.admitted_at is not None and st.phase is JobPhase.RUNNING and job.spec.ray.dashboard \
                and job.spec.mode is RunMode.HEAD:
            head = f"{naming.sagemaker_host(0)}.{naming.service_name(job.metadata['name'])}"
            st.ray_dashboard = f"http://{head}:{naming.RAY_DASHBOARD_PORT}"
    st.ready_instances = sum(1 for i in st.instances if i.ready)
    st.ready = f"{st.ready_instances}/{st.target_instances}"
    st.conditions = _conditions(prev.conditions, st, st.ready_instances >= st.min_instances, obs.now, generation)
    return st


def status_changed(old: MLJobStatus | None, new: MLJobStatus) -> bool:
    return (old.wire() if old else {}) != new.wire()


def status_patch(new: MLJobStatus | ComputePoolStatus) -> dict[str, Any]:
    """A JSON merge patch that makes a status `new` whatever the API server holds: every field `new` lacks is
    removed (what was last written may be older than the operator's own view)."""
    doc = new.wire()
    for name, f in type(new).model_fields.items():
        doc.setdefault(f.alias or name, None)
    return doc


# --- ComputePool --------------------------------------------------------------------------------------------
def node_matches(pool: ComputePool, node: NodeView) -> bool:
    """The node carries the pool's selector labels and every NoSchedule/NoExecute taint is tolerated."""
    if any(node.labels.get(k) != v for k, v in pool.spec.node_selector.items()):
        return False
    for taint in node.taints:
        if taint.effect not in ("NoSchedule", "NoExecute"):
            continue
        if not any((t.key in (None, "") and t.operator == "Exists") or (t.key == taint.key and (
                t.operator == "Exists" or (t.value or "") == taint.value)) and t.effect in (None, taint.effect)
                   for t in pool.spec.tolerations):
            return False
    return True


def pools_affected_by_node(pools: Mapping[str, ComputePool], old: NodeView | None,
                           new: NodeView | None) -> list[str]:
    """The pools whose status a node change can move: those the node matched before or matches now; none when
    nothing a pool reads changed (heartbeats and status-only updates)."""
    if old == new:
        return []
    return [name for name, p in pools.items() if any(n is not None and node_matches(p, n) for n in (old, new))]


# Pool condition reasons.
AUTO_SUSPENDED = "AutoSuspended"


def _pool_condition(prev: Mapping[str, Condition], ctype: str, true: bool, reason: str, message: str,
                    now: datetime, generation: int | None) -> Condition:
    """A pool condition that keeps its transition time while its status is unchanged."""
    status = ConditionStatus.TRUE if true else ConditionStatus.FALSE
    before = prev.get(ctype)
    since = before.last_transition_time if before is not None and before.status == status else now
    return Condition(type=ctype, status=status, reason=reason, message=message, observed_generation=generation,
                     last_transition_time=since)


def _stamp(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def compute_pool_status(pool: ComputePool, nodes: Iterable[NodeView], claims: Iterable[Claim],
                        now: datetime, placeholders: Iterable[PlaceholderView] = (), *,
                        warm_capacity: bool = True) -> ComputePoolStatus:
    """The pool's status. `pool.status` is the previous one: idleSince carries over from it, so the
    auto-suspend timer survives operator restarts. `placeholders`: the warm-capacity pods observed."""
    name = pool.metadata.get("name", "")
    uid = pool.metadata.get("uid", "")
    ready = sum(1 for n in nodes if n.ready and not n.unschedulable and node_matches(pool, n))
    mine = [c for c in claims if name in c.pools]
    in_use = usage(mine)[name]
    running = sum(1 for c in mine if not c.waiting)
    queued = len(mine) - running
    before = pool.status or ComputePoolStatus()
    # Idle: no admitted and no queued job. A queued job counts as activity: it resumes an auto-suspended pool
    # (Snowflake's AUTO_RESUME), and admission does not refuse auto-suspended pools.
    idle_since = None if mine else (before.idle_since or now)
    after = pool.spec.auto_suspend_seconds
    auto_suspended = bool(after) and idle_since is not None and now >= idle_since + timedelta(seconds=after or 0)
    if pool.spec.suspend or auto_suspended:
        phase = PoolPhase.SUSPENDED
    else:
        phase = PoolPhase.ACTIVE if in_use else PoolPhase.IDLE
    warm = sum(1 for p in placeholders if p.pool == name and p.warm and (not uid or not p.owner_uid or p.owner_uid == uid))
    wanted = desired_placeholders(pool, in_use, suspended=phase is PoolPhase.SUSPENDED, enabled=warm_capacity)
    generation = pool.metadata.get("generation")
    prev = {c.type: c for c in before.conditions}
    if pool.spec.suspend:
        suspended = (True, SUSPENDED, "spec.suspend is set: no new jobs are admitted; running jobs finish")
    elif auto_suspended:
        assert idle_since is not None
        suspended = (True, AUTO_SUSPENDED,
                     f"idle since {_stamp(idle_since)}, over autoSuspendSeconds={after}: warm nodes released; "
                     "a new job resumes the pool")
    else:
        suspended = (False, "Active" if mine else "Idle", "")
    if not warm_capacity:
        warm_cond = (False, "WarmCapacityOff", "warm capacity is turned off in the operator's configuration")
    else:
        warm_cond = (warm >= wanted, "WarmNodesHeld" if warm >= wanted else "WarmingUp",
                     f"{warm} of {wanted} placeholder(s) running (minNodes={pool.spec.min_nodes}, {in_use} in use)")
    conditions = [
        _pool_condition(prev, "Ready", bool(ready), "NodesReady" if ready else "NoReadyNodes",
                        f"{ready} ready node(s) match the pool; {in_use} of {pool.spec.max_nodes} instances in use",
                        now, generation),
        _pool_condition(prev, "Suspended", *suspended, now, generation),
        _pool_condition(prev, "Warm", *warm_cond, now, generation),
    ]
    return ComputePoolStatus(phase=phase, ready_nodes=ready, instances_in_use=in_use, running_jobs=running,
                             queued_jobs=queued, warm_instances=warm, idle_since=idle_since, conditions=conditions,
                             observed_generation=generation)


def placeholders_wanted(pool: ComputePool, st: ComputePoolStatus, *, warm_capacity: bool = True) -> int:
    """Placeholders the pool should have, given its freshly computed status."""
    return desired_placeholders(pool, st.instances_in_use, suspended=st.phase is PoolPhase.SUSPENDED,
                                enabled=warm_capacity)


def auto_suspend_at(pool: ComputePool, st: ComputePoolStatus) -> datetime | None:
    """When an idle, not yet suspended pool auto-suspends (its status must be computed again then); None when
    nothing is due."""
    after = pool.spec.auto_suspend_seconds
    if not after or st.idle_since is None or st.phase is PoolPhase.SUSPENDED:
        return None
    return st.idle_since + timedelta(seconds=after)
