"""The head -> worker handshake: a real server on loopback, and the worker loop on a fake clock."""

from __future__ import annotations

import pytest

from kubepool.runtime.shutdown import ShutdownServer, WorkerOutcome, ask_head, await_leave, poll_url

HOST = "127.0.5.21"


def test_server_tells_workers_to_leave_and_counts_acks() -> None:
    server = ShutdownServer(HOST, 0)
    server.start()
    try:
        url1, url2 = poll_url(HOST, server.port, 1), poll_url(HOST, server.port, 2)
        assert ask_head(url1) is False and ask_head(url2) is False
        server.request_leave()
        assert ask_head(url1) is True
        assert server.wait_acks(0.2) == {2}
        assert ask_head(url2) is True
        assert server.wait_acks(0.2) == set()
    finally:
        server.close()
    assert ask_head(url1, timeout=1) is None


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s


@pytest.mark.parametrize(
    "answers,alive,outcome,elapsed",
    [
        ([False, False, True], True, WorkerOutcome.LEAVE, 2.0),
        ([False] + [None] * 100, True, WorkerOutcome.HEAD_LOST, 10.0),
        ([False, None, False] + [None] * 100, True, WorkerOutcome.HEAD_LOST, 12.0),
        ([False, False], False, WorkerOutcome.NODE_DIED, 0.0),
    ],
)
def test_worker_loop(answers: list[bool | None], alive: bool, outcome: WorkerOutcome, elapsed: float) -> None:
    clock, it = Clock(), iter(answers)
    got = await_leave("u", node_alive=lambda: alive, lost_timeout=10, interval=1, clock=clock, sleep=clock.sleep, ask=lambda _: next(it))
    assert got is outcome and clock.now == elapsed
