"""kopf glue only: indexes over what the operator watches, and thin handlers that turn every trigger into a
request to the work queue. No business logic here."""

from __future__ import annotations

from typing import Any

import kopf

from kubepool import naming
from kubepool.controller import jobwatch, podwatch, poolwatch, view
from kubepool.controller.jobchildren import child_seen
from kubepool.controller.observed import NodeView
from kubepool.controller.poolstatus import pools_affected_by_node
from kubepool.controller.state import OperatorState

MANAGED = {naming.LABEL_MANAGED_BY: naming.MANAGED_BY}
POD_LISTING = "pod_listing"  # the pod handlers' index: always empty (podwatch keeps the operator's own)
JOB_LISTING = "mljob_listing"  # the MLJob handlers' index: always empty (jobwatch keeps the operator's own)


def _op(memo: kopf.Memo) -> OperatorState:
    op: OperatorState = memo.op
    return op


# --- indexes: the operator reads the cluster from these, never by listing ------------------------------------
@kopf.index(naming.GROUP, naming.MLJOB_PLURAL, id=JOB_LISTING)
async def mljob_index(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """Registered so that kopf watches MLJobs and holds every handler until they are listed. Their events go to
    jobwatch.seen from the stream (main.take_over_streams); only where kopf's stream could not be taken over do
    they come here (kopf runs its index handlers before the event handlers), and to `reconcile_mljob`."""
    op = _op(memo)
    op.view.job_indexed(view.job_key(body))  # read again until its event handler ran
    jobwatch.file(op, dict(body))


@kopf.index("pods", labels=MANAGED, id=POD_LISTING)
async def pod_index(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """Registered so that kopf watches kubepool's pods and holds every handler until they are listed. Their
    events go to podwatch.seen from the stream (main.take_over_streams); only where kopf's stream
    could not be taken over do they come here, and to `pod_event`."""
    podwatch.file(_op(memo), body)


@kopf.index(naming.GROUP, naming.POOL_PLURAL, id=view.POOL_INDEX)
async def pool_index(body: kopf.Body, name: str, memo: kopf.Memo, **_: Any) -> dict[str, Any]:
    op: OperatorState | None = getattr(memo, "op", None)
    if op is not None:
        op.view.pool_changed()  # about to be stored
    return {name: dict(body)}


@kopf.index("nodes", id=view.NODE_INDEX)
async def node_index(body: kopf.Body, name: str, **_: Any) -> dict[str, NodeView]:
    return {name: NodeView.of(body)}


# --- MLJob -----------------------------------------------------------------------------------------------------
@kopf.on.event(naming.GROUP, naming.MLJOB_PLURAL)
async def reconcile_mljob(event: kopf.RawEvent, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """A job's event, where kopf's stream could not be taken over (`mljob_index` filed it): what it asks of the
    work queue (jobwatch.woken)."""
    op = _op(memo)
    if event["type"] == "DELETED":
        jobwatch.drop(op, dict(body))
    jobwatch.woken(op, event["type"], dict(body))


# --- pods, pools, nodes ----------------------------------------------------------------------------------------
@kopf.on.event("pods", labels=MANAGED)
async def pod_event(event: kopf.RawEvent, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    op = _op(memo)
    if event["type"] == "DELETED":
        podwatch.forget(op, body)
    podwatch.woken(op, event["type"], body)


@kopf.on.event("services", labels=MANAGED)
@kopf.on.event("networking.k8s.io", "networkpolicies", labels=MANAGED)
async def child_event(event: kopf.RawEvent, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """A job's Service or NetworkPolicy deleted (by hand, or the garbage collector removing an earlier job's of
    the same name): the job writes it again. Their events go to jobchildren.child_seen from the stream
    (main.take_over_streams); only where kopf's streams could not be taken over do they come here."""
    child_seen(_op(memo), event["type"], dict(body))


@kopf.on.event(naming.GROUP, naming.POOL_PLURAL)
async def pool_event(event: kopf.RawEvent, body: kopf.Body, name: str, memo: kopf.Memo, **_: Any) -> None:
    poolwatch.woken(_op(memo), event["type"], name, dict(body))


@kopf.on.event("nodes")
async def node_event(event: kopf.RawEvent, body: kopf.Body, name: str, memo: kopf.Memo, **_: Any) -> None:
    # Only the pools the node matched before or matches now, and only when readiness, labels, taints or
    # cordoning changed: heartbeats are most node events, and every pool per event made start-up O(nodes × pools²).
    op = _op(memo)
    new = None if event["type"] == "DELETED" else NodeView.of(body)
    old = op.view.node_views.pop(name, None)
    if new is not None:
        op.view.node_views[name] = new
    op.queue.refresh_pools(pools_affected_by_node(op.view.pools(), old, new))
