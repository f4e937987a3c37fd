"""A ComputePool's status pass, run by the work queue (coalesced, never polled: pool, job, node and placeholder
events all ask for it): its status written when it changed, the warm capacity's placeholder pods made to match
the pure builder, and the wake-up at the pool's auto-suspend deadline. `memos.PoolMemo` holds what this
process wrote. Also the job-phase gauges, refreshed with the pools."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from kubepool import naming, objectmeta
from kubepool.api import ComputePool, ComputePoolStatus, JobPhase
from kubepool.controller import metrics
from kubepool.controller.builders.placeholders import build_placeholder_pods, build_placeholder_priority_class
from kubepool.controller.poolstatus import (
    auto_suspend_at,
    compute_pool_status,
    placeholders_wanted,
    pool_events,
    pool_status_changed,
)
from kubepool.kube.errors import KubeError

if TYPE_CHECKING:
    from kubepool.controller.state import OperatorState

EXPECT_PLACEHOLDER_SECONDS = 30.0  # a created placeholder not yet in the watch is not created again this long


def _now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


async def reconcile_pool(op: OperatorState, name: str) -> None:
    memo = op.pool_memo
    pool = op.view.pools().get(name)
    if pool is None:
        memo.forget(name)
        metrics.forget_pool(name)
        return
    uid = objectmeta.uid(pool)
    if memo.written_uid.get(name) != uid:  # a new pool of the same name: what was written is not its
        memo.written.pop(name, None)
        memo.written_uid[name] = uid
    written = memo.written.get(name)
    if written is not None:
        # This process is the status' only writer: its last write is newer than the watch (idleSince must not
        # step back to an older idle period).
        pool = pool.model_copy(update={"status": ComputePoolStatus.model_validate(written)})
    new = compute_pool_status(pool, op.view.nodes(), op.view.claims([name]), _now(), op.view.placeholders(name),
                              warm_capacity=op.cfg.warm_capacity)
    _schedule_auto_suspend(op, pool, new)
    metrics.set_pool(name, pool.spec.max_nodes, new)
    old = pool.status
    await _write_status(op, name, old, new)
    _announce(op, pool, old, new)  # once persisted: a failed write retries a pass that still sees the change
    await _sync_placeholders(op, pool, new)


def _announce(op: OperatorState, pool: ComputePool, old: ComputePoolStatus | None, new: ComputePoolStatus) -> None:
    events = pool_events(old, new)
    if not events:
        return
    body = {"apiVersion": naming.API_VERSION, "kind": naming.POOL_KIND, "metadata": pool.metadata}
    for type_, reason, message in events:
        op.post_event(body, type=type_, reason=reason, message=message)


async def _write_status(op: OperatorState, name: str, old: ComputePoolStatus | None, new: ComputePoolStatus) -> None:
    if not pool_status_changed(old, new):
        return
    wire = new.wire()
    if op.pool_memo.written.get(name) == wire:  # our last write, not yet back from the watch
        return
    await op.api.patch_pool_status(name, new.merge_patch())
    op.pool_memo.written[name] = wire


async def _sync_placeholders(op: OperatorState, pool: ComputePool, st: ComputePoolStatus) -> None:
    """Create the pool's missing placeholders and delete the ones it no longer wants (fewer wanted, suspended,
    or built from an older spec). A pre-empted placeholder is simply created again: it waits Pending until a
    node of the pool is free, and never holds up a job (instances pre-empt it)."""
    memo, name = op.pool_memo, objectmeta.name(pool)
    wanted = build_placeholder_pods(pool, placeholders_wanted(pool, st, warm_capacity=op.cfg.warm_capacity),
                                    namespace=op.placeholder_namespace, cfg=op.cfg)
    uid = objectmeta.uid(pool)
    seen = {p.name: p for p in op.view.placeholders(name) if not uid or not p.owner_uid or p.owner_uid == uid}
    now = time.monotonic()
    for seen_name in seen:
        memo.placeholders_created.pop(seen_name, None)  # the watch caught up with this create
    hashes = {p["metadata"]["name"]: p["metadata"]["annotations"][naming.ANNOTATION_PLACEHOLDER_SPEC] for p in wanted}
    todo = [p for p in wanted if p["metadata"]["name"] not in seen
            and memo.placeholders_created.get(p["metadata"]["name"], 0.0) <= now]
    if todo and not memo.priority_class_ready:
        await op.api.create_if_absent(build_placeholder_priority_class())  # idempotent; once per process
        memo.priority_class_ready = True
    for pod in todo:
        try:
            created = await op.api.create_if_absent(pod)
        except KubeError:
            memo.priority_class_ready = False  # perhaps deleted since: ensure it again on the next pass
            raise
        if created:
            memo.placeholders_created[pod["metadata"]["name"]] = now + EXPECT_PLACEHOLDER_SECONDS
    for p in seen.values():
        if p.deleting or hashes.get(p.name) == p.spec_hash:
            continue
        await op.api.delete_pod(p.namespace, p.name, 0)  # its DELETED event brings a fresh pass (and pod)


def _schedule_auto_suspend(op: OperatorState, pool: ComputePool, st: ComputePoolStatus) -> None:
    """Wake the pool's status pass when it is due to auto-suspend (replacing any earlier wake-up); the
    deadline comes from status.idleSince, so a restarted operator resumes the same timer."""
    name = objectmeta.name(pool)
    op.pool_memo.cancel_auto_suspend(name)
    at = auto_suspend_at(pool, st)
    if at is None:
        return
    delay = max((at - datetime.now(UTC)).total_seconds(), 0.0) + 0.5  # a little late beats a little early
    op.pool_memo.suspend_timers[name] = asyncio.get_running_loop().call_later(delay, op.queue.refresh_pools, [name])


def export_job_gauges(op: OperatorState) -> None:
    counts = op.view.phase_counts()
    for phase in JobPhase:
        metrics.JOBS.labels(phase=str(phase)).set(counts.get(str(phase), 0))
    metrics.QUEUED.set(sum(1 for c in op.view.claims() if c.waiting))
