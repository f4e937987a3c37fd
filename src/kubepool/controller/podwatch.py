"""kubepool's pods as the operator watches them: its own indexes of instance pods (by job) and warm-capacity
placeholders (by pool), and what each pod event asks of the work queue.

Pods are most of the operator's watch events (a start-up's pod is created, bound, made, run, ended). They reach
`seen` straight from kopf's pod stream (`kopf_fence.take_over`), each filed and acted on at once, without kopf's
per-event machinery (a task and queue per pod, its causes, its handler kwargs, its own index). Where kopf's
stream cannot be taken over, kopf's pod handlers (`handlers`) call `file` and `woken` instead: the same indexes,
the same wake-ups."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from kubepool import naming, objectmeta
from kubepool.controller import view
from kubepool.controller.objectindex import ObjectIndex
from kubepool.controller.observed import PlaceholderView, PodView
from kubepool.controller.state import OperatorState
from kubepool.controller.workqueue import pod_event_delay

log = logging.getLogger(__name__)


def new_indexes() -> dict[str, ObjectIndex[Any, Any]]:
    """The pod indexes the view reads, by their names in `view`."""
    return {view.POD_INDEX: ObjectIndex[tuple[str, str], PodView](),
            view.PLACEHOLDER_INDEX: ObjectIndex[str, PlaceholderView]()}


def _placeholder(labels: Mapping[str, str]) -> bool:
    return labels.get(naming.LABEL_ROLE) == naming.ROLE_PLACEHOLDER


def _managed(body: Mapping[str, Any]) -> bool:
    return ((body.get("metadata") or {}).get("labels") or {}).get(naming.LABEL_MANAGED_BY) == naming.MANAGED_BY


def file(op: OperatorState, body: Mapping[str, Any]) -> bool:
    """A kubepool pod as listed or changed: its view replaces the one its index held. Whether the view changed."""
    uid, labels = objectmeta.uid(body), objectmeta.meta(body).get("labels") or {}
    if not uid:
        return False
    if _placeholder(labels):
        placeholders: ObjectIndex[str, PlaceholderView] = op.view.indexes[view.PLACEHOLDER_INDEX]
        return placeholders.put(uid, labels.get(naming.LABEL_POOL, ""), PlaceholderView.of(body))
    if key := view.owning_job(body):
        pods: ObjectIndex[tuple[str, str], PodView] = op.view.indexes[view.POD_INDEX]
        return pods.put(uid, key, PodView.of(body))
    return False


def forget(op: OperatorState, body: Mapping[str, Any]) -> None:
    uid = objectmeta.uid(body)
    for name in (view.POD_INDEX, view.PLACEHOLDER_INDEX):
        op.view.indexes[name].drop(uid)


def woken(op: OperatorState, event_type: str | None, body: Mapping[str, Any]) -> None:
    """What a pod event asks of the work queue: its job's pass (sooner for the events that decide something:
    `pod_event_delay`; a pod that ended or is going, at once and without waiting for a pass slot), or its pool's
    pass for a placeholder (started, pre-empted or deleted: the pool's warmInstances moved, or a placeholder
    must be created again)."""
    labels = (body.get("metadata") or {}).get("labels") or {}
    if _placeholder(labels):
        if pool := labels.get(naming.LABEL_POOL):
            op.queue.refresh_pools([pool])
    elif key := view.owning_job(body):
        delay = 0.0 if event_type == "DELETED" else pod_event_delay(body)
        op.queue.spawn(key, delay=delay, urgent=delay == 0.0)


def seen(op: OperatorState, event_type: str | None, body: Mapping[str, Any]) -> None:
    """One event of kopf's pod stream (type None: listed), taken over from kopf: filed, then acted on. Only
    kubepool's pods: the watch's label selector (main.apply_settings) keeps others out, and they stop here too."""
    if not _managed(body):
        return
    try:
        if event_type == "DELETED":
            forget(op, body)
        elif not file(op, body):
            # Nothing a pass reads changed: a listing's pod as the index holds it (kopf lists every stream again
            # at least every watch timeout: thousands of kept pods would each wake their finished job), or a
            # change to a field no view reads.
            return
        woken(op, event_type, body)
    except Exception:  # the stream is kopf's: an error here must not end it
        log.exception("pod event not handled: %s", (body.get("metadata") or {}).get("name"))
