"""kubetest.cluster_turn, the cluster tests' turns on the shared cluster: shared turns overlap, an exclusive one
waits for them and holds back new ones. Threads stand for processes: flock locks belong to each open file."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from kubetest import cluster_turn

HELD_BACK_S = 0.5  # how long a turn that must wait is watched not to begin


class Turn:
    """One turn taken in a thread: `began` once it holds the locks; it ends when `end` is set."""

    def __init__(self, state_dir: Path, exclusive: bool) -> None:
        self.began, self.end = threading.Event(), threading.Event()
        self.thread = threading.Thread(target=self._run, args=(state_dir, exclusive), daemon=True)
        self.thread.start()

    def _run(self, state_dir: Path, exclusive: bool) -> None:
        with cluster_turn(state_dir, exclusive):
            self.began.set()
            self.end.wait(30)

    def finish(self) -> None:
        self.end.set()
        self.thread.join(10)
        assert not self.thread.is_alive(), "a turn did not end"


@pytest.fixture
def turns() -> Iterator[list[Turn]]:
    started: list[Turn] = []
    yield started
    for t in started:  # a failed test's turns end too
        t.end.set()


def take(turns: list[Turn], state_dir: Path, exclusive: bool) -> Turn:
    turns.append(Turn(state_dir, exclusive))
    return turns[-1]


def test_shared_turns_overlap(tmp_path: Path, turns: list[Turn]) -> None:
    a = take(turns, tmp_path, exclusive=False)
    assert a.began.wait(10)
    b = take(turns, tmp_path, exclusive=False)
    assert b.began.wait(10), "a second shared turn waited for the first"


def test_an_exclusive_turn_waits_for_the_running_shared_turns(tmp_path: Path, turns: list[Turn]) -> None:
    shared = take(turns, tmp_path, exclusive=False)
    assert shared.began.wait(10)
    alone = take(turns, tmp_path, exclusive=True)
    assert not alone.began.wait(HELD_BACK_S), "the exclusive turn began beside a running shared one"
    shared.finish()
    assert alone.began.wait(10), "the exclusive turn never began"


def test_a_waiting_exclusive_turn_holds_back_new_shared_turns(tmp_path: Path, turns: list[Turn]) -> None:
    first = take(turns, tmp_path, exclusive=False)
    assert first.began.wait(10)
    alone = take(turns, tmp_path, exclusive=True)
    assert not alone.began.wait(HELD_BACK_S)
    later = take(turns, tmp_path, exclusive=False)
    assert not later.began.wait(HELD_BACK_S), "a new shared turn overtook the waiting exclusive one"
    first.finish()
    assert alone.began.wait(10)
    assert not later.began.wait(HELD_BACK_S), "a shared turn began beside the exclusive one"
    alone.finish()
    assert later.began.wait(10)
