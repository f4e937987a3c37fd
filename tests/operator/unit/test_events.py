"""The operator's Events (controller.events, builders.events): what an Event about a job or a pool holds, and
the poster against a local HTTP server standing in for the API server: posted in the background, one attempt;
dropped quietly when the namespace is gone or being deleted; a warning for any other refusal."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

import pytest
from aiohttp import web

from kubepool import naming
from kubepool.controller.builders.events import MAX_MESSAGE, event
from kubepool.controller.events import EventPoster
from kubepool.kube.aio import Api
from kubepool.kube.transport import AiohttpHttp, Endpoint
from support.standin_server import serve

NOW = datetime(2026, 12, 2, 13, 0, 5, 123456, tzinfo=UTC)
JOB = {"apiVersion": naming.API_VERSION, "kind": naming.MLJOB_KIND,
       "metadata": {"name": "train", "namespace": "team-a", "uid": "u-1", "labels": {"x": "y"}}}
POOL = {"apiVersion": naming.API_VERSION, "kind": naming.POOL_KIND, "metadata": {"name": "gpu", "uid": "u-2"}}


def test_an_event_about_a_job_lives_in_its_namespace_and_points_at_it() -> None:
    e = event(JOB, type="Warning", reason="InstanceFailed", message="FAILED: instance 1", component="kp", now=NOW)
    assert e["metadata"] == {"namespace": "team-a", "generateName": "kubepool-event-"}
    assert e["involvedObject"] == {"apiVersion": naming.API_VERSION, "kind": "MLJob", "name": "train", "uid": "u-1",
                                   "namespace": "team-a"}
    assert (e["type"], e["reason"], e["message"]) == ("Warning", "InstanceFailed", "FAILED: instance 1")
    assert e["source"] == {"component": "kp"} and e["reportingComponent"] == e["reportingInstance"] == "kp"
    assert e["firstTimestamp"] == e["lastTimestamp"] == e["eventTime"] == "2026-12-02T13:00:05.123456+00:00"


def test_an_event_about_a_pool_lives_in_default_and_a_long_message_keeps_both_ends() -> None:
    long = "head " + "x" * 3000 + " tail"
    e = event(POOL, type="Normal", reason="AutoSuspended", message=long, component="kp", now=NOW)
    assert e["metadata"]["namespace"] == e["involvedObject"]["namespace"] == "default"
    assert len(e["message"]) == MAX_MESSAGE
    assert e["message"].startswith("head x") and e["message"].endswith("x tail") and "..." in e["message"]


# The API server's refusal in a namespace being deleted, as a real one answered the operator's Event.
TERMINATING = {"kind": "Status", "code": 403, "reason": "Forbidden", "message": (
    'events "kubepool-event-" is forbidden: unable to create new content in namespace gone because it is being '
    "terminated")}
RBAC = {"kind": "Status", "code": 403, "reason": "Forbidden",
        "message": 'events is forbidden: User "system:serviceaccount:x:y" cannot create resource "events"'}
MISSING = {"kind": "Status", "code": 404, "reason": "NotFound", "message": 'namespaces "missing" not found'}


async def test_the_poster_posts_once_and_drops_what_nobody_reads(caplog: pytest.LogCaptureFixture) -> None:
    seen: list[tuple[str, Any]] = []
    answers = {"gone": (403, TERMINATING), "rbac": (403, RBAC), "missing": (404, MISSING)}

    async def handle(request: web.Request) -> web.StreamResponse:
        body = json.loads(await request.read())
        seen.append((request.path, body))
        code, status = answers.get(body["metadata"]["namespace"], (201, body))
        return web.json_response(status, status=code)

    async with serve(handle) as url:
        api = Api(AiohttpHttp(lambda: Endpoint(url, ssl=False)))
        post = EventPoster(api, "kp", clock=lambda: NOW)
        with caplog.at_level(logging.DEBUG, logger="kubepool.controller.events"):
            for ns in ("team-a", "gone", "rbac", "missing"):
                post({**JOB, "metadata": {**JOB["metadata"], "namespace": ns}}, type="Normal", reason="Started",
                     message="RUNNING: 3/3")
            post(POOL, type="Normal", reason="Resumed", message="")
            await post.drain()
        await api.close()

    # One request each, in its object's namespace (the pool's in default): no retries.
    assert sorted(p for p, _ in seen) == sorted(f"/api/v1/namespaces/{ns}/events"
                                                for ns in ("team-a", "gone", "rbac", "missing", "default"))
    assert {b["reason"] for _, b in seen} == {"Started", "Resumed"}
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "cannot create resource" in warnings[0], warnings  # only the RBAC refusal
    quiet = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
    assert any("being terminated" in m for m in quiet) and any("not found" in m for m in quiet), quiet
