"""The operator's state, one per process (kept in kopf's memo): a few small objects, each owning its caches
and its own `forget`, so a cache added to one of them is forgotten with it.

    view       ClusterView   kopf's indexes as parsed models; what the handlers last acted on
    queue      WorkQueue     when passes run: coalescing, retries, deadlines, per-job locks
    status     StatusWriter  a job's status writes (write-behind, admission reservations)
    children   ChildMemo     what this process wrote of each job's children
    pool_memo  PoolMemo      what this process wrote of each pool, its auto-suspend timers

`wiring.new_operator` builds it and binds the queue to the reconcilers."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from kubepool.controller.config import OperatorConfig
from kubepool.controller.memos import ChildMemo, PoolMemo
from kubepool.controller.statuswriter import StatusWriter
from kubepool.controller.view import ClusterView, JobKey
from kubepool.controller.workqueue import WorkQueue
from kubepool.kube.api import KubeApi


@dataclass
class OperatorState:
    cfg: OperatorConfig
    api: KubeApi
    view: ClusterView
    queue: WorkQueue
    status: StatusWriter
    children: ChildMemo = field(default_factory=ChildMemo)
    pool_memo: PoolMemo = field(default_factory=PoolMemo)
    placeholder_namespace: str = "default"  # where the warm capacity's placeholders live
    post_event: Callable[..., None] = field(default=lambda *_, **__: None)  # events.EventPoster; tests record
    # Whether this process may write now (leader.LeaderElector.leading with leader election; always without).
    leading: Callable[[], bool] = field(default=lambda: True)

    def forget(self, key: JobKey, uid: str) -> None:
        """Job `uid` was deleted: nothing of it stays (a new job of the same name starts afresh). When a newer job
        of the name is already watched (a deletion seen late, after a watch gap), what is kept by name is the
        newer job's and stays."""
        superseded = self.view.superseded(key, uid)
        self.view.forget(key, uid)
        if not superseded:
            self.queue.forget(key)
        self.status.forget(uid)
        self.children.forget(uid)

    def close(self) -> None:
        self.queue.close()
        self.pool_memo.close()
