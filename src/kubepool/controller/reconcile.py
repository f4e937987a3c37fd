"""Level-based reconciliation of one MLJob or ComputePool: read the in-memory state, call the pure
status/admission/plan functions, persist the status before creating anything, then make the children
match. Handlers, pod events and deadline wake-ups all end here; this is the only orchestration."""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Awaitable
from datetime import UTC, datetime
from typing import Any, cast

import kopf

from kubepool import naming
from kubepool.api import Backend, ComputePool, ComputePoolStatus, JobPhase, MLJob, MLJobStatus
from kubepool.api.kuberay import POD_FINALIZER, RAYCLUSTER_CRD
from kubepool.controller import admission, metrics
from kubepool.controller import pools as pools_mod
from kubepool.controller.builders import (
    JobRef,
    build_contract_configmap,
    build_headless_service,
    build_job_contract,
    build_namespace_runtime_rbac,
    build_network_policy,
    build_ray_token_secret,
    build_runtime_rbac,
)
from kubepool.controller.builders.common import local_port_shift, placement_of, pools_of
from kubepool.controller.builders.raycluster import raycluster_name
from kubepool.controller.config import RuntimeAccountPolicy
from kubepool.controller.observed import PodView
from kubepool.controller.plan import Plan, plan_job
from kubepool.controller.state import JobKey, OperatorState, claim_of
from kubepool.controller.status import (
    Observed,
    compute_job_status,
    compute_pool_status,
    status_changed,
    status_patch,
)
from kubepool.kube.errors import KubeError

log = logging.getLogger(__name__)
RETRY_SECONDS = 5.0  # a reconcile that hit an API error outside a kopf handler runs again after this
POOL_REFRESH_SECONDS = 1.0  # pool status passes are coalesced over this window
EXPORT_DUE = ""  # the job-phase gauges' entry in OperatorState.pools_due (no pool has an empty name)
EXPECT_POD_SECONDS = 30.0  # a created pod not yet in the watch is not created again for this long
WRITE_CONCURRENCY = 8  # independent child writes of one job in flight at once
STATUS_FLUSH_SECONDS = 1.0  # a job's status changes that are not decisive (_decisive) are written this late
POD_EVENT_DELAY_SECONDS = 0.1  # a pod event's pass waits this long, so the rest of the job's burst joins it
QUEUE_RECHECK_SECONDS = 30.0  # waiting jobs re-decide at least this often, whatever wake-up was lost
_WARNING_PHASES = {JobPhase.FAILED, JobPhase.CANCELLED}
_WARNING_REASONS = {admission.POOL_NOT_FOUND, admission.POOL_TOO_SMALL}


def _now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


async def reconcile_job(op: OperatorState, key: JobKey) -> None:
    """Bring one job one step closer to its spec. Safe to call any number of times, concurrently."""
    started = time.monotonic()
    async with op.lock(key):
        op.pending.discard(key)  # events from here on need a new pass; earlier ones are covered by this one
        found = op.job(key)
        if found is None or found[1].get("metadata", {}).get("deletionTimestamp"):
            await _release_pods(op, key, [p for p in op.pods(key) if p.deleting])  # nothing left to decide
            return
        job, body = found
        await _reconcile_locked(op, key, job, body)
    metrics.RECONCILE_SECONDS.observe(time.monotonic() - started)


