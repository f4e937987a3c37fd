"""The lightkube fence (kubepool.kube.lightkube_fence) with lightkube's real client against a local HTTP server
standing in for the API server: the SDK's bounded watch decodes the server's events with lightkube's own watch
driver."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from lightkube import Client
from lightkube.config.kubeconfig import KubeConfig

from kubepool import naming
from kubepool.kube.sync import Kube
from support.factories import job
from support.operator import wire
from support.standin_server import serve

JOB = {**wire(job()), "apiVersion": naming.API_VERSION, "kind": naming.MLJOB_KIND}


def kubeconfig(url: str) -> KubeConfig:
    """A kubeconfig for the stand-in server, with a bearer token (lightkube's authentication goes through)."""
    return KubeConfig.from_dict({
        "clusters": [{"name": "c", "cluster": {"server": url}}],
        "users": [{"name": "u", "user": {"token": "t0ken"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u", "namespace": "ns"}}],
        "current-context": "x",
    })


@pytest.fixture
async def server() -> AsyncIterator[tuple[str, list[tuple[str, str, dict[str, str], Any]]]]:
    """The base URL and what the server received: (method, path, query, body)."""
    seen: list[tuple[str, str, dict[str, str], Any]] = []

    async def handle(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        assert request.headers.get("Authorization") == "Bearer t0ken"
        seen.append((request.method, request.path, dict(request.query), json.loads(body) if body else None))
        if request.query.get("watch") == "true":
            resp = web.StreamResponse()
            await resp.prepare(request)
            for kind in ("ADDED", "MODIFIED"):
                await resp.write(json.dumps({"type": kind, "object": JOB}).encode() + b"\n")
            await resp.write_eof()
            return resp
        return web.json_response({})

    async with serve(handle) as url:
        yield url, seen


async def test_the_sdks_bounded_watch_decodes_with_lightkubes_watch_driver(server: Any) -> None:
    url, seen = server
    kube = Kube(namespace="ns", client=Client(config=kubeconfig(url)))
    events = await asyncio.to_thread(lambda: list(kube.watch_job("train", "5", 7)))
    assert [(kind, j.metadata["name"]) for kind, j in events] == [("ADDED", "train"), ("MODIFIED", "train")]
    [(method, path, query, _)] = seen
    assert (method, path) == ("GET", f"/apis/{naming.API_VERSION}/namespaces/ns/{naming.MLJOB_PLURAL}")
    assert query == {"watch": "true", "fieldSelector": "metadata.name=train", "resourceVersion": "5",
                     "timeoutSeconds": "7"}
