"""kopf glue only: indexes over what the operator watches, and thin handlers that route every trigger to
`reconcile`. No business logic here."""

from __future__ import annotations

from typing import Any

import kopf

from kubepool import naming
from kubepool.controller import reconcile
from kubepool.controller.observed import FAILED, SUCCEEDED, NodeView, PlaceholderView, PodView
from kubepool.controller.state import OperatorState
from kubepool.controller.status import pools_affected_by_node

MANAGED = {naming.LABEL_MANAGED_BY: naming.MANAGED_BY}
PLACEHOLDERS = {**MANAGED, naming.LABEL_ROLE: naming.ROLE_PLACEHOLDER}  # warm capacity (ComputePool minNodes)


def _op(memo: kopf.Memo, kwargs: dict[str, Any]) -> OperatorState:
    """The operator's state, with the kopf indexes (live views) captured for background reconciles."""
    op: OperatorState = memo.op
    if not op.indexes:
        op.indexes = {k: v for k, v in kwargs.items() if k.endswith("_index")}
    return op


# --- indexes: the operator reads the cluster from these, never by listing ------------------------------------
@kopf.index(naming.GROUP, naming.MLJOB_PLURAL)
async def mljob_index(body: kopf.Body, namespace: str | None, name: str, **_: Any) -> dict[tuple[str, str], Any]:
    return {(namespace or "default", name): dict(body)}  # no copy: kopf never mutates an event's body


@kopf.index("pods", labels=MANAGED)
async def pod_index(body: kopf.Body, namespace: str | None, labels: kopf.Labels,
                    **_: Any) -> dict[tuple[str, str], PodView] | None:
    job = labels.get(naming.LABEL_JOB)
    return {(namespace or "default", job): PodView.of(body)} if job else None


@kopf.index("pods", labels=PLACEHOLDERS)
async def placeholder_index(body: kopf.Body, labels: kopf.Labels, **_: Any) -> dict[str, PlaceholderView]:
    return {labels.get(naming.LABEL_POOL, ""): PlaceholderView.of(body)}


@kopf.index(naming.GROUP, naming.POOL_PLURAL)
async def pool_index(body: kopf.Body, name: str, **_: Any) -> dict[str, Any]:
    return {name: dict(body)}


@kopf.index("nodes")
async def node_index(body: kopf.Body, name: str, **_: Any) -> dict[str, NodeView]:
    return {name: NodeView.of(body)}


# --- MLJob -----------------------------------------------------------------------------------------------------
@kopf.on.event(naming.GROUP, naming.MLJOB_PLURAL)
async def reconcile_mljob(event: kopf.RawEvent, body: kopf.Body, memo: kopf.Memo, **kwargs: Any) -> None:
    """A job's triggers: first seen by this process (created, or listed after a restart), its spec changed (a
    new generation), its deletion started, deleted. Status-only changes (mostly the operator's own writes)
    trigger nothing, as kopf's on.create/on.update(field="spec")/on.resume did, without their per-job
    annotation write and diff base. The pass runs in the background (retried in RETRY_SECONDS on errors)."""
    op, key = _op(memo, kwargs), reconcile.job_key(body)
    meta = body.get("metadata", {})
    if event["type"] == "DELETED":
        op.forget(key, meta.get("uid", ""))
        spec = body.get("spec", {})
        pools = [spec.get("computePool")] + [g.get("computePool") for g in spec.get("instanceGroups") or []]
        reconcile.trigger_waiting(op, [p for p in pools if p])
        return
    seen = (meta.get("uid", ""), meta.get("generation"), bool(meta.get("deletionTimestamp")))
    if op.seen_jobs.get(key) != seen:
        op.seen_jobs[key] = seen
        reconcile.spawn_job(op, key)


# --- pods, pools, nodes ----------------------------------------------------------------------------------------
@kopf.on.event("pods", labels=MANAGED)
async def pod_event(body: kopf.Body, memo: kopf.Memo, **kwargs: Any) -> None:
    key = reconcile.pod_job_key(body)
    if key is None:
        return
    # A job's pods start in bursts (created, bound, running, ready: one pass and status write per burst); a pod
    # that ended or is being deleted decides the job's outcome: no wait.
    ended = body.get("status", {}).get("phase") in (SUCCEEDED, FAILED) or body.get("metadata", {}).get("deletionTimestamp")
    reconcile.spawn_job(_op(memo, kwargs), key, delay=0.0 if ended else reconcile.POD_EVENT_DELAY_SECONDS)


@kopf.on.event("pods", labels=PLACEHOLDERS)
async def placeholder_event(labels: kopf.Labels, memo: kopf.Memo, **kwargs: Any) -> None:
    # Started, pre-empted or deleted: the pool's warmInstances moved, or a placeholder must be created again.
    pool = labels.get(naming.LABEL_POOL)
    if pool:
        reconcile.refresh_pools(_op(memo, kwargs), [pool])


@kopf.on.resume(naming.GROUP, naming.POOL_PLURAL)
@kopf.on.create(naming.GROUP, naming.POOL_PLURAL)
@kopf.on.update(naming.GROUP, naming.POOL_PLURAL, field="spec")
async def reconcile_computepool(name: str, memo: kopf.Memo, **kwargs: Any) -> None:
    reconcile.trigger_waiting(_op(memo, kwargs), [name])  # jobs waiting for this pool, then its status


@kopf.on.event("nodes")
async def node_event(event: kopf.RawEvent, body: kopf.Body, name: str, memo: kopf.Memo, **kwargs: Any) -> None:
    # Only the pools the node matched before or matches now, and only when readiness, labels, taints or
    # cordoning changed: heartbeats are most node events, and every pool per event made start-up O(nodes × pools²).
    op = _op(memo, kwargs)
    new = None if event["type"] == "DELETED" else NodeView.of(body)
    old = op.node_views.pop(name, None)
    if new is not None:
        op.node_views[name] = new
    reconcile.refresh_pools(op, pools_affected_by_node(op.pools(), old, new))
