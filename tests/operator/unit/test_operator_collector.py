"""The garbage collector's policy (controller.collector), run with CPython's own collector: what survives a full
collection is frozen, later garbage is still collected, and a cycle among frozen objects goes at the review."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from kubepool.controller.collector import FreezeAfterFullCollections


class Node:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only the cyclic collector frees it


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def policy() -> Iterator[tuple[FreezeAfterFullCollections, Clock]]:
    gc.collect()
    clock = Clock()
    p = FreezeAfterFullCollections(review_seconds=60.0, clock=clock, reviewed=0.0)
    p.install()
    try:
        yield p, clock
    finally:
        p.uninstall()
        gc.collect()


def test_survivors_of_a_full_collection_are_frozen_and_new_garbage_still_goes(
        policy: tuple[FreezeAfterFullCollections, Clock]) -> None:
    p, _ = policy
    kept = [Node() for _ in range(100)]
    gc.collect()
    assert p.freezes == 1 and gc.get_freeze_count() >= len(kept)
    later = weakref.ref(Node())  # cyclic garbage made after the freeze
    assert later() is not None
    gc.collect()
    assert later() is None


def test_a_cycle_frozen_while_alive_goes_at_the_review(policy: tuple[FreezeAfterFullCollections, Clock]) -> None:
    p, clock = policy
    node = Node()
    ref = weakref.ref(node)
    gc.collect()  # frozen with the rest of the heap
    del node
    gc.collect()
    assert ref() is not None, "a frozen cycle outlives its last reference until the review"
    clock.now = 60.0
    gc.collect()  # the review is due: this collection lifts the freeze ...
    assert p.reviews == 1 and gc.get_freeze_count() == 0
    gc.collect()  # ... and the next walks everything
    assert ref() is None
    assert gc.get_freeze_count() > 0, "frozen again after the review"


def test_uninstall_lifts_the_freeze_and_stops_freezing() -> None:
    gc.collect()
    p = FreezeAfterFullCollections()
    p.install()
    p.install()  # once only
    assert sum(cb is p for cb in gc.callbacks) == 1
    gc.collect()
    assert gc.get_freeze_count() > 0
    p.uninstall()
    assert gc.get_freeze_count() == 0 and all(cb is not p for cb in gc.callbacks)
    gc.collect()
    assert gc.get_freeze_count() == 0


def test_young_collections_do_not_freeze(policy: tuple[FreezeAfterFullCollections, Clock]) -> None:
    p, _ = policy
    gc.collect(0)
    gc.collect(1)
    assert p.freezes == 0 and gc.get_freeze_count() == 0
