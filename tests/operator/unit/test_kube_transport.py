"""The operator's HTTP client (kubepool.kube.transport) as the operator builds it (`controller.main.new_api`:
kopf's login from KUBECONFIG), against a local HTTP server standing in for the API server: each call's method,
path, query, body and credentials; a rotated token picked up on a 401; an unreachable server and missing
credentials reported as such."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import kopf
import pytest
import yaml
from aiohttp import web

from kubepool import naming
from kubepool.controller.main import new_api
from kubepool.kube.aio import Api
from kubepool.kube.errors import NotFound, Unreachable
from support.standin_server import serve

Seen = list[tuple[str, str, dict[str, str], Any, str]]


def _kubeconfig(path: Path, url: str, token: str) -> None:
    path.write_text(yaml.safe_dump({
        "clusters": [{"name": "c", "cluster": {"server": url}}],
        "users": [{"name": "u", "user": {"token": token}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u", "namespace": "ns"}}],
        "current-context": "x",
    }))


def _api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, url: str) -> Api:
    """The operator's client as it starts: kopf's login from a KUBECONFIG with the token t0ken."""
    _kubeconfig(tmp_path / "kc", url, "t0ken")
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "kc"))
    return new_api(kopf.OperatorSettings())


@pytest.fixture
async def server() -> AsyncIterator[tuple[str, Seen, set[str]]]:
    """The base URL, what the server received (method, path, query, body, Authorization) and the tokens it
    accepts (others get 401)."""
    seen: Seen = []
    tokens = {"t0ken"}

    async def handle(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        auth = request.headers.get("Authorization", "")
        seen.append((request.method, request.path, dict(request.query), json.loads(body) if body else None, auth))
        if auth.removeprefix("Bearer ") not in tokens:
            return web.json_response({"kind": "Status", "code": 401, "message": "Unauthorized"}, status=401)
        if "/missing" in request.path:
            return web.json_response({"kind": "Status", "code": 404, "message": "not there", "reason": "NotFound"},
                                     status=404)
        return web.json_response({"kind": "Whatever", "metadata": {"name": "x", "labels": {"a": "b"}}})

    async with serve(handle) as url:
        yield url, seen, tokens


async def test_writes_and_reads_carry_the_login(server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url, seen, _ = server
    api = _api(tmp_path, monkeypatch, url)
    try:
        await api.patch_job_status("ns", "train", {"phase": "PENDING"})
        assert await api.labels_of("v1", "Secret", "ns", "creds") == {"a": "b"}
        assert await api.labels_of("v1", "Secret", "ns", "missing") is None
        with pytest.raises(NotFound, match="not there"):
            await api.patch_pool_status("missing", {"used": 1})
        await api.delete_job("ns", "missing")  # already gone counts as deleted
    finally:
        await api.close()
    job = f"/apis/{naming.API_VERSION}/namespaces/ns/{naming.MLJOB_PLURAL}"
    assert seen[0] == ("PATCH", f"{job}/train/status", {"fieldManager": naming.FIELD_MANAGER},
                       {"status": {"phase": "PENDING"}}, "Bearer t0ken")
    assert seen[1][:2] == ("GET", "/api/v1/namespaces/ns/secrets/creds")
    assert seen[3][:2] == ("PATCH", f"/apis/{naming.API_VERSION}/{naming.POOL_PLURAL}/missing/status")
    assert seen[4][0] == "DELETE" and seen[4][3]["propagationPolicy"] == "Background"


async def test_a_401_logs_in_again_once(server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A service account token rotated under a running operator: the first 401 re-reads the credentials and the
    request goes through with the new ones; a 401 with unchanged credentials stands."""
    url, seen, tokens = server
    api = _api(tmp_path, monkeypatch, url)
    try:
        await api.patch_job_status("ns", "a", {"phase": "PENDING"})
        tokens.clear()
        tokens.add("rotated")
        _kubeconfig(tmp_path / "kc", url, "rotated")
        await api.patch_job_status("ns", "b", {"phase": "PENDING"})
        assert [s[4] for s in seen] == ["Bearer t0ken", "Bearer t0ken", "Bearer rotated"]
        tokens.clear()
        with pytest.raises(Exception, match="Unauthorized"):
            await api.patch_job_status("ns", "c", {"phase": "PENDING"})
        assert [s[4] for s in seen[3:]] == ["Bearer rotated"]  # same credentials: not sent twice
    finally:
        await api.close()


async def test_unreachable_and_no_credentials(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    api = _api(tmp_path, monkeypatch, "http://127.0.0.1:9")  # the discard port: connection refused
    try:
        with pytest.raises(Unreachable, match="cannot reach the Kubernetes API"):
            await api.patch_job_status("ns", "a", {"phase": "PENDING"})
    finally:
        await api.close()
    monkeypatch.setenv("KUBECONFIG", "")
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.kube/config either
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    api = new_api(kopf.OperatorSettings())
    try:
        with pytest.raises(Unreachable, match="no credentials"):
            await api.patch_job_status("ns", "a", {"phase": "PENDING"})
    finally:
        await api.close()
