"""A ComputePool's children and timers, run by each pool status pass (reconcile.reconcile_pool): the warm
capacity's placeholder pods made to match the pure builder, and the wake-up at the pool's auto-suspend
deadline. No polling: pool, job, node and placeholder events all reach here through reconcile.refresh_pools."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime

from kubepool import naming
from kubepool.api import ComputePool, ComputePoolStatus
from kubepool.controller.builders.placeholders import build_placeholder_pods, build_placeholder_priority_class
from kubepool.controller.state import OperatorState
from kubepool.controller.status import auto_suspend_at, placeholders_wanted
from kubepool.kube.errors import KubeError

log = logging.getLogger(__name__)
EXPECT_PLACEHOLDER_SECONDS = 30.0  # a created placeholder not yet in the watch is not created again this long


async def sync_placeholders(op: OperatorState, pool: ComputePool, st: ComputePoolStatus) -> None:
    """Create the pool's missing placeholders and delete the ones it no longer wants (fewer wanted, suspended,
    or built from an older spec). A pre-empted placeholder is simply created again: it waits Pending until a
    node of the pool is free, and never holds up a job (instances pre-empt it)."""
    name = pool.metadata["name"]
    wanted = build_placeholder_pods(pool, placeholders_wanted(pool, st, warm_capacity=op.cfg.warm_capacity),
                                    namespace=op.placeholder_namespace, cfg=op.cfg)
    uid = pool.metadata.get("uid", "")
    seen = {p.name: p for p in op.placeholders(name) if not uid or not p.owner_uid or p.owner_uid == uid}
    now = time.monotonic()
    for seen_name in seen:
        op.placeholders_created.pop(seen_name, None)  # the watch caught up with this create
    hashes = {p["metadata"]["name"]: p["metadata"]["annotations"][naming.ANNOTATION_PLACEHOLDER_SPEC] for p in wanted}
    todo = [p for p in wanted if p["metadata"]["name"] not in seen
            and op.placeholders_created.get(p["metadata"]["name"], 0.0) <= now]
    if todo and not op.priority_class_ready:
        await op.api.create_if_absent(build_placeholder_priority_class())  # idempotent; once per process
        op.priority_class_ready = True
    for pod in todo:
        try:
            created = await op.api.create_if_absent(pod)
        except KubeError:
            op.priority_class_ready = False  # perhaps deleted since: ensure it again on the next pass
            raise
        if created:
            op.placeholders_created[pod["metadata"]["name"]] = now + EXPECT_PLACEHOLDER_SECONDS
    for p in seen.values():
        if p.deleting or hashes.get(p.name) == p.spec_hash:
            continue
        await op.api.delete_pod(p.namespace, p.name, 0)  # its DELETED event brings a fresh pass (and pod)


def schedule_auto_suspend(op: OperatorState, pool: ComputePool, st: ComputePoolStatus,
                          wake: Callable[[OperatorState, list[str]], None]) -> None:
    """Wake the pool's status pass when it is due to auto-suspend (replacing any earlier wake-up); the
    deadline comes from status.idleSince, so a restarted operator resumes the same timer."""
    name = pool.metadata["name"]
    cancel_auto_suspend(op, name)
    at = auto_suspend_at(pool, st)
    if at is None:
        return
    delay = max((at - datetime.now(UTC)).total_seconds(), 0.0) + 0.5  # a little late beats a little early
    op.suspend_timers[name] = asyncio.get_running_loop().call_later(delay, wake, op, [name])


def cancel_auto_suspend(op: OperatorState, name: str) -> None:
    handle = op.suspend_timers.pop(name, None)
    if handle is not None:
        handle.cancel()
