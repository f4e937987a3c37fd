"""A fault-injecting proxy between the operator and the API server: what a loaded or flaky control plane does
to a client, at the HTTP level (a TCP proxy cannot answer 429). The operator's kubeconfig points at it (plain
HTTP on loopback, the operator's own bearer token passed through); it forwards every request to the API server
over TLS and, by a seeded random draw per request:

* answers 429 with Retry-After, 500 or 503 itself (the request never reaches the server);
* resets the connection before answering;
* forwards a write and then answers 500 (the write happened, the client is told it failed);
* delays the request;
* cuts a watch stream after a few seconds (the client must resume it).

`counts` says how many of each it injected, so a test can require that each fault happened."""

from __future__ import annotations

import asyncio
import json
import logging
import random
import ssl
import threading
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

FORCE_AT = 8
# An operator opens only a handful of watches in a run, so a cut forced at the 8th would often never come: every
# watch is cut until one cut has happened.
FORCE_AT_KIND = {"watch-cut": 1}
logging.getLogger("aiohttp.server").setLevel(logging.CRITICAL)  # each injected reset would print a traceback
HOP_HEADERS = {"connection", "keep-alive", "transfer-encoding", "te", "upgrade", "host", "content-length"}


@dataclass
class Odds:
    """Probabilities per request (each drawn independently, in this order)."""

    too_many: float = 0.05
    unavailable: float = 0.03
    server_error: float = 0.03
    reset: float = 0.03
    lost_write_answer: float = 0.04  # a write that happened, answered 500
    delay: float = 0.2
    delay_max_s: float = 0.4
    watch_cut: float = 0.3
    watch_cut_after_s: tuple[float, float] = (1.0, 6.0)


@dataclass
class FaultProxy:
    upstream: str  # https://127.0.0.1:port
    ca_file: Path
    seed: int
    odds: Odds = field(default_factory=Odds)
    counts: Counter[str] = field(default_factory=Counter)
    port: int = 0
    _loop: asyncio.AbstractEventLoop | None = None
    _thread: threading.Thread | None = None
    _runner: web.AppRunner | None = None
    _enabled: bool = True
    _chances: Counter[str] = field(default_factory=Counter)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def pause(self) -> None:
        """Forward everything as it is from now on (the faults stop; the proxy stays)."""
        self._enabled = False

    # --- lifecycle (a thread with its own event loop) ------------------------------------------------------
    def start(self) -> FaultProxy:
        ready = threading.Event()

        def run() -> None:
            self._loop = asyncio.new_event_loop()
            self._loop.run_until_complete(self._serve())
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, daemon=True, name="fault-proxy")
        self._thread.start()
        assert ready.wait(30), "the fault proxy did not start"
        return self

    def stop(self) -> None:
        if self._loop is None:
            return
        fut = asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop)
        fut.result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread:
            self._thread.join(30)

    async def _serve(self) -> None:
        self._rng = random.Random(self.seed)
        ctx = ssl.create_default_context(cafile=str(self.ca_file))
        self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx, limit=0),
                                              timeout=aiohttp.ClientTimeout(total=None, sock_connect=10))
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        # A client that goes away cancels its handler (and the upstream watch it relays), so stopping is quick.
        self._runner = web.AppRunner(app, access_log=None, handler_cancellation=True, shutdown_timeout=2)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def _shutdown(self) -> None:
        await self._session.close()  # ends every relayed stream first
        if self._runner is not None:
            await self._runner.cleanup()

    # --- one request ---------------------------------------------------------------------------------------
    def _draw(self, kind: str, p: float) -> bool:
        """A draw for one fault kind; the FORCE_AT-th chance of a kind not injected yet always hits, so every
        kind happens in a run of a few dozen requests whatever the seed (a watch-cut counts only once the stream
        outlived its deadline, so until then every watch is cut)."""
        if not self._enabled:
            return False
        self._chances[kind] += 1
        forced = self.counts[kind] == 0 and self._chances[kind] >= FORCE_AT_KIND.get(kind, FORCE_AT)
        return self._rng.random() < p or forced

    @staticmethod
    def _status(code: int, reason: str, retry_after: int | None = None) -> web.Response:
        body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": f"fault injection: {reason}",
                "reason": reason, "code": code}
        headers = {"Retry-After": str(retry_after)} if retry_after else {}
        return web.Response(status=code, text=json.dumps(body), content_type="application/json", headers=headers)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        watch = request.query.get("watch") in ("true", "1")
        write = request.method in ("POST", "PUT", "PATCH", "DELETE")
        if not watch:
            if self._draw("429", self.odds.too_many):
                self.counts["429"] += 1
                return self._status(429, "TooManyRequests", retry_after=1)
            if self._draw("503", self.odds.unavailable):
                self.counts["503"] += 1
                return self._status(503, "ServiceUnavailable")
            if self._draw("500", self.odds.server_error):
                self.counts["500"] += 1
                return self._status(500, "InternalError")
            if self._draw("reset", self.odds.reset):
                self.counts["reset"] += 1
                assert request.transport is not None
                request.transport.abort()
                raise ConnectionResetError("fault injection: reset")
        if self._draw("delay", self.odds.delay):
            self.counts["delay"] += 1
            await asyncio.sleep(self._rng.uniform(0.01, self.odds.delay_max_s))
        lose_answer = write and self._draw("lost-write-answer", self.odds.lost_write_answer)
        cut_after = self._rng.uniform(*self.odds.watch_cut_after_s) if watch and self._draw("watch-cut", self.odds.watch_cut) else None
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_HEADERS}
        body = await request.read()
        async with self._session.request(request.method, self.upstream + request.rel_url.raw_path_qs,
                                         headers=headers, data=body or None, allow_redirects=False) as up:
            if lose_answer:
                await up.read()
                self.counts["lost-write-answer"] += 1  # counted once answered: the write did happen
                return self._status(500, "InternalError")
            out = web.StreamResponse(status=up.status, headers={k: v for k, v in up.headers.items()
                                                                if k.lower() not in HOP_HEADERS})
            await out.prepare(request)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + cut_after if cut_after is not None else None
            async for chunk in _chunks(up, deadline):
                await out.write(chunk)
            if deadline is not None and loop.time() >= deadline:
                self.counts["watch-cut"] += 1
                assert request.transport is not None
                request.transport.abort()  # mid-stream: the client sees the stream break, not end
                return out
            await out.write_eof()
            return out


async def _chunks(up: aiohttp.ClientResponse, deadline: float | None) -> Any:
    loop = asyncio.get_running_loop()
    while True:
        timeout = None if deadline is None else max(0.0, deadline - loop.time())
        try:
            chunk = await asyncio.wait_for(up.content.readany(), timeout)
        except TimeoutError:
            return
        if not chunk:
            return
        yield chunk
