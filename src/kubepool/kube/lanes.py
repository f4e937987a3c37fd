"""Who goes first when the operator's requests wait for a slot (kube.aio's lanes): the oldest job's. Each job
gets a place in line when the operator first sees it (`new_place`), and every request of its passes waits
there (`take_place`: a context variable, so the tasks a pass starts inherit it). A request of no job's pass
(a pool's status) takes a new place when it is made: behind the jobs seen before it, ahead of those
seen after, so nothing waits for ever behind a stream of new jobs. The leader's lease calls go first (FIRST).

Why: under a burst of admissions the slots are all taken, and a job that ran while the burst was admitted
(its end, its progress) queued behind dozens of requests of jobs that came later; its user and the jobs queued
behind it wait for its end."""

from __future__ import annotations

import asyncio
import heapq
import itertools
from contextvars import ContextVar

FIRST = -1  # ahead of every job (the leader's lease)
_places = itertools.count()
_PLACE: ContextVar[int | None] = ContextVar("kubepool_request_place", default=None)


def new_place() -> int:
    """A place in line behind every place given out before."""
    return next(_places)


def take_place(place: int) -> None:
    """This task's requests (and those of the tasks it starts from here on) wait at `place`."""
    _PLACE.set(place)


def current_place() -> int:
    place = _PLACE.get()
    return new_place() if place is None else place


class OrderedSlots:
    """A semaphore whose waiters get a slot lowest place first, in arrival order among equal places."""

    def __init__(self, slots: int) -> None:
        self._free = slots
        self._waiters: list[tuple[int, int, asyncio.Future[None]]] = []
        self._arrivals = itertools.count()

    async def acquire(self, place: int) -> None:
        if self._free > 0 and not self._waiters:
            self._free -= 1
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (place, next(self._arrivals), fut))
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():  # handed a slot, then cancelled before it ran: pass it on
                self.release()
            raise  # a cancelled future left in the heap is skipped by release

    def release(self) -> None:
        while self._waiters:
            fut = heapq.heappop(self._waiters)[2]
            if not fut.done():
                fut.set_result(None)  # the slot goes straight to the waiter: _free unchanged
                return
        self._free += 1

    def slot(self, place: int) -> _Slot:
        return _Slot(self, place)


class _Slot:
    def __init__(self, slots: OrderedSlots, place: int) -> None:
        self._slots, self._place = slots, place

    async def __aenter__(self) -> None:
        await self._slots.acquire(self._place)

    async def __aexit__(self, *_: object) -> None:
        self._slots.release()
