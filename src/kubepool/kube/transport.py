"""The operator's HTTP client: one aiohttp session to the API server, with the credentials the operator's kopf
side logs in with (`controller.main.login`), so its watches and its writes authenticate alike. aiohttp, not
lightkube's httpx client: the same requests cost about a third of the CPU (bench/NOTES.md, tenth session), and
the operator's writes are a large part of its CPU in a burst of jobs."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import aiohttp

# A request (connect, send, answer) that takes longer than this fails as a transport error and is retried by
# the work queue: as lightkube's client did (10 s for each phase), on a slow API server a little later.
REQUEST_TIMEOUT_SECONDS = 30.0
CONNECT_TIMEOUT_SECONDS = 10.0
# Connections kept open: as many as the requests the operator lets into flight (kube.aio.MAX_IN_FLIGHT and
# MAX_URGENT_IN_FLIGHT).
POOL_SIZE = 12
TRANSPORT_ERRORS = (aiohttp.ClientError, asyncio.TimeoutError, OSError)


@dataclass(frozen=True)
class Endpoint:
    """Where the API server is and how to authenticate: `ssl` (a context with the CA and any client
    certificate, or False for plain HTTP) and the headers every request carries (Authorization)."""

    server: str
    ssl: ssl.SSLContext | bool = True
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass
class Response:
    """What kube.aio reads of an answer (the names of httpx's response, which it was written against)."""

    status_code: int
    content: bytes
    headers: Mapping[str, str]

    @property
    def text(self) -> str:
        return self.content.decode(errors="replace")


class AiohttpHttp:
    """`request(method, path, ...)` relative to the API server, authenticated. The session is made on the first
    request (inside the running loop); a 401 asks `connect` for the credentials again (a service account token the
    kubelet rotated) and retries the request once with them."""

    def __init__(self, connect: Callable[[], Endpoint]) -> None:
        self._connect = connect
        self._session: aiohttp.ClientSession | None = None
        self._endpoint: Endpoint | None = None

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None:
            ep = self._endpoint = self._endpoint or self._connect()
            self._session = aiohttp.ClientSession(
                ep.server.rstrip("/") + "/", connector=aiohttp.TCPConnector(limit=POOL_SIZE, ssl=ep.ssl),
                headers=dict(ep.headers), skip_auto_headers=("User-Agent",),
                timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_SECONDS, sock_connect=CONNECT_TIMEOUT_SECONDS))
        return self._session

    async def request(self, method: str, url: str, *, content: bytes | None = None,
                      params: Mapping[str, str] | None = None, headers: Mapping[str, str] | None = None) -> Response:
        for attempt in (0, 1):
            session = self._open()
            # The session's base URL ends in "/": a path joins it without its leading one (aiohttp's rule).
            async with session.request(method, url.lstrip("/"), data=content, params=params, headers=headers) as r:
                body = await r.read()
                if r.status == 401 and attempt == 0 and await self._relogin(session):
                    continue
                return Response(r.status, body, r.headers)
        raise AssertionError("unreachable")

    async def _relogin(self, session: aiohttp.ClientSession) -> bool:
        """New credentials after a 401; False when they are the same (the 401 stands)."""
        if session is not self._session:  # another request already logged in again
            return True
        old = self._endpoint
        new = self._connect()
        if old is not None and dict(new.headers) == dict(old.headers):
            return False
        self._session, self._endpoint = None, None
        await session.close()
        self._endpoint = new
        return True

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

