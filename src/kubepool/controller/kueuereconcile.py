"""Kueue's steps of an MLJob's pass where the operator acts for Kueue (OperatorConfig.kueue): carry out what
`kueue.decide` says for a job labelled with a LocalQueue. Runs under the job's lock: first in the pass (hold or
release the job, write its Workload), and again once the pass finds the job finished (its Workload Finished at
once, so Kueue's next job starts)."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from kubepool import naming, objectmeta
from kubepool.api import ComputePool, MLJob, MLJobStatus
from kubepool.controller import kueue
from kubepool.controller.builders.common import Obj, Placement, laid_out
from kubepool.controller.builders.podsettings import ANNOTATION_KUEUE_PLACEMENT
from kubepool.controller.builders.workload import build_workload
from kubepool.controller.view import JobKey

if TYPE_CHECKING:
    from kubepool.controller.state import OperatorState

log = logging.getLogger(__name__)


async def kueue_step(op: OperatorState, key: JobKey, job: MLJob, status: MLJobStatus | None,
                     layout: Sequence[Placement] | None = None) -> bool:
    """Carry out Kueue's next steps for the job; True when it changed the job's spec.suspend. `layout`: the pass's,
    when `status` is the one the pass began with."""
    queue = kueue.queue_of(job)
    if not op.cfg.kueue or not queue:
        return False
    job = job.model_copy(update={"status": status})
    layout = laid_out(job, layout)
    uid = objectmeta.uid(job)
    now = datetime.now(UTC)
    try:
        wanted = build_workload(job, op.view.pools(), op.cfg, queue, layout)
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
    if steps.suspend is not None and not await _suspend(op, key, job, steps, layout):
        return False
    if steps.pods_ready is not None:
        await op.api.replace_status(steps.workload, kueue.with_condition(steps.workload, steps.pods_ready))
    if steps.release:
        await op.api.replace_status(steps.workload, kueue.released_status(steps.workload, now))
    if steps.finish is not None:
        current = steps.workload.get("status") or {}
        conditions = [c for c in current.get("conditions") or [] if c.get("type") != kueue.FINISHED]
        await op.api.replace_status(steps.workload, {**current, "conditions": [*conditions, steps.finish]})
    return steps.suspend is not None


async def _suspend(op: OperatorState, key: JobKey, job: MLJob, steps: kueue.Steps,
                   layout: Sequence[Placement]) -> bool:
    """Suspend the job, or resume it with its admission's placement (the assigned ResourceFlavors' nodeLabels
    and tolerations, per group); an admission the job cannot honour leaves it suspended, with a Warning Event
    (Kueue's waitForPodsReady, where on, then evicts it). False when it stayed as it was."""
    ns, name = key
    uid = objectmeta.uid(job)
    had = ANNOTATION_KUEUE_PLACEMENT in (job.metadata.get("annotations") or {})
    wanted: str | None = None
    if not steps.suspend:
        admitted = next(iter(w for w in op.view.workloads(key, uid) if kueue.condition(w, kueue.ADMITTED)), {})
        flavors: dict[str, Obj] = {}
        for flavor in {f for fs in kueue.flavors_of(admitted).values() for f in fs}:
            flavors[flavor] = await op.api.get_object(naming.KUEUE_API_VERSION, "ResourceFlavor", None, flavor) or {}
        try:
            placed = kueue.placement(admitted, flavors, _selectors(layout, op.view.pools()))
        except ValueError as e:
            message = f"Kueue's admission cannot be honoured: {e}; the job stays suspended"
            log.warning("MLJob %s/%s: %s", ns, name, message)
            op.post_event({"apiVersion": naming.API_VERSION, "kind": naming.MLJOB_KIND,
                           "metadata": {"name": name, "namespace": ns, "uid": uid}},
                          type="Warning", reason="KueueAdmissionRefused", message=message)
            return False
        wanted = json.dumps(placed, sort_keys=True) if placed else None
        short = kueue.partial_admission(admitted, placed)
        if short:
            log.info("MLJob %s/%s: %s", ns, name, short)
            op.post_event({"apiVersion": naming.API_VERSION, "kind": naming.MLJOB_KIND,
                           "metadata": {"name": name, "namespace": ns, "uid": uid}},
                          type="Normal", reason=kueue.PARTIAL_ADMISSION, message=short)
    if wanted is None and not had:
        generation = await op.api.set_job_suspend(ns, name, bool(steps.suspend), uid)
    else:
        generation = await op.api.set_job_placement(ns, name, bool(steps.suspend), uid,
                                                    {ANNOTATION_KUEUE_PLACEMENT: wanted})
    op.view.spec_written[uid] = generation
    log.info("MLJob %s/%s: %s for Kueue", ns, name, "suspended" if steps.suspend else "admitted: resumed")
    return True


def _selectors(layout: Sequence[Placement], pools: dict[str, ComputePool]) -> dict[str, dict[str, str]]:
    """Each pod set's pool nodeSelector (a flavor's nodeLabels must agree with it)."""
    out: dict[str, dict[str, str]] = {}
    for inst in layout:
        pool = pools.get(inst.pool)
        out.setdefault(naming.dns_label(inst.group), dict(pool.spec.node_selector) if pool is not None else {})
    return out
