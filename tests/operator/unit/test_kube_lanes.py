"""kubepool.kube.lanes: requests waiting for one of the API client's slots go oldest job first. The ordered
semaphore itself, then through the real `Api` (a stand-in HTTP client that holds each request until told) and
the real WorkQueue (a job's pass makes its requests at the job's place)."""

from __future__ import annotations

import asyncio
from typing import Any

from kubepool.controller.workqueue import WorkQueue
from kubepool.kube import aio, lanes


async def _queued(slots: lanes.OrderedSlots, place: int, got: list[str], name: str) -> None:
    await slots.acquire(place)
    got.append(name)


async def test_waiters_get_a_slot_lowest_place_first_then_in_arrival_order() -> None:
    slots = lanes.OrderedSlots(1)
    await slots.acquire(50)  # the only slot taken
    got: list[str] = []
    waiting = [asyncio.ensure_future(_queued(slots, place, got, name))
               for place, name in ((9, "young"), (3, "old-a"), (7, "middle"), (3, "old-b"))]
    await asyncio.sleep(0)
    assert got == []
    for _ in waiting:
        slots.release()
        await asyncio.sleep(0)
    assert got == ["old-a", "old-b", "middle", "young"]
    await asyncio.gather(*waiting)


async def test_a_cancelled_waiter_never_keeps_a_slot() -> None:
    slots = lanes.OrderedSlots(1)
    await slots.acquire(0)
    got: list[str] = []
    left = asyncio.ensure_future(_queued(slots, 1, got, "left"))
    handed = asyncio.ensure_future(_queued(slots, 2, got, "handed"))
    last = asyncio.ensure_future(_queued(slots, 3, got, "last"))
    await asyncio.sleep(0)
    left.cancel()  # cancelled while waiting: skipped
    await asyncio.sleep(0)
    slots.release()  # to "handed", which is cancelled before it runs: the slot goes on to "last"
    handed.cancel()
    await asyncio.sleep(0.01)
    assert got == ["last"] and last.done() and left.cancelled() and handed.cancelled()
    slots.release()
    await asyncio.wait_for(slots.acquire(0), 1)  # every slot came back


class HeldHttp:
    """Holds every request until `answer_one`; records the order in which requests reached the wire."""

    def __init__(self) -> None:
        self.wire: list[str] = []
        self.held: list[asyncio.Future[None]] = []

    async def request(self, method: str, url: str, **_: Any) -> Any:
        self.wire.append(url.rsplit("/", 1)[-1])
        fut = asyncio.get_running_loop().create_future()
        self.held.append(fut)
        await fut
        return type("Reply", (), {"status_code": 200, "content": b"{}", "text": "{}"})()

    def answer_one(self) -> None:
        next(f for f in self.held if not f.done()).set_result(None)

    async def close(self) -> None:
        pass


async def _as_job(place: int, call: Any) -> None:
    lanes.take_place(place)
    await call()


async def test_an_older_jobs_request_goes_before_younger_ones_that_queued_first() -> None:
    http = HeldHttp()
    api = aio.Api(http)
    old, young = lanes.new_place(), lanes.new_place()
    busy = [asyncio.ensure_future(_as_job(young, lambda i=i: api.labels_of("v1", "Secret", "ns", f"young-{i}")))
            for i in range(aio.MAX_IN_FLIGHT + 3)]
    await asyncio.sleep(0.01)
    assert len(http.wire) == aio.MAX_IN_FLIGHT  # every slot taken, three young ones waiting
    late = asyncio.ensure_future(_as_job(old, lambda: api.labels_of("v1", "Secret", "ns", "old")))
    lease = asyncio.ensure_future(api.write_lease("ns", "lead", {}, "7"))
    await asyncio.sleep(0.01)
    assert len(http.wire) == aio.MAX_IN_FLIGHT
    http.answer_one()
    await asyncio.sleep(0.01)
    assert http.wire[-1] == "lead", "the leader's lease first of all"
    http.answer_one()
    await asyncio.sleep(0.01)
    assert http.wire[-1] == "old", "the older job's request took the freed slot ahead of the younger ones"
    while not all(f.done() for f in [*busy, late, lease]):
        http.answer_one()
        await asyncio.sleep(0.01)
    assert http.wire[-3:] == [f"young-{i}" for i in range(aio.MAX_IN_FLIGHT, aio.MAX_IN_FLIGHT + 3)]


async def test_a_jobs_passes_make_their_requests_at_the_place_it_got_when_first_seen() -> None:
    seen: dict[tuple[str, str], list[int]] = {}

    async def run_job(key: tuple[str, str]) -> None:
        queue.started(key)
        seen.setdefault(key, []).append(lanes.current_place())

    async def run_pool(_: str) -> None:
        pass

    queue = WorkQueue()
    queue.bind(run_job=run_job, run_pool=run_pool, export=lambda: None, claims=lambda _: [])
    first, second = ("ns", "first"), ("ns", "second")
    queue.spawn(first)
    queue.spawn(second)
    await asyncio.sleep(0.01)
    queue.spawn(second)
    await asyncio.sleep(0.01)
    assert seen[first][0] < seen[second][0] == seen[second][1]
    queue.forget(second)
    assert second not in queue.places
    assert lanes.current_place() > seen[second][0], "outside a pass: a new place, behind every job seen"
