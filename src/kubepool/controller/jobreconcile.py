"""One MLJob's pass, level-based and safe to run any number of times: read the job from the cluster view,
decide its status (admission under the admission lock), persist it before creating anything, wake the
queue, announce the transition, then make the children match the plan and sleep until the next deadline (a
job queued by Kueue is held or released first). The steps run in this order in `reconcile_job`; the pure decisions are in jobstatus/admission/plan."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from kubepool import objectmeta
from kubepool.api import Backend, ComputePool, JobPhase, MLJob, MLJobStatus
from kubepool.api.kuberay import RAYCLUSTER_CRD
from kubepool.controller import admission, kueue, metrics, vocabulary
from kubepool.controller.builders.common import Placement, placement_of, pools_of
from kubepool.controller.builders.pods import credentials_secrets, shared_claims
from kubepool.controller.jobchildren import apply_plan, release_pods
from kubepool.controller.jobstatus import Observed, compute_job_status, ends
from kubepool.controller.kueue import instances_ready_changed
from kubepool.controller.kueuereconcile import kueue_step
from kubepool.controller.leader import LeadershipLost
from kubepool.controller.observed import PodView
from kubepool.controller.plan import plan_job
from kubepool.controller.view import JobKey, claim_of
from kubepool.kube.errors import KubeError

if TYPE_CHECKING:
    from kubepool.controller.state import OperatorState

log = logging.getLogger(__name__)
_WARNING_PHASES = {JobPhase.FAILED, JobPhase.CANCELLED}
_WARNING_REASONS = {vocabulary.POOL_NOT_FOUND, vocabulary.POOL_TOO_SMALL, vocabulary.API_REFUSED, vocabulary.WORKERS_CUT_OFF}


def _now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


async def reconcile_job(op: OperatorState, key: JobKey) -> None:
    """Bring one job one step closer to its spec. Passes of one job never overlap (the queue's job lock)."""
    started = time.monotonic()
    async with op.queue.lock(key):
        op.queue.started(key)
        found = op.view.job(key)
        if found is None or found[1].get("metadata", {}).get("deletionTimestamp"):
            await release_pods(op, key, [p for p in op.view.pods(key) if p.deleting])  # nothing left to decide
            return
        queued, body = found
        # Never decided on as it was before this process' own write to its spec (Kueue's suspend or resume): a
        # pass woken by another event (its Workload admitted) would run it unsuspended, or uncut, on a stale view.
        # The watch's event of that write brings the next pass.
        if op.view.behind(queued):
            return
        # Where Kueue admitted fewer instances than the job counts (partial admission), the job runs with those.
        job = kueue.as_admitted(queued) if op.cfg.kueue else queued
        # The instance layout of the job as it runs, computed once here and passed along (status, plan, children,
        # Kueue, queue). Kueue's Workload counts every instance the job asks for: where it admitted fewer, its
        # step lays out the job as queued itself.
        layout = placement_of(job)
        # 0. Kueue's gate, where the operator acts for Kueue: a queued job held or released changes its spec,
        # and the pass that change brings decides from there.
        if await kueue_step(op, key, queued, queued.status, layout if job is queued else None):
            return
        prev = job.status
        pods = op.view.pods(key, objectmeta.uid(job))
        op.children.pods_seen(objectmeta.uid(job), pods)
        pools = op.view.pools()
        backend = job.spec.backend or op.cfg.default_backend
        # 1. the status, persisted before anything is created
        new = await _decide_and_write(op, key, job, layout, pods, pools, backend)
        # 2. the queue, woken right after the status is persisted, before the children: if creating them fails,
        # the retried pass sees no transition any more and the jobs queued behind this one would never be woken.
        _wake_queue(op, pools_of(job, layout), prev, new)
        # 3. the Event and the metrics of the transition, for the same reason before the children
        _announce(op, body, prev, new)
        metrics.observe_job(job.metadata.get("creationTimestamp"), new.pools or ",".join(pools_of(job, layout)), prev, new)
        # 4. the children, and 5. the next deadline
        plan = plan_job(job, new, pods, pools, cfg=op.cfg, now=_now(), backend=backend, layout=layout)
        try:
            await apply_plan(op, key, job, new, plan, pools, layout)
        except KubeError as e:
            if e.refused:
                await _refused(op, key, job, body, pods, backend, new, str(e))
            raise  # the queue retries with backoff
        op.children.refused.pop(objectmeta.uid(job), None)
        if ends(prev, new) or instances_ready_changed(prev, new):
            # Its Workload finished at once (Kueue's next job starts), or its PodsReady written (a status change
            # brings no pass of its own)
            await kueue_step(op, key, queued, new)
        op.queue.wake_at(key, plan.wake_at)
    metrics.RECONCILE_SECONDS.observe(time.monotonic() - started)


async def _decide_and_write(op: OperatorState, key: JobKey, job: MLJob, layout: Sequence[Placement],
                            pods: list[PodView], pools: dict[str, ComputePool], backend: Backend) -> MLJobStatus:
    """The job's next status, written (or, when not decisive, scheduled by the status writer). A job not yet
    admitted, or resized while admitted (scale_cluster patched targetInstances or an instanceCount), is
    decided and reserved under the admission lock, so two jobs never take the same capacity."""
    prev = job.status
    finished = prev is not None and prev.phase is not None and prev.phase.finished
    kuberay = backend is Backend.KUBERAY and not finished and await op.api.crd_exists(RAYCLUSTER_CRD)

    # A suspended job takes no decision (it holds and asks nothing); nor does one just resumed: that pass only
    # records its new place at the end of the queue (queuedAt), and the next one decides from there.
    paused = job.spec.suspend or job.spec.cancel or (prev is not None and prev.reason == vocabulary.SUSPENDED)
    admitting = (prev is None or prev.admitted_at is None and not finished) and not paused
    # Before anything is created: the channels' credential Secrets must opt in (metadata only, never the data).
    credentials = {s: await op.api.labels_of("v1", "Secret", key[0], s) for s in credentials_secrets(job)} if admitting else {}

    resized = (not admitting and not finished and not paused and prev is not None
               and len(layout) != len(prev.instances))
    # And the claims every instance writes: several nodes can mount them all only when ReadWriteMany.
    claims = {c: await op.api.access_modes_of(key[0], c) for c in shared_claims(job)} if admitting else {}

    def status(decision: admission.Decision | None = None) -> MLJobStatus:
        return compute_job_status(job, Observed(pods=pods, now=_now(), decision=decision, backend=backend,
                                                kuberay_installed=kuberay, credentials=credentials,
                                                claim_modes=claims, worker_grace_seconds=op.cfg.worker_grace_seconds,
                                                layout=layout,
                                                refused=op.children.refused.get(objectmeta.uid(job), "")))
    if not admitting and not resized:
        new = status()
        await op.status.write(key, job, new)
        return new
    async with op.queue.admission_lock:
        claim = claim_of(job, *key, layout=layout)
        others = op.view.claims(claim.pools)  # only claims sharing a pool bear on this one
        # ... and only their pools: the decision reads no other (not every pool per admission).
        near = {name: pools[name] for c in (claim, *others) for name in c.pools if name in pools}
        capacity = {name: p.spec.max_nodes for name, p in near.items()}
        if admitting:
            suspended = [name for name, p in near.items() if p.spec.suspend]
            decision = admission.decide(claim, others, capacity, suspended)
        else:
            decision = admission.Decision(True, admission.regrant(claim, others, capacity))
        new = status(decision)
        if not op.leading():  # the lease ran out since the pass began: another replica may be admitting now
            raise LeadershipLost(f"MLJob {key[0]}/{key[1]}: not the leader any more; admission left to the new one")
        reserved = op.status.reserve(key, job, new)
    await op.status.write_reserved(key, job, new, reserved)
    return new


async def _refused(op: OperatorState, key: JobKey, job: MLJob, body: dict[str, Any], pods: list[PodView],
                   backend: Backend, st: MLJobStatus, error: str) -> None:
    """The API server refused a write of the job's children (a ResourceQuota, an admission policy, RBAC): the
    job's status says so and an Event is posted at once, not when instancesTimeoutSeconds runs out."""
    op.children.refused[objectmeta.uid(job)] = error
    if st.admitted_at is None or st.phase is None or st.phase.finished:
        return
    # The pass reached the writes, so a kuberay job's CRD was there.
    new = compute_job_status(job.model_copy(update={"status": st}), Observed(
        pods=pods, now=_now(), backend=backend, kuberay_installed=True, refused=error,
        worker_grace_seconds=op.cfg.worker_grace_seconds))
    await op.status.write(key, job.model_copy(update={"status": st}), new)
    _announce(op, body, st, new)


def _holds_capacity(st: MLJobStatus | None) -> bool:
    return st is not None and st.admitted_at is not None and not (st.phase is not None and st.phase.finished)


def _waiting(st: MLJobStatus | None) -> bool:
    return st is None or (st.admitted_at is None and not (st.phase is not None and st.phase.finished)
                          and st.reason != vocabulary.SUSPENDED)


def _queue_moved(prev: MLJobStatus | None, new: MLJobStatus) -> bool:
    """Whether the job changed its pools' queue or admitted set: admitted, left the queue unadmitted (cancelled
    or timed out while waiting), finished, or shrank. Jobs waiting on those pools must then decide again."""
    return (_holds_capacity(prev) != _holds_capacity(new) or _waiting(prev) != _waiting(new)
            or (prev is not None and len(prev.instances) > len(new.instances)))


def _wake_queue(op: OperatorState, pools: list[str], prev: MLJobStatus | None, new: MLJobStatus) -> None:
    """Jobs waiting on the job's pools decide again when the queue moved; the pools' status follows any
    transition."""
    if _queue_moved(prev, new):
        op.queue.trigger_waiting(pools)
    elif prev is None or (prev.phase, prev.reason, prev.admitted_at) != (new.phase, new.reason, new.admitted_at):
        op.queue.refresh_pools(pools)


def _announce(op: OperatorState, body: dict[str, Any], prev: MLJobStatus | None, new: MLJobStatus) -> None:
    """One Event per transition of (phase, reason)."""
    before = (prev.phase, prev.reason) if prev else (None, None)
    if before == (new.phase, new.reason) or new.phase is None:
        return
    warning = new.phase in _WARNING_PHASES or new.reason in _WARNING_REASONS
    op.post_event(body, type="Warning" if warning else "Normal",
                  reason=new.reason or str(new.phase), message=f"{new.phase}: {new.message or ''}")
