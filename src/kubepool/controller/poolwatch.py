"""What a ComputePool's event asks of the work queue.

A pool's events come through kopf's pool stream (`handlers.pool_event`), after kopf has stored the pool in its
index. They are level-triggered as the jobs' are (jobwatch.woken): kopf's create, update and resume handlers
would each have stored kopf's own record of the pool (its last-handled spec, in an annotation) on the pool,
a write to the user's object for every new pool and spec change that nothing here reads."""

from __future__ import annotations

from typing import Any

from kubepool import objectmeta
from kubepool.controller.state import OperatorState


def woken(op: OperatorState, event_type: str | None, name: str, body: dict[str, Any]) -> None:
    """A pool first seen by this process (created, or listed after a restart), its spec changed (a new generation),
    or deleted: the jobs waiting for it decide again, then its status. Status-only changes (the operator's own
    writes, echoed back) ask for nothing."""
    op.view.pool_changed()  # kopf stored the pool in its index (or dropped it: deleted)
    if event_type == "DELETED":
        op.view.seen_pools.pop(name, None)
    else:
        seen = (objectmeta.uid(body), objectmeta.generation(body))
        if op.view.seen_pools.get(name) == seen:
            return
        op.view.seen_pools[name] = seen
    op.queue.trigger_waiting([name])