async def _reconcile_locked(op: OperatorState, key: JobKey, job: MLJob, body: dict[str, Any]) -> None:
    uid = job.metadata.get("uid", "")
    prev = job.status
    pods = op.pods(key, uid)
    expected = op.created_pods.get(uid)
    if expected:  # the watch caught up with these creates
        for p in pods:
            expected.pop(p.name, None)
    pools = op.pools()
    backend = job.spec.backend or op.cfg.default_backend
    finished = prev is not None and prev.phase is not None and prev.phase.finished
    kuberay = backend is Backend.KUBERAY and not finished and await op.api.crd_exists(RAYCLUSTER_CRD)
    if prev is None or prev.admitted_at is None and not finished:
        # Decide and persist under one lock, so two jobs never take the same capacity.
        async with op.admission_lock:
            capacity = {name: p.spec.max_nodes for name, p in pools.items()}
            suspended = [name for name, p in pools.items() if p.spec.suspend]
            decision = admission.decide(claim_of(job, *key), op.claims(), capacity, suspended)
            new = compute_job_status(job, Observed(pods=pods, now=_now(), decision=decision, backend=backend,
                                                   kuberay_installed=kuberay))
            reserved = _reserve(op, job, new)
        await _write_reserved(op, key, job, new, reserved)
    elif not finished and len(placement_of(job)) != len(prev.instances):
        # Resized while admitted (scale_cluster patched targetInstances or an instanceCount).
        async with op.admission_lock:
            capacity = {name: p.spec.max_nodes for name, p in pools.items()}
            granted = admission.regrant(claim_of(job, *key), op.claims(), capacity)
            new = compute_job_status(job, Observed(pods=pods, now=_now(), decision=admission.Decision(True, granted),
                                                   backend=backend, kuberay_installed=kuberay))
            reserved = _reserve(op, job, new)
        await _write_reserved(op, key, job, new, reserved)
    else:
        new = compute_job_status(job, Observed(pods=pods, now=_now(), backend=backend, kuberay_installed=kuberay))
        await _write_status(op, key, job, new)
    # Wake the queue right after the status is persisted, before the children: if creating them fails, the
    # retried pass sees no transition any more and the jobs queued behind this one would never be woken.
    if _queue_moved(prev, new):
        trigger_waiting(op, pools_of(job))
    elif prev is None or (prev.phase, prev.reason, prev.admitted_at) != (new.phase, new.reason, new.admitted_at):
        refresh_pools(op, pools_of(job))
    # Announced once persisted, before the children: a failed child write retries a pass that no longer sees
    # the transition, and would lose its Event.
    _announce(op, body, prev, new)
    plan = plan_job(job, new, pods, pools, cfg=op.cfg, now=_now(), backend=backend)
    await _apply_plan(op, key, job, new, plan, pools)
    _schedule(op, key, plan)


def _decisive(st: MLJobStatus) -> tuple[Any, ...]:
    """What a status change must be written for at once: phase, reason, admission, attempt, times, the set of
    instances and every condition's truth. The rest (an instance's node, pod phase and readiness, the ready
    count in the message) follows a job's pods through every step of their start-up: those changes are
    written together, STATUS_FLUSH_SECONDS after the first of them (or with the next decisive one)."""
    return (st.phase, st.reason, st.admitted_at, st.attempt, st.start_time, st.completion_time, len(st.instances),
            st.observed_generation, st.target_instances, st.min_instances, st.pools,
            tuple((c.type, c.status) for c in st.conditions))


async def _write_status(op: OperatorState, key: JobKey, job: MLJob, new: MLJobStatus) -> None:
    uid = job.metadata.get("uid", "")
    changed = status_changed(job.status, new)
    unflushed = op.unflushed.get(uid)  # None: all written; False: a flush is scheduled; True: it is due
    if not changed and not unflushed:
        return
    if changed and not unflushed and job.status is not None and _decisive(job.status) == _decisive(new):
        op.written[uid] = new  # this process' view at once; the API's with the flush
        if unflushed is None:
            op.unflushed[uid] = False
            asyncio.get_running_loop().call_later(STATUS_FLUSH_SECONDS, _flush_due, op, key, uid)
        return
    await op.api.patch_job_status(key[0], key[1], status_patch(new))
    op.written[uid] = new
    op.unflushed.pop(uid, None)


def _flush_due(op: OperatorState, key: JobKey, uid: str) -> None:
    if uid in op.unflushed:
        op.unflushed[uid] = True
        spawn_job(op, key)


_UNCHANGED = object()  # _reserve: the status needs no write


def _reserve(op: OperatorState, job: MLJob, new: MLJobStatus) -> object:
    """Under the admission lock: make `new` the job's status for every later decision (op.claims reads
    op.written) before it is written, so the write itself happens outside the lock. Admissions in a burst then
    overlap their round trips instead of queueing one PATCH at a time behind the lock. Returns what
    op.written held before (None: nothing), or _UNCHANGED."""
    if not status_changed(job.status, new):
        return _UNCHANGED
    uid = job.metadata.get("uid", "")
    before = op.written.get(uid)
    op.written[uid] = new
    return before


async def _write_reserved(op: OperatorState, key: JobKey, job: MLJob, new: MLJobStatus, before: object) -> None:
    """Write a status _reserve took; if the write fails, give the reservation back. The job's retried pass
    decides again, and wakes the queue once its admission is written (jobs that waited meanwhile also have
    the periodic re-check)."""
    if before is _UNCHANGED:
        return
    try:
        await op.api.patch_job_status(key[0], key[1], status_patch(new))
        op.unflushed.pop(job.metadata.get("uid", ""), None)
    except BaseException:
        uid = job.metadata.get("uid", "")
        if op.written.get(uid) is new:
            if before is None:
                op.written.pop(uid, None)
            else:
                op.written[uid] = cast(MLJobStatus, before)
        raise


