"""kubepool's MLJobs as the operator watches them: its own index of their bodies (by job key), and what each job
event asks of the work queue.

Each event reaches `seen` straight from kopf's MLJob stream (`kopf_fence.take_over`, main.take_over_streams), is
filed and acted on at once, without kopf's per-object machinery (a task, queue and memory per job, its causes,
its handler kwargs, its own index). Where kopf's stream cannot be taken over, kopf's MLJob handlers (`handlers`)
call `file`, `drop` and `woken` instead: the same index, the same wake-ups."""

from __future__ import annotations

import logging
from typing import Any

from kubepool import objectmeta
from kubepool.controller import view
from kubepool.controller.objectindex import ObjectIndex
from kubepool.controller.state import OperatorState
from kubepool.controller.view import JobKey

log = logging.getLogger(__name__)


def new_indexes() -> dict[str, ObjectIndex[Any, Any]]:
    """The job index the view reads, by its name in `view`."""
    return {view.JOB_INDEX: ObjectIndex[JobKey, dict[str, Any]]()}


def file(op: OperatorState, body: dict[str, Any]) -> None:
    """A job as listed or changed: what the index keeps of it (`view.indexed_job`) replaces what it held."""
    if uid := objectmeta.uid(body):
        op.view.indexes[view.JOB_INDEX].put(uid, view.job_key(body), view.indexed_job(body))


def drop(op: OperatorState, body: dict[str, Any]) -> None:
    op.view.indexes[view.JOB_INDEX].drop(objectmeta.uid(body))


def woken(op: OperatorState, event_type: str | None, body: dict[str, Any]) -> None:
    """What a job's event (already filed) asks for: a pass when the job is first seen by this process (created,
    or listed after a restart), its spec changed (a new generation) or its deletion started; once deleted, the
    jobs waiting on its pools. Status-only changes (mostly the operator's own writes) ask for nothing."""
    key = view.job_key(body)
    op.view.job_event(key)
    if event_type == "DELETED":
        op.forget(key, objectmeta.uid(body))
        spec = body.get("spec") or {}
        pools = [spec.get("computePool")] + [g.get("computePool") for g in spec.get("instanceGroups") or []]
        op.queue.trigger_waiting([p for p in pools if p])
        return
    seen = (objectmeta.uid(body), objectmeta.generation(body), bool(objectmeta.meta(body).get("deletionTimestamp")))
    if op.view.seen_jobs.get(key) != seen:
        op.view.seen_jobs[key] = seen
        op.queue.spawn(key)


def seen(op: OperatorState, event_type: str | None, body: dict[str, Any]) -> None:
    """One event of kopf's MLJob stream (type None: listed), taken over from kopf: filed, then acted on."""
    try:
        if event_type == "DELETED":
            drop(op, body)
        else:
            file(op, body)
        woken(op, event_type, body)
    except Exception:  # the stream is kopf's: an error here must not end it
        log.exception("MLJob event not handled: %s", objectmeta.meta(body).get("name"))
