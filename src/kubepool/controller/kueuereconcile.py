"""Kueue's steps of an MLJob's pass where the operator acts for Kueue (OperatorConfig.kueue): carry out what
`kueue.decide` says for a job labelled with a LocalQueue. Runs under the job's lock: first in the pass (hold or
release the job, write its Workload), and again once the pass finds the job finished (its Workload Finished at
once, so Kueue's next job starts)."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from kubepool import naming
from kubepool.api import MLJob, MLJobStatus
from kubepool.controller import kueue
from kubepool.controller.builders.workload import build_workload
from kubepool.controller.view import JobKey

if TYPE_CHECKING:
    from kubepool.controller.state import OperatorState

log = logging.getLogger(__name__)


async def kueue_step(op: OperatorState, key: JobKey, job: MLJob, status: MLJobStatus | None) -> bool:
    """Carry out Kueue's next steps for the job; True when it changed the job's spec.suspend."""
    queue = kueue.queue_of(job)
    if not op.cfg.kueue or not queue:
        return False
    job = job.model_copy(update={"status": status})
    uid = job.metadata.get("uid", "")
    now = datetime.now(UTC)
    try:
        wanted = build_workload(job, op.view.pools(), op.cfg, queue)
    except ValueError:  # a pool not there (yet): the job's status says so; the Workload waits for it
        wanted = None
    steps = kueue.decide(job, op.view.workloads(key, uid), wanted, now)
    if steps.empty:
        return False
    ns, name = key
    if steps.invalid:
        log.warning("MLJob %s/%s: %s", ns, name, steps.invalid)
        op.post_event({"apiVersion": naming.API_VERSION, "kind": naming.MLJOB_KIND,
                       "metadata": {"name": name, "namespace": ns, "uid": uid}},
                      type="Warning", reason="InvalidLocalQueue", message=steps.invalid)
    for stale in steps.delete:
        await op.api.delete_object(naming.KUEUE_API_VERSION, naming.WORKLOAD_KIND, ns, stale)
    if steps.create is not None and await op.api.create_if_absent(steps.create):
        log.info("MLJob %s/%s: Workload %s created in LocalQueue %s", ns, name, steps.create["metadata"]["name"], queue)
    if steps.suspend is not None:
        await op.api.set_job_suspend(ns, name, steps.suspend, uid)
        log.info("MLJob %s/%s: %s for Kueue", ns, name, "suspended" if steps.suspend else "admitted: resumed")
    if steps.release:
        await op.api.replace_status(steps.workload, kueue.released_status(steps.workload, now))
    if steps.finish is not None:
        current = steps.workload.get("status") or {}
        conditions = [c for c in current.get("conditions") or [] if c.get("type") != kueue.FINISHED]
        await op.api.replace_status(steps.workload, {**current, "conditions": [*conditions, steps.finish]})
    return steps.suspend is not None
