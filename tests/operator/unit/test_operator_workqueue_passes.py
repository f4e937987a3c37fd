"""At most MAX_JOB_PASSES job passes run at once (`WorkQueue.passes`): a burst of new jobs does not start a pass
for every job at once, each holding what it built while it waits for an API slot; the waiting passes start
oldest job first, so a job seen before the burst (its end, its progress) is not queued behind it."""

from __future__ import annotations

import asyncio

from kubepool.controller import workqueue
from kubepool.controller.workqueue import WorkQueue


async def test_a_burst_runs_a_bounded_number_of_passes_at_once_the_oldest_job_first() -> None:
    running: set[str] = set()
    most = 0
    order: list[str] = []
    go = asyncio.Event()

    async def run_job(key: tuple[str, str]) -> None:
        nonlocal most
        q.started(key)
        running.add(key[1])
        most = max(most, len(running))
        order.append(key[1])
        await go.wait()  # as a pass waiting for its API slots
        running.discard(key[1])

    async def run_pool(_: str) -> None:
        return None

    q = WorkQueue()
    q.bind(run_job=run_job, run_pool=run_pool, export=lambda: None, claims=lambda _: [])
    q.spawn(("ns", "old"), delay=3600)  # seen before the burst; its pass asked for later
    burst = [f"job-{i:03d}" for i in range(3 * workqueue.MAX_JOB_PASSES)]
    for name in burst:
        q.spawn(("ns", name))
    await asyncio.sleep(0.05)
    assert most == workqueue.MAX_JOB_PASSES and order == burst[:workqueue.MAX_JOB_PASSES]
    q.spawn(("ns", "old"))  # e.g. its head ended: its pass goes before the burst's waiting ones
    go.set()
    for _ in range(50):
        await asyncio.sleep(0.01)
        if q.idle():
            break
    assert most == workqueue.MAX_JOB_PASSES and q.idle()
    assert order[workqueue.MAX_JOB_PASSES] == "old" and sorted(order) == sorted([*burst, "old"])


async def test_an_urgent_pass_takes_no_slot_also_where_its_pass_waits_for_one() -> None:
    """A pod that ended (the job's outcome) starts its job's pass at once with every slot taken, also where the
    job's pass already waits for a slot (one such pass, however many pods end meanwhile); the pass that waited
    runs later (and finds nothing left to do)."""
    runs: list[str] = []
    go = asyncio.Event()

    async def run_job(key: tuple[str, str]) -> None:
        q.started(key)
        runs.append(key[1])
        if key[1].startswith("busy"):
            await go.wait()

    async def run_pool(_: str) -> None:
        return None

    q = WorkQueue()
    q.bind(run_job=run_job, run_pool=run_pool, export=lambda: None, claims=lambda _: [])
    for i in range(workqueue.MAX_JOB_PASSES):
        q.spawn(("ns", f"busy-{i}"))
    q.spawn(("ns", "ended"), urgent=True)
    q.spawn(("ns", "waits"))
    await asyncio.sleep(0.05)
    assert runs[-1] == "ended" and "waits" not in runs  # every slot busy: the urgent one ran, the other waits
    q.spawn(("ns", "waits"), urgent=True)  # e.g. its head ended while its pass waited for a slot ...
    q.spawn(("ns", "waits"), urgent=True)  # ... and a worker with it: still one pass beside the waiting one
    await asyncio.sleep(0.05)
    assert runs[-1] == "waits" and runs.count("waits") == 1
    go.set()
    await asyncio.sleep(0.05)
    assert runs.count("waits") == 2 and q.idle()
