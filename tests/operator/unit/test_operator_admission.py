"""Admission: pool capacity (maxNodes), FIFO queue, partial grants down to minInstances (pure)."""

from __future__ import annotations

import pytest

from kubepool.controller.admission import Claim, decide, usage, waiting_in_order
from kubepool.controller.vocabulary import POOL_NOT_FOUND, POOL_SUSPENDED, POOL_TOO_SMALL, QUEUED


def claim(name: str, n: int, *, pool: str = "cpu", min_: int | None = None, granted: int = 0, t: int = 0,
          pools: tuple[str, ...] | None = None) -> Claim:
    return Claim("ns", name, f"2026-01-01T12:00:{t:02d}Z", pools or (pool,) * n, min_ or n, granted)


CAP = {"cpu": 3, "gpu": 2}


@pytest.mark.parametrize(("me", "others", "admitted", "granted", "reason"), [
    (claim("a", 3), [], True, 3, ""),
    (claim("a", 3, min_=2), [claim("x", 1, granted=1)], True, 2, ""),
    (claim("a", 3, min_=3), [claim("x", 1, granted=1)], False, 0, QUEUED),
    (claim("b", 1, t=2), [claim("a", 3, t=1), claim("x", 3, granted=3)], False, 0, QUEUED),  # FIFO: a is first
    (claim("b", 1, t=2), [claim("a", 2, pool="gpu", t=1)], True, 1, ""),  # other pool does not block
    (claim("a", 1, pool="nope"), [], False, 0, POOL_NOT_FOUND),
    (claim("a", 4), [], False, 0, POOL_TOO_SMALL),
    (claim("b", 1, t=2), [claim("a", 4, t=1)], True, 1, ""),  # a job that can never fit blocks nobody
    (claim("a", 3, pools=("cpu", "cpu", "gpu")), [claim("x", 2, pool="gpu", granted=2)], False, 0, QUEUED),
    (claim("a", 3, pools=("cpu", "cpu", "gpu"), min_=2), [claim("x", 2, pool="gpu", granted=2)], True, 2, ""),
    (claim("a", 1, t=1), [claim("b", 1, t=2, granted=1), claim("c", 1, t=3, granted=1)], True, 1, ""),
], ids=["fits", "partial-down-to-min", "min-does-not-fit", "fifo-blocks-later", "fifo-per-pool", "no-pool",
        "too-small", "never-fits-no-block", "hetero-gpu-full", "hetero-prefix-min", "last-slot"])
def test_decide(me: Claim, others: list[Claim], admitted: bool, granted: int, reason: str) -> None:
    d = decide(me, [me, *others], CAP)
    assert (d.admitted, d.granted, d.reason) == (admitted, granted, reason)
    if not admitted:
        assert d.message


def test_suspended_pool_admits_nothing() -> None:
    d = decide(claim("a", 1), [], CAP, suspended=["cpu"])
    assert (d.admitted, d.reason) == (False, POOL_SUSPENDED)


def test_usage_counts_granted_prefix_only() -> None:
    used = usage([claim("a", 3, pools=("cpu", "cpu", "gpu"), granted=2), claim("b", 1)])
    assert used == {"cpu": 2}


def test_queue_message_says_what_is_free() -> None:
    d = decide(claim("a", 2), [claim("x", 2, granted=2)], CAP)
    assert "1 of 3 free" in d.message


def test_waiting_in_order_is_fifo_per_pool() -> None:
    """Same-second jobs order by name ("job-12" < "job-2"); whatever the order they were decided in, a wake-up
    re-decides every waiting job of the pools, oldest first, and skips admitted ones and other pools."""
    claims = [claim("job-2", 1, t=1), claim("job-12", 1, t=1), claim("run", 1, t=0, granted=1),
              claim("old", 1, t=0), claim("g", 1, pool="gpu", t=0)]
    assert [c.name for c in waiting_in_order(claims, ["cpu"])] == ["old", "job-12", "job-2"]
    assert [c.name for c in waiting_in_order(claims, ["cpu", "gpu"])] == ["g", "old", "job-12", "job-2"]
    assert waiting_in_order(claims, ["none"]) == []


def test_burst_admits_everyone_when_woken_in_order() -> None:
    """A burst decided youngest first: all but the oldest queue behind it; after it is admitted, re-deciding
    the waiting jobs in waiting_in_order admits every one that fits (no job stays queued behind an admitted one)."""
    claims = {c.name: c for c in (claim(f"j{i}", 1, t=i) for i in range(3))}
    for name in ("j2", "j1"):
        assert decide(claims[name], claims.values(), CAP).reason == QUEUED
    while waiting := waiting_in_order(claims.values(), ["cpu"]):
        d = decide(waiting[0], claims.values(), CAP)
        assert d.admitted
        claims[waiting[0].name] = claim(waiting[0].name, 1, t=int(waiting[0].created[-3:-1]), granted=d.granted)
    assert all(not c.waiting for c in claims.values())


def test_a_job_queued_behind_others_keeps_its_decision_while_the_queue_ahead_of_it_moves() -> None:
    """A waiting job's status is written whenever its decision's message changes: a message counting the jobs
    ahead changed with every admission ahead of it, so each one rewrote the status of every job behind it."""
    me = claim("z", 1, t=9)
    ahead = [claim(f"a{i}", 3, t=i) for i in range(4)]
    decisions = [decide(me, [me, *ahead[i:]], CAP) for i in range(len(ahead))]
    assert all(d.reason == QUEUED for d in decisions)
    assert len({d.message for d in decisions}) == 1, [d.message for d in decisions]
    assert "cpu" in decisions[0].message
