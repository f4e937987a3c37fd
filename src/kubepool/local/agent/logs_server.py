"""The kubelet's HTTPS API on `<node ip>:10250`, as far as `kubectl logs` needs it:
`GET /containerLogs/{ns}/{pod}/{container}?follow=&previous=&tailLines=&limitBytes=&timestamps=&sinceSeconds=&sinceTime=`. The apiserver
connects with its kubelet client certificate (verified against the cluster CA); the serving certificate is
issued from the cluster CA for the node IP. Like a kubelet's authorization, a verified cert is not enough: only
the apiserver's kubelet-client identity (`pki.CLIENTS`) is served, any other client of the CA gets 403."""

from __future__ import annotations

import asyncio
import bisect
import datetime
import logging
import ssl
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Middleware

from kubepool.local.agent import runner
from kubepool.local.agent.config import KUBELET_PORT, Layout
from kubepool.local.agent.runner import Run

# (namespace, pod, container, previous) → the run whose log to serve, None if there is no such container run.
Locate = Callable[[str, str, str, bool], Run | None]
FOLLOW_POLL_S = 0.2
BIND_RETRY_S = 5.0
log = logging.getLogger(__name__)
CHUNK = 64 * 1024


def tail_offset(path: Path, lines: int) -> int:
    """Byte offset where the last `lines` lines of the file start."""
    if lines <= 0:
        return path.stat().st_size
    starts: deque[int] = deque(maxlen=lines)
    offset = 0
    with open(path, "rb") as f:
        for line in f:
            starts.append(offset)
            offset += len(line)
    return starts[0] if starts else 0


