"""The operator's start-up tuning of the cyclic garbage collector (main.tune_gc)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from kubepool.controller.main import GC_YOUNG, tune_gc


@pytest.fixture
def restored_gc() -> Iterator[None]:
    before = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*before)


@pytest.mark.usefixtures("restored_gc")
def test_start_up_objects_leave_the_collectors_sight_and_the_young_generation_grows() -> None:
    gc.unfreeze()
    held = [{"start-up": i} for i in range(1000)]  # built before tune_gc, kept for the process' life
    tracked = len(gc.get_objects())
    older = gc.get_threshold()[1:]
    tune_gc()
    assert gc.get_freeze_count() >= tracked and len(gc.get_objects()) < tracked - len(held)
    assert not any(o is held[0] for o in gc.get_objects())  # a full collection no longer walks it
    assert gc.get_threshold() == (GC_YOUNG, *older)