async def _ensure_runtime_account(op: OperatorState, namespace: str) -> None:
    """The namespace's shared runtime account (RuntimeAccountPolicy.PER_NAMESPACE), applied once per process:
    concurrent first jobs of a namespace wait on the same write; a failed write is tried again by the next."""
    if op.cfg.runtime_account is not RuntimeAccountPolicy.PER_NAMESPACE:
        return
    pending = op.runtime_accounts.get(namespace)
    if pending is None:
        pending = asyncio.ensure_future(_all([op.api.apply(obj) for obj in build_namespace_runtime_rbac(namespace)]))
        op.runtime_accounts[namespace] = pending
    try:
        await asyncio.shield(pending)
    except Exception:
        if op.runtime_accounts.get(namespace) is pending:
            del op.runtime_accounts[namespace]
        raise


async def _ensure_children(op: OperatorState, job: MLJob, st: MLJobStatus, pools: dict[str, ComputePool]) -> None:
    ref = JobRef.of(job)
    await _ensure_runtime_account(op, ref.namespace)
    generation = int(job.metadata.get("generation") or 0)
    if (st.attempt, generation) in op.children_ready.get(ref.uid, ()):
        return
    # Independent writes, sent together (a RoleBinding may name its Role before the Role exists); the pods come
    # after them (their ServiceAccount must exist). Objects that never change are created, not applied (a
    # create costs the API server less than a server-side apply); the contract follows resizes, so it is applied.
    writes: list[Awaitable[Any]] = []
    if op.cfg.runtime_account is RuntimeAccountPolicy.PER_JOB:
        writes += [op.api.apply(obj) for obj in build_runtime_rbac(ref)]
    if job.spec.ray.auth_mode == "token":
        writes.append(op.api.create_if_absent(build_ray_token_secret(ref, secrets.token_urlsafe(32))))
    shift = local_port_shift(ref.uid, op.cfg.ray_port_stride)
    doc = build_job_contract(job, pools, attempt=st.attempt, port_shift=shift)
    writes += [op.api.apply(build_contract_configmap(ref, doc)), op.api.create_if_absent(build_headless_service(ref)),
               op.api.create_if_absent(build_network_policy(ref))]
    await _all(writes)
    op.children_ready.setdefault(ref.uid, set()).add((st.attempt, generation))


async def _apply_plan(op: OperatorState, key: JobKey, job: MLJob, st: MLJobStatus, plan: Plan,
                      pools: dict[str, ComputePool]) -> None:
    if plan.ensure_children:
        await _ensure_children(op, job, st, pools)
    uid = job.metadata.get("uid", "")
    # Pods created by an earlier pass but not yet in the watch would be planned again (a 409 per pod): remember
    # them until the watch shows them, or EXPECT_POD_SECONDS passed (a create that never landed is retried).
    expected = op.created_pods.setdefault(uid, {})
    now = time.monotonic()
    todo = [p for p in plan.create_pods if expected.get(p["metadata"]["name"], 0.0) <= now]
    try:
        await _all([op.api.create_if_absent(p) for p in todo])
    except Exception:
        op.runtime_accounts.pop(key[0], None)  # e.g. its ServiceAccount was deleted: written again next pass
        raise
    for p in todo:
        expected[p["metadata"]["name"]] = now + EXPECT_POD_SECONDS
    if plan.endpoint_slice is not None and op.endpoint_slices.get(uid) != plan.endpoint_slice:
        await op.api.apply(plan.endpoint_slice)
        op.endpoint_slices[uid] = plan.endpoint_slice
    if plan.apply_raycluster is not None and op.rayclusters.get(uid) != plan.apply_raycluster:
        await op.api.apply(plan.apply_raycluster)  # replicas follow the granted instances (scale_cluster)
        op.rayclusters[uid] = plan.apply_raycluster
    if plan.delete_raycluster:
        await op.api.delete_raycluster(key[0], raycluster_name(key[1]))
        op.rayclusters.pop(uid, None)
    await _release_pods(op, key, plan.release_pods)
    for name in plan.delete_pods:
        await op.api.delete_pod(key[0], name, op.cfg.pod_termination_grace_seconds)
    if plan.delete_job:
        log.info("MLJob %s/%s: ttlSecondsAfterFinished passed; deleting it", *key)
        await op.api.delete_job(*key)


