"""The collector held off at start-up (controller/collector.py), kopf's readiness callback that ends the hold
(kopf_fence.when_indexed, through kopf's own ToggleSet API) and the work queue's idle check."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator
from typing import Any

import pytest
from kopf._cogs.aiokits import aiotoggles

from kubepool.controller import collector, kopf_fence
from kubepool.controller.collector import StartupHold
from kubepool.controller.workqueue import WorkQueue


@pytest.fixture(autouse=True)
def collector_restored(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(collector, "LOOK_SECONDS", 0.01)
    was = gc.isenabled()
    gc.enable()
    yield
    (gc.enable if was else gc.disable)()


def automatic_collections(objects: int = 200_000) -> int:
    """Collections CPython starts by itself while `objects` containers are made (and kept)."""
    seen: list[Any] = []
    gc.callbacks.append(lambda phase, _: seen.append(phase) if phase == "start" else None)
    try:
        kept = [[i] for i in range(objects)]
        assert len(kept) == objects
    finally:
        gc.callbacks.pop()
    return len(seen)


async def test_held_until_every_listed_object_is_indexed_and_the_queue_idles() -> None:
    hold, idle = StartupHold(), [True]
    hold.hold()
    assert automatic_collections() == 0  # the effect: no walks of the heap while the listings come in
    release = asyncio.create_task(hold.release_when_settled(lambda: idle[0]))
    await asyncio.sleep(0.1)
    assert not gc.isenabled() and not release.done()  # idle, but kopf has not indexed the listings yet
    idle[0] = False
    hold.indexed()
    await asyncio.sleep(0.1)
    assert not gc.isenabled()  # indexed, but passes are queued or running
    idle[0] = True
    await asyncio.wait_for(release, 1)
    assert gc.isenabled() and automatic_collections() > 0


async def test_back_on_after_the_time_limit_whatever_happens() -> None:
    hold = StartupHold()
    hold.hold()
    await asyncio.wait_for(hold.release_when_settled(lambda: False, max_seconds=0.1), 1)
    assert gc.isenabled()


async def test_back_on_when_the_operator_stops_first() -> None:
    hold = StartupHold()
    hold.hold()
    release = asyncio.create_task(hold.release_when_settled(lambda: False))
    await asyncio.sleep(0.05)
    release.cancel()
    with pytest.raises(asyncio.CancelledError):
        await release
    assert gc.isenabled()


async def test_a_collector_already_off_stays_off() -> None:
    gc.disable()
    hold = StartupHold()
    hold.hold()
    hold.indexed()
    await asyncio.wait_for(hold.release_when_settled(lambda: True), 1)
    assert not gc.isenabled()


async def test_the_readiness_callback_runs_once_when_every_listed_object_is_indexed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    called: list[str] = []
    monkeypatch.setattr(aiotoggles, "ToggleSet", aiotoggles.ToggleSet)
    assert kopf_fence.install_lean_readiness()
    assert kopf_fence.when_indexed(lambda: called.append("indexed"))
    paused = kopf_fence.LeanToggleSet(any)  # kopf's other kind of set never calls it
    await paused.drop_toggle(await paused.make_toggle(True))
    ready = kopf_fence.LeanToggleSet(all)
    blocker, a, b = [await ready.make_toggle(name=n) for n in ("blocker", "a", "b")]  # as kopf's orchestration
    await ready.drop_toggles([blocker, a])
    assert called == []
    await ready.drop_toggle(b)
    assert called == ["indexed"] and ready.is_on()
    await ready.drop_toggle(await ready.make_toggle(name="late"))  # off and on again: the callback is spent
    assert called == ["indexed"]
    assert isinstance(ready, kopf_fence._KopfToggleSet)


async def test_the_readiness_callback_waits_for_the_kinds_it_needs_listed(monkeypatch: pytest.MonkeyPatch) -> None:
    """kopf's readiness set is on for a moment before any stream starts (its orchestration runs first on the
    namespaces alone, with no resource to watch yet): a callback that needs kinds listed waits past it, for the
    first time the set turns on with them listed."""
    monkeypatch.setattr(aiotoggles, "ToggleSet", aiotoggles.ToggleSet)
    monkeypatch.setattr(kopf_fence, "_ON_INDEXED", [])
    monkeypatch.setattr(kopf_fence, "_LISTED", set())
    assert kopf_fence.install_lean_readiness()
    called: list[str] = []
    assert kopf_fence.when_indexed(lambda: called.append("jobs and pods"), [("g", "jobs"), ("", "pods")])
    ready = kopf_fence.LeanToggleSet(all)
    await ready.drop_toggle(await ready.make_toggle(name="orchestration blocker"))  # no stream yet
    assert called == [] and ready.is_on()
    blocker, jobs, pods = [await ready.make_toggle(name=n) for n in ("blocker", "jobs", "pods")]
    await ready.drop_toggle(blocker)
    kopf_fence._LISTED.add(("g", "jobs"))
    await ready.drop_toggle(jobs)
    kopf_fence._LISTED.add(("", "pods"))  # as relist_deletions records each listing, before kopf's mark
    await ready.drop_toggle(pods)
    assert called == ["jobs and pods"]


def test_no_readiness_callback_is_taken_where_kopfs_readiness_set_is_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(aiotoggles, "ToggleSet", kopf_fence._KopfToggleSet)
    monkeypatch.setattr(kopf_fence, "_ON_INDEXED", [])
    assert not kopf_fence.when_indexed(lambda: None) and kopf_fence._ON_INDEXED == []


async def test_the_queue_is_idle_with_no_pass_asked_for_or_running() -> None:
    q = WorkQueue()
    assert q.idle()
    q.pending.add(("ns", "a"))
    assert not q.idle()
    q.pending.clear()
    async with q.lock(("ns", "a")):
        assert not q.idle()
    assert q.idle()
