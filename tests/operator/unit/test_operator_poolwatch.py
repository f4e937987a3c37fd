"""What a ComputePool's event asks of the work queue (poolwatch): a pool new to this process, a new spec or a
deletion runs the jobs waiting for it, then its status; the echo of the operator's own status write asks for
nothing."""

from __future__ import annotations

from typing import Any

from kubepool.controller import poolwatch, workqueue
from support.factories import job, pool
from support.operator import operator_state, wire


def body(generation: int = 1, uid: str = "c1", **status: Any) -> dict[str, Any]:
    out = wire(pool())
    out["metadata"].update(uid=uid, generation=generation)
    return {**out, "status": status} if status else out


async def test_a_new_spec_runs_the_waiting_jobs_and_a_status_echo_runs_nothing() -> None:
    op, _, _ = operator_state([job()], [pool()])
    try:
        def woken_by(event_type: str | None, b: dict[str, Any]) -> tuple[set[Any], set[str]]:
            op.queue.pending.clear()
            op.queue.pools_due.clear()
            poolwatch.woken(op, event_type, "cpu", b)
            return set(op.queue.pending), op.queue.pools_due - {workqueue.EXPORT_DUE}

        ran = ({("ns", "train")}, {"cpu"})
        assert woken_by(None, body()) == ran  # listed: new to this process (kopf's on.resume did this)
        assert woken_by("MODIFIED", body(phase="Active")) == (set(), set())  # its status written: nothing
        assert woken_by("MODIFIED", body(generation=2)) == ran  # its spec changed
        assert woken_by("MODIFIED", body(generation=2, uid="c2")) == ran  # a new pool of the name
        assert woken_by("DELETED", body(generation=2, uid="c2")) == ran  # the waiting jobs see it gone
        assert woken_by("ADDED", body(uid="c3")) == ran  # created again
    finally:
        op.close()
