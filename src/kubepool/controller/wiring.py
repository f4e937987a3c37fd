"""Builds the operator's state and binds its work queue to the reconcilers: the one place that knows every
piece, so none of them imports another's caller."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from typing import Any

from kubepool import naming
from kubepool.controller.config import OperatorConfig
from kubepool.controller.events import EventPoster
from kubepool.controller.jobreconcile import reconcile_job
from kubepool.controller.poolreconcile import export_job_gauges, reconcile_pool
from kubepool.controller.state import OperatorState
from kubepool.controller.statuswriter import StatusWriter
from kubepool.controller.view import ClusterView
from kubepool.controller.workqueue import WorkQueue
from kubepool.kube.api import KubeApi


def new_operator(cfg: OperatorConfig, api: KubeApi, *, indexes: Mapping[str, Any] | None = None,
                 placeholder_namespace: str = "default",
                 post_event: Callable[..., None] | None = None) -> OperatorState:
    queue = WorkQueue()
    status = StatusWriter(api, wake=queue.spawn)
    view = ClusterView(written=status.written, indexes=indexes if indexes is not None else {})
    status.changed = view.status_changed
    view.settled = status.settle
    op = OperatorState(cfg=cfg, api=api, view=view, queue=queue, status=status,
                       placeholder_namespace=placeholder_namespace,
                       post_event=post_event or EventPoster(api, naming.FIELD_MANAGER))
    queue.bind(run_job=partial(_if_leading, op, reconcile_job), run_pool=partial(_if_leading, op, reconcile_pool),
               export=partial(export_job_gauges, op), claims=view.claims)
    return op


async def _if_leading(op: OperatorState, run: Callable[[OperatorState, Any], Awaitable[None]], key: Any) -> None:
    """A pass runs only while this process leads (leader election): a replica that lost its lease writes nothing
    while it stops."""
    if op.leading():
        await run(op, key)
