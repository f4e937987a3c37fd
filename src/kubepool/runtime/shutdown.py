"""The head -> worker "leave now" handshake.

The head serves one tiny HTTP endpoint on `<pod IP>:naming.SHUTDOWN_PORT`. Workers poll
`GET /poll?instance=N`; the answer is `{"leave": false}` while the payload runs and `{"leave": true}` after
it ends. A poll answered with `leave: true` is the worker's acknowledgement. A worker that loses its head
for `lost_timeout` seconds (while joining or after) concludes the head died without telling it and fails.

With Ray token auth on (the default) every poll carries the job's Ray token (`Authorization: Bearer`); one
without it (401) or with another (403) is refused before it can count as a worker or an acknowledgement.
"""

from __future__ import annotations

import hmac
import http.client
import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from enum import StrEnum
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

BEARER = "Bearer "


def auth_headers(token: str | None) -> dict[str, str]:
    return {"Authorization": BEARER + token} if token else {}


class ShutdownServer:
    """Runs on the head in a daemon thread."""

    def __init__(self, host: str, port: int, token: str | None) -> None:
        self._token = token  # None: the job turned Ray auth off, so this endpoint is as open as Ray itself
        self._lock = threading.Lock()
        self._leave = False
        self.seen: set[int] = set()
        self.acked: set[int] = set()
        self._httpd = ThreadingHTTPServer((host, port), self._handler())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="kubepool-shutdown", daemon=True)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                url = urlparse(self.path)
                if url.path != "/poll":
                    self.send_error(404)
                    return
                refused = server.refusal(self.headers.get("Authorization"))
                if refused:
                    self.send_error(refused)
                    return
                instance = int(parse_qs(url.query).get("instance", ["-1"])[0])
                body = json.dumps({"leave": server.poll(instance)}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:  # polls every second: keep the log clean
                return

        return Handler

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    def start(self) -> None:
        self._thread.start()

    def refusal(self, authorization: str | None) -> int | None:
        """The HTTP status that refuses a request with this Authorization header; None lets it in."""
        if self._token is None:
            return None
        if not authorization or not authorization.startswith(BEARER):
            return 401
        given = authorization[len(BEARER):].encode()
        return None if hmac.compare_digest(given, self._token.encode()) else 403  # constant time

    def poll(self, instance: int) -> bool:
        with self._lock:
            self.seen.add(instance)
            if self._leave:
                self.acked.add(instance)
            return self._leave

    def request_leave(self) -> None:
        with self._lock:
            self._leave = True

    def wait_acks(self, timeout: float) -> set[int]:
        """Wait until every worker that ever polled has acknowledged; returns the ones that did not."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                missing = self.seen - self.acked
            if not missing or time.monotonic() >= deadline:
                return missing
            time.sleep(0.1)

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


class WorkerOutcome(StrEnum):
    LEAVE = "leave"  # the head said so: exit 0
    HEAD_LOST = "head-lost"  # the head vanished without saying so: fail
    NODE_DIED = "node-died"  # this instance's own Ray node stopped: fail


def ask_head(url: str, token: str | None = None, timeout: float = 5.0) -> bool | None:
    """The head's answer, or None when it cannot be reached (or refuses this worker's token). A head that goes
    while it answers (a response cut short, a malformed one) is one that cannot be reached."""
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=auth_headers(token)), timeout=timeout) as resp:
            return bool(json.load(resp)["leave"])
    except (OSError, urllib.error.URLError, http.client.HTTPException, ValueError, KeyError):
        return None


class HeadWatch:
    """What a worker knows of its head: LEAVE once the head says so; HEAD_LOST once the head, having answered
    before, has been unreachable for `lost_timeout` seconds. Before the first answer only the instances
    timeout applies: a head pod may legitimately start minutes after its workers."""

    def __init__(
        self,
        url: str,
        lost_timeout: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        ask: Callable[[str], bool | None] = ask_head,
    ) -> None:
        self.url = url
        self.lost_timeout = lost_timeout
        self.clock = clock
        self.ask = ask
        self.last_contact: float | None = None
        self.outcome: WorkerOutcome | None = None

    def joined(self) -> None:
        """This worker's node is in the head's cluster: the head was alive just now."""
        if self.last_contact is None:
            self.last_contact = self.clock()

    def check(self) -> WorkerOutcome | None:
        answer = self.ask(self.url)
        now = self.clock()
        if answer:
            self.outcome = WorkerOutcome.LEAVE
        elif answer is not None:
            self.last_contact = now
        elif self.last_contact is not None and now - self.last_contact >= self.lost_timeout:
            self.outcome = WorkerOutcome.HEAD_LOST
        return self.outcome


def await_leave(
    watch: HeadWatch,
    *,
    node_alive: Callable[[], bool],
    interval: float = 1.0,
    sleep: Callable[[float], None] = time.sleep,
) -> WorkerOutcome:
    watch.joined()
    while True:
        outcome = watch.check()
        if outcome is not None:
            return outcome
        if not node_alive():
            return WorkerOutcome.NODE_DIED
        sleep(interval)


def poll_url(head: str, port: int, instance_id: int) -> str:
    return f"http://{head}:{port}/poll?instance={instance_id}"