async def _all(writes: list[Awaitable[Any]]) -> None:
    """Await independent API writes concurrently (at most WRITE_CONCURRENCY at once per call); every one runs
    to its end before the first error, if any, is raised."""
    slots = asyncio.Semaphore(WRITE_CONCURRENCY)

    async def bounded(write: Awaitable[Any]) -> Any:
        async with slots:
            return await write

    for result in await asyncio.gather(*(bounded(w) for w in writes), return_exceptions=True):
        if isinstance(result, BaseException):
            raise result


async def _release_pods(op: OperatorState, key: JobKey, pods: list[PodView]) -> None:
    for p in pods:
        await op.api.remove_pod_finalizer(key[0], p.name, p.finalizers, POD_FINALIZER)


def _announce(op: OperatorState, body: dict[str, Any], prev: MLJobStatus | None, new: MLJobStatus) -> None:
    """One Event per transition of (phase, reason)."""
    before = (prev.phase, prev.reason) if prev else (None, None)
    if before == (new.phase, new.reason) or new.phase is None:
        return
    warning = new.phase in _WARNING_PHASES or new.reason in _WARNING_REASONS
    op.post_event(kopf.Body(cast(kopf.RawBody, body)), type="Warning" if warning else "Normal",
                  reason=new.reason or str(new.phase), message=f"{new.phase}: {new.message or ''}"[:1024])


def _holds_capacity(st: MLJobStatus | None) -> bool:
    return st is not None and st.admitted_at is not None and not (st.phase is not None and st.phase.finished)


def _waiting(st: MLJobStatus | None) -> bool:
    return st is None or st.admitted_at is None and not (st.phase is not None and st.phase.finished)


def _queue_moved(prev: MLJobStatus | None, new: MLJobStatus) -> bool:
    """Whether the job changed its pools' queue or admitted set: admitted, left the queue unadmitted (cancelled
    or timed out while waiting), finished, or shrank. Jobs waiting on those pools must then decide again."""
    return (_holds_capacity(prev) != _holds_capacity(new) or _waiting(prev) != _waiting(new)
            or (prev is not None and len(prev.instances) > len(new.instances)))


def _schedule(op: OperatorState, key: JobKey, plan: Plan) -> None:
    """Wake the job when its next deadline passes (timeouts, TTL, worker grace): no polling."""
    old = op.wakeups.pop(key, None)
    if old is not None:
        old.cancel()
    if plan.wake_at is None:
        return
    delay = max((plan.wake_at - _now()).total_seconds(), 0.0) + 0.5  # a little late beats a little early
    op.wakeups[key] = asyncio.get_running_loop().call_later(delay, spawn_job, op, key)


def spawn_job(op: OperatorState, key: JobKey, delay: float = 0.0) -> None:
    """Reconcile a job in the background (pod events, wake-ups, queue moves); retried on API errors. A burst
    of events while one pass is already waiting (for `delay`, then for the job's lock) costs one pass, not one
    per event."""
    if key in op.pending:
        return
    op.pending.add(key)
    if delay > 0:
        asyncio.get_running_loop().call_later(delay, _start_job, op, key)
    else:
        _start_job(op, key)


def _start_job(op: OperatorState, key: JobKey) -> None:
    asyncio.ensure_future(_guarded(op, key))


async def _guarded(op: OperatorState, key: JobKey) -> None:
    try:
        await reconcile_job(op, key)
    except KubeError as e:
        metrics.API_ERRORS.labels(status=str(e.status)).inc()
        log.warning("MLJob %s/%s: %s; retrying in %ss", key[0], key[1], e, RETRY_SECONDS)
        asyncio.get_running_loop().call_later(RETRY_SECONDS, spawn_job, op, key)
    except Exception:
        log.exception("MLJob %s/%s: reconcile failed; retrying in %ss", key[0], key[1], RETRY_SECONDS)
        asyncio.get_running_loop().call_later(RETRY_SECONDS, spawn_job, op, key)


def trigger_waiting(op: OperatorState, pool_names: list[str]) -> None:
    """Capacity or a pool changed: reconcile the jobs waiting on those pools (oldest first) and the pools."""
    for c in admission.waiting_in_order(op.claims(), pool_names):
        spawn_job(op, (c.namespace, c.name))
    refresh_pools(op, pool_names)


