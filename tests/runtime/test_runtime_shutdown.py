"""The head -> worker handshake: a real server on loopback, and the worker loop on a fake clock."""

from __future__ import annotations

import socket
import threading
import urllib.error
import urllib.request

import pytest

from kubepool.runtime.shutdown import (
    HeadWatch,
    ShutdownServer,
    WorkerOutcome,
    ask_head,
    await_leave,
    poll_url,
)

HOST = "127.0.5.21"


TOKEN = "the-jobs-ray-token"


def test_server_tells_workers_to_leave_and_counts_acks() -> None:
    server = ShutdownServer(HOST, 0, TOKEN)
    server.start()
    try:
        url1, url2 = poll_url(HOST, server.port, 1), poll_url(HOST, server.port, 2)
        assert ask_head(url1, TOKEN) is False and ask_head(url2, TOKEN) is False
        server.request_leave()
        assert ask_head(url1, TOKEN) is True
        assert server.wait_acks(0.2) == {2}
        assert ask_head(url2, TOKEN) is True
        assert server.wait_acks(0.2) == set()
    finally:
        server.close()
    assert ask_head(url1, TOKEN, timeout=1) is None


def test_a_head_that_goes_while_it_answers_is_unreachable() -> None:
    """The head's process ends mid-answer (a worker's run saw `IncompleteRead` and crashed instead of counting
    the head lost): its answer cut short, or not HTTP at all, is no answer."""
    for reply in (b"HTTP/1.0 200 OK\r\nContent-Length: 16\r\n\r\n", b"garbage\r\n\r\n"):
        with socket.create_server((HOST, 0)) as listener:
            port = listener.getsockname()[1]

            def answer(reply: bytes = reply) -> None:
                conn, _ = listener.accept()
                with conn:
                    conn.recv(65536)
                    conn.sendall(reply)

            server = threading.Thread(target=answer)
            server.start()
            assert ask_head(poll_url(HOST, port, 1), TOKEN, timeout=5) is None
            server.join()


def _status(url: str, headers: dict[str, str]) -> int:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=5) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


@pytest.mark.parametrize("headers,code", [
    ({}, 401),
    ({"Authorization": "Bearer not-the-token"}, 403),
    ({"Authorization": f"Bearer {TOKEN}x"}, 403),
    ({"Authorization": TOKEN}, 401),  # not a bearer credential
])
def test_a_poll_without_the_jobs_token_is_refused_and_counts_for_nothing(headers: dict[str, str], code: int) -> None:
    """A stranger can neither pose as a worker (the head would wait for its acknowledgement) nor acknowledge
    for a real one (the head would stop Ray under it)."""
    server = ShutdownServer(HOST, 0, TOKEN)
    server.start()
    try:
        url = poll_url(HOST, server.port, 7)
        assert _status(url, headers) == code
        server.request_leave()
        assert _status(url, headers) == code
        assert server.seen == set() and server.acked == set()
        assert ask_head(url, "not-the-token") is None  # a worker given the wrong token never hears "leave"
        assert _status(url, {"Authorization": f"Bearer {TOKEN}"}) == 200 and server.acked == {7}
    finally:
        server.close()


def test_without_ray_auth_the_endpoint_is_as_open_as_ray() -> None:
    server = ShutdownServer(HOST, 0, None)
    server.start()
    try:
        assert ask_head(poll_url(HOST, server.port, 1)) is False and server.seen == {1}
    finally:
        server.close()


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
    watch = HeadWatch("u", 10, clock=clock, ask=lambda _: next(it))
    assert await_leave(watch, node_alive=lambda: alive, interval=1, sleep=clock.sleep) is outcome
    assert clock.now == elapsed


def test_joining_counts_a_lost_head_only_after_it_answered() -> None:
    clock = Clock()
    answers = iter([None] * 100 + [False] + [None] * 100)
    watch = HeadWatch("u", 10, clock=clock, ask=lambda _: next(answers))
    for _ in range(100):  # the head's pod is not there yet: keep waiting (the instances timeout bounds it)
        assert watch.check() is None
        clock.sleep(1)
    assert watch.check() is None  # first answer
    while watch.check() is None:
        clock.sleep(1)
    assert watch.outcome is WorkerOutcome.HEAD_LOST and clock.now == 110
