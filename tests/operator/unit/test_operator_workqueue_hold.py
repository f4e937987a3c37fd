"""The work queue held at start-up (`WorkQueue.hold`, until kopf's first listings are in): passes asked for meanwhile
wait, and start on `release`, jobs in the order they were first seen, then the pools."""

from __future__ import annotations

import asyncio

from kubepool.controller import workqueue
from kubepool.controller.workqueue import WorkQueue


async def test_a_held_queue_starts_nothing_until_released() -> None:
    ran: list[str] = []

    async def run_job(key: tuple[str, str]) -> None:
        q.started(key)  # as jobreconcile's pass
        ran.append(key[1])

    async def run_pool(name: str) -> None:
        ran.append(f"pool {name}")

    q = WorkQueue()
    q.bind(run_job=run_job, run_pool=run_pool, export=lambda: ran.append("export"), claims=lambda _: [])
    q.hold()
    q.spawn(("ns", "b"))
    q.spawn(("ns", "a"), delay=0.01)
    q.refresh_pools(["cpu"])
    q.spawn(("ns", "b"), delay=0.01)  # asked again: one pass
    await asyncio.sleep(workqueue.POOL_REFRESH_SECONDS + 0.2)
    assert ran == [] and q.pending == {("ns", "a"), ("ns", "b")} and not q.idle()
    q.release()
    await asyncio.sleep(0.05)
    assert [r for r in ran if r in ("a", "b")] == ["b", "a"], "first seen, first run"
    assert sorted(ran) == ["a", "b", "export", "pool cpu"] and q.idle()
    q.release()  # once only
    q.spawn(("ns", "a"))
    await asyncio.sleep(0.01)
    assert ran[-1] == "a"