async def recheck_queue_forever(op: OperatorState) -> None:
    """Safety net against a lost wake-up: every QUEUE_RECHECK_SECONDS the waiting jobs decide again, oldest
    first. Cheap when nothing waits; a waiting job's pass writes nothing when its decision is unchanged."""
    while True:
        await asyncio.sleep(QUEUE_RECHECK_SECONDS)
        try:
            claims = op.claims()
            for c in admission.waiting_in_order(claims, {p for claim in claims for p in claim.pools}):
                spawn_job(op, (c.namespace, c.name))
        except Exception:  # never let the safety net die with one bad read
            log.exception("queue re-check failed")


def refresh_pools(op: OperatorState, pool_names: list[str]) -> None:
    """Refresh the pools' status (and the job gauges) POOL_REFRESH_SECONDS from now: a pool's status is
    informational, so every trigger in that window costs one pass and at most one write per pool."""
    loop = asyncio.get_running_loop()
    for name in dict.fromkeys(pool_names):
        if name not in op.pools_due:
            op.pools_due.add(name)
            loop.call_later(POOL_REFRESH_SECONDS, _start_pool_refresh, op, name)
    if EXPORT_DUE not in op.pools_due:
        op.pools_due.add(EXPORT_DUE)
        loop.call_later(POOL_REFRESH_SECONDS, _start_pool_refresh, op, EXPORT_DUE)


def _start_pool_refresh(op: OperatorState, name: str) -> None:
    op.pools_due.discard(name)  # triggers from here on schedule the next pass
    if name == EXPORT_DUE:
        _export(op)
    else:
        asyncio.ensure_future(reconcile_pool_guarded(op, name))


async def reconcile_pool(op: OperatorState, name: str) -> None:
    pools = op.pools()
    pool = pools.get(name)
    if pool is None:
        op.pools_written.pop(name, None)
        op.pools_written_uid.pop(name, None)
        pools_mod.cancel_auto_suspend(op, name)  # its placeholders go with it (owner reference)
        return
    uid = pool.metadata.get("uid", "")
    if op.pools_written_uid.get(name) != uid:  # a new pool of the same name: what was written is not its
        op.pools_written.pop(name, None)
        op.pools_written_uid[name] = uid
    written = op.pools_written.get(name)
    if written is not None:
        # This process is the status' only writer: its last write is newer than the watch (idleSince must not
        # step back to an older idle period).
        pool = pool.model_copy(update={"status": ComputePoolStatus.model_validate(written)})
    new = compute_pool_status(pool, op.nodes(), op.claims(), _now(), op.placeholders(name),
                              warm_capacity=op.cfg.warm_capacity)
    pools_mod.schedule_auto_suspend(op, pool, new, refresh_pools)
    await _write_pool_status(op, name, pool.status, new)
    await pools_mod.sync_placeholders(op, pool, new)


async def _write_pool_status(op: OperatorState, name: str, old: ComputePoolStatus | None,
                             new: ComputePoolStatus) -> None:
    if old is not None and old.model_dump(exclude={"conditions"}) == new.model_dump(exclude={"conditions"}) \
            and [c.wire() for c in old.conditions] == [c.wire() for c in new.conditions]:
        return
    wire = new.wire()
    if op.pools_written.get(name) == wire:  # our last write, not yet back from the watch
        return
    await op.api.patch_pool_status(name, status_patch(new))
    op.pools_written[name] = wire


async def reconcile_pool_guarded(op: OperatorState, name: str) -> None:
    try:
        await reconcile_pool(op, name)
    except KubeError as e:
        metrics.API_ERRORS.labels(status=str(e.status)).inc()
        log.warning("ComputePool %s: %s; retrying in %ss", name, e, RETRY_SECONDS)
        # Its placeholders must not wait for the next unrelated event.
        asyncio.get_running_loop().call_later(RETRY_SECONDS, refresh_pools, op, [name])


def _export(op: OperatorState) -> None:
    counts = dict.fromkeys(JobPhase, 0)
    for _, job in op.jobs():
        if job.status and job.status.phase:
            counts[job.status.phase] += 1
    for phase, n in counts.items():
        metrics.JOBS.labels(phase=str(phase)).set(n)
    metrics.QUEUED.set(sum(1 for c in op.claims() if c.waiting))


def job_key(body: Any) -> JobKey:
    meta = body.get("metadata", {})
    return meta.get("namespace", "default"), meta.get("name", "")


def pod_job_key(body: Any) -> JobKey | None:
    meta = body.get("metadata", {})
    job = (meta.get("labels") or {}).get(naming.LABEL_JOB)
    return (meta.get("namespace", "default"), job) if job else None