class LineTimes:
    """A run's log index (`log.idx`, written by the sandbox): when the line starting at each offset was read."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offsets: list[int] = []
        self.times: list[int] = []
        self._read = 0

    def refresh(self) -> None:
        if not self.path.exists():
            return  # a run started before the index existed: no times
        with open(self.path, "rb") as f:
            f.seek(self._read)
            data = f.read()
        complete = data[: data.rfind(b"\n") + 1]
        self._read += len(complete)
        for line in complete.splitlines():
            offset, ns = line.split()
            self.offsets.append(int(offset))
            self.times.append(int(ns))

    def at(self, offset: int) -> int | None:
        i = bisect.bisect_right(self.offsets, offset) - 1
        return self.times[i] if i >= 0 else None


def rfc3339_nano(ns: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ns // 10**9)) + f".{ns % 10**9:09d}Z"


def since_ns(query: Mapping[str, str]) -> int | None:
    """The `sinceSeconds`/`sinceTime` cutoff as unix ns."""
    if "sinceSeconds" in query:
        return time.time_ns() - int(query["sinceSeconds"]) * 10**9
    if "sinceTime" in query:
        return int(datetime.datetime.fromisoformat(query["sinceTime"]).timestamp() * 10**9)
    return None


def render(block: bytes, offset: int, times: LineTimes, timestamps: bool, cutoff: int | None) -> bytes:
    """The lines of `block` (starting at log `offset`) newer than `cutoff`, prefixed with their time."""
    out = []
    for line in block.splitlines(keepends=True):
        ns = times.at(offset)
        offset += len(line)
        if cutoff is not None and ns is not None and ns < cutoff:
            continue
        out.append(f"{rfc3339_nano(ns)} ".encode() + line if timestamps and ns is not None else line)
    return b"".join(out)


def ensure_serving_cert(layout: Layout, ip: str, node: str) -> tuple[Path, Path]:
    from kubepool.local.pki import issue_cert

    cert, key = layout.root / "kubelet.crt", layout.root / "kubelet.key"
    if not (cert.exists() and key.exists()):
        cert_pem, key_pem = issue_cert(layout.ca_cert, layout.ca_key, cn=f"system:node:{node}", orgs=("system:nodes",),
                                       dns=(node,), ips=(ip,), server=True)  # fmt: skip
        layout.root.mkdir(parents=True, exist_ok=True)
        cert.write_bytes(cert_pem if isinstance(cert_pem, bytes) else cert_pem.encode())
        key.write_bytes(key_pem if isinstance(key_pem, bytes) else key_pem.encode())
        key.chmod(0o600)
    return cert, key


def ssl_context(cert: Path, key: Path, ca: Path) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(ca))
    ctx.load_cert_chain(str(cert), str(key))
    ctx.verify_mode = ssl.CERT_REQUIRED  # authentication; `authorizer` then admits the apiserver alone
    return ctx


Identity = tuple[str, tuple[str, ...]]  # (CN, O...) of a client cert


def peer_identity(peercert: Mapping[str, Any] | None) -> Identity | None:
    """(CN, organizations) of a verified peer cert as `SSLSocket.getpeercert()` gives it; None without one."""
    if not peercert:
        return None
    attrs = [attr for rdn in peercert.get("subject", ()) for attr in rdn]
    cns = [v for k, v in attrs if k == "commonName"]
    return (cns[0] if len(cns) == 1 else "", tuple(sorted(v for k, v in attrs if k == "organizationName")))


def authorizer(allowed: Identity) -> Middleware:
    """Middleware: only the client whose cert names exactly `allowed` gets past it."""
    want = (allowed[0], tuple(sorted(allowed[1])))

    @web.middleware
    async def check(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
        who = peer_identity(request.transport.get_extra_info("peercert") if request.transport else None)
        if who is None:
            raise web.HTTPUnauthorized(text="a client certificate is required")
        if who != want:
            raise web.HTTPForbidden(text=f"{who[0]} may not read this node's logs")
        return await handler(request)

    return check


def _flag(request: web.Request, name: str) -> bool:
    return request.query.get(name, "").lower() in ("1", "true")


def make_app(locate: Locate, allowed: Identity) -> web.Application:
    async def container_logs(request: web.Request) -> web.StreamResponse:
        ns, pod, container = (
            request.match_info["ns"],
            request.match_info["pod"],
            request.match_info["container"],
        )
        previous = _flag(request, "previous")
        run = locate(ns, pod, container, previous)
        if run is None:
            what = "previous terminated container" if previous else "container"
            raise web.HTTPBadRequest(text=f'{what} "{container}" in pod "{pod}" is not available')
        path = run.dir / runner.LOG
        tail = request.query.get("tailLines")
        limit = int(request.query["limitBytes"]) if "limitBytes" in request.query else None
        offset = tail_offset(path, int(tail)) if tail is not None else 0
        timestamps, cutoff = _flag(request, "timestamps"), since_ns(request.query)
        times = LineTimes(run.dir / runner.LOG_INDEX)
        response = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await response.prepare(request)
        follow = _flag(request, "follow")
        sent, pending, pos = 0, b"", offset
        with open(path, "rb") as f:
            f.seek(offset)
            while limit is None or sent < limit:
                chunk = f.read(CHUNK)
                if not chunk and follow and run.alive():
                    await asyncio.sleep(FOLLOW_POLL_S)
                    continue
                if not chunk and follow:
                    chunk = f.read(CHUNK)  # written between the read and the liveness check
                if chunk and not (timestamps or cutoff is not None):
                    out = chunk
                else:
                    # Whole lines only, each with its time; a final line without newline goes out at the end.
                    pending += chunk
                    end = len(pending) if not chunk else pending.rfind(b"\n") + 1
                    times.refresh()
                    out = render(pending[:end], pos, times, timestamps, cutoff)
                    pos, pending = pos + end, pending[end:]
                if limit is not None:
                    out = out[: limit - sent]
                await response.write(out)
                sent += len(out)
                if not chunk:
                    break
        await response.write_eof()
        return response

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application(middlewares=[authorizer(allowed)])
    app.router.add_get("/containerLogs/{ns}/{pod}/{container}", container_logs)
    app.router.add_get("/healthz", healthz)
    return app


async def serve(locate: Locate, ip: str, ctx: ssl.SSLContext, allowed: Identity,
                port: int = KUBELET_PORT) -> web.AppRunner:
    """Start serving; while the address is taken (a stale agent of the same node), keep trying: the node
    and its pods work meanwhile, only `kubectl logs` does not."""
    app_runner = web.AppRunner(make_app(locate, allowed), access_log=None)
    await app_runner.setup()
    while True:
        try:
            await web.TCPSite(app_runner, ip, port, ssl_context=ctx).start()
            return app_runner
        except OSError as e:
            log.warning("kubelet API on %s:%d: %s; retrying", ip, port, e.strerror)
            await asyncio.sleep(BIND_RETRY_S)
