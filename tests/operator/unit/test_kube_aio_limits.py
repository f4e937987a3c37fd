"""kubepool.kube.aio.Api: requests in flight are bounded and a burst of creates/applies never takes every slot
(a status write goes through while the burst waits); each call's method, URL, content type and body; the
server's answers translated into kubepool's errors. A stand-in HTTP client, no cluster (the cluster tests
exercise the real one)."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any, cast

import aiohttp
import pytest

from kubepool import naming
from kubepool.kube import aio, transport
from kubepool.kube.errors import Conflict, Invalid, NotFound, Unreachable


@dataclass
class Reply:
    status_code: int
    body: dict[str, Any] = field(default_factory=dict)

    @property
    def content(self) -> bytes:
        return json.dumps(self.body).encode()

    @property
    def text(self) -> str:
        return self.content.decode()


class StandInHttp:
    """Records requests; answers with `replies[(method, url)]` (default 200); writes other than status wait for
    `release` when `hold`."""

    def __init__(self, replies: dict[tuple[str, str], Any] | None = None, hold: bool = False) -> None:
        self.replies = replies or {}
        self.release = asyncio.Event()
        if not hold:
            self.release.set()
        self.in_flight = self.most = 0
        self.sent: list[tuple[str, str, dict[str, str], Any, Any]] = []

    async def request(self, method: str, url: str, *, content: bytes | None = None, params: Any = None,
                      headers: Any = None) -> Reply:
        self.sent.append((method, url, dict(params or {}), (headers or {}).get("Content-Type"),
                          json.loads(content) if content else None))
        if not url.endswith("/status"):  # counts the bulk writes; status writes pass at once
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
            try:
                await self.release.wait()
            finally:
                self.in_flight -= 1
        reply = self.replies.get((method, url), Reply(200))
        if isinstance(reply, Exception):
            raise reply
        return cast(Reply, reply)

    async def close(self) -> None:
        pass


def _api(http: StandInHttp) -> aio.Api:
    return aio.Api(http)


def _cm(i: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"c{i}", "namespace": "ns"}}


async def test_a_status_write_passes_a_burst_of_applies() -> None:
    http = StandInHttp(hold=True)
    api = _api(http)
    burst = [asyncio.ensure_future(api.apply(_cm(i))) for i in range(40)]
    await asyncio.sleep(0.01)
    assert http.most == aio.MAX_BULK_IN_FLIGHT < aio.MAX_IN_FLIGHT
    await asyncio.wait_for(api.patch_job_status("ns", "train", {"phase": "DONE"}), 1)
    assert http.sent[-1][1].endswith("/mljobs/train/status")
    http.release.set()
    await asyncio.gather(*burst)
    assert http.most == aio.MAX_BULK_IN_FLIGHT


async def test_a_jobs_last_status_write_passes_every_slot_taken() -> None:
    http = StandInHttp(hold=True)
    api = _api(http)
    reads = [asyncio.ensure_future(api.labels_of("v1", "Secret", "ns", f"s{i}")) for i in range(aio.MAX_IN_FLIGHT + 4)]
    await asyncio.sleep(0.01)
    assert http.in_flight == aio.MAX_IN_FLIGHT
    assert aio.MAX_IN_FLIGHT + aio.MAX_URGENT_IN_FLIGHT <= transport.POOL_SIZE, "every lane on a kept connection"
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(api.patch_job_status("ns", "train", {"phase": "RUNNING"}), 0.2)
    await asyncio.wait_for(api.patch_job_status("ns", "train", {"phase": "DONE"}, "u1", urgent=True), 1)
    assert http.sent[-1][1].endswith("/mljobs/train/status")
    http.release.set()
    await asyncio.gather(*reads)


async def test_requests_on_the_wire() -> None:
    http = StandInHttp()
    api = _api(http)
    slice_ = {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "metadata": {"name": "s", "namespace": "ns"}}
    await api.apply(slice_)
    await api.create_if_absent(_cm(1))
    await api.patch_job_status("ns", "train", {"phase": "RUNNING", "reason": None})
    await api.patch_pool_status("cpu", {"phase": "IDLE"})
    await api.delete_pod("ns", "p", 3)
    await api.remove_pod_finalizer("ns", "p", ("a", "b"), "b")
    manager = {"fieldManager": naming.FIELD_MANAGER}
    assert http.sent == [
        ("PATCH", "/apis/discovery.k8s.io/v1/namespaces/ns/endpointslices/s", {**manager, "force": "true"},
         "application/apply-patch+yaml", slice_),
        ("POST", "/api/v1/namespaces/ns/configmaps", manager, "application/json", _cm(1)),
        ("PATCH", "/apis/kubepool.dev/v1alpha1/namespaces/ns/mljobs/train/status", manager,
         "application/merge-patch+json", {"status": {"phase": "RUNNING", "reason": None}}),
        ("PATCH", "/apis/kubepool.dev/v1alpha1/computepools/cpu/status", manager, "application/merge-patch+json",
         {"status": {"phase": "IDLE"}}),
        ("DELETE", "/api/v1/namespaces/ns/pods/p", {}, "application/json",
         {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background", "gracePeriodSeconds": 3}),
        ("PATCH", "/api/v1/namespaces/ns/pods/p", {}, "application/json-patch+json",
         [{"op": "test", "path": "/metadata/finalizers/1", "value": "b"}, {"op": "remove", "path": "/metadata/finalizers/1"}]),
    ]


async def test_answers_become_kubepool_errors() -> None:
    status = {"kind": "Status", "message": 'pods "p" is invalid: spec.x: Required value', "reason": "Invalid"}
    http = StandInHttp({
        ("POST", "/api/v1/namespaces/ns/configmaps"): Reply(409, {"reason": "AlreadyExists"}),
        ("DELETE", "/api/v1/namespaces/ns/pods/gone"): Reply(404),
        ("PATCH", "/api/v1/namespaces/ns/pods/gone"): Reply(404),
        ("POST", "/api/v1/namespaces/ns/pods"): Reply(422, status),
        ("PATCH", "/apis/kubepool.dev/v1alpha1/namespaces/ns/mljobs/j/status"): Reply(409, {"message": "conflict"}),
        ("DELETE", "/apis/kubepool.dev/v1alpha1/namespaces/ns/mljobs/j"): aiohttp.ClientConnectionError("refused"),
    })
    api = _api(http)
    assert await api.create_if_absent(_cm(1)) is False  # exists: success, not created
    await api.delete_pod("ns", "gone")  # already gone: success
    await api.remove_pod_finalizer("ns", "gone", ("f",), "f")
    with pytest.raises(Invalid, match=r"create Pod ns/p: .*spec.x: Required value"):
        await api.create_if_absent({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns"}})
    with pytest.raises(Conflict):
        await api.patch_job_status("ns", "j", {})
    with pytest.raises(Unreachable, match="cannot reach the Kubernetes API"):
        await api.delete_job("ns", "j")


async def test_a_status_write_names_the_job_by_uid() -> None:
    """With the job's uid, a status write tests it first (a JSON patch): a job deleted and created again under
    its name never gets its predecessor's status; the failed test reads as NotFound, a schema refusal stays."""
    path = "/apis/kubepool.dev/v1alpha1/namespaces/ns/mljobs/train/status"
    http = StandInHttp()
    await _api(http).patch_job_status("ns", "train", {"phase": "RUNNING", "reason": None}, "u1")
    assert http.sent == [("PATCH", path, {"fieldManager": naming.FIELD_MANAGER}, "application/json-patch+json",
                          [{"op": "test", "path": "/metadata/uid", "value": "u1"},
                           {"op": "add", "path": "/status", "value": {"phase": "RUNNING"}}])]
    failed = {"message": "the server rejected our request due to an error in our request", "reason": "Invalid"}
    with pytest.raises(NotFound, match="no longer uid u1"):
        await _api(StandInHttp({("PATCH", path): Reply(422, failed)})).patch_job_status("ns", "train", {}, "u1")
    schema = {"message": 'MLJob.kubepool.dev "train" is invalid: status.phase: Unsupported value', "reason": "Invalid"}
    with pytest.raises(Invalid, match="status.phase"):
        await _api(StandInHttp({("PATCH", path): Reply(422, schema)})).patch_job_status("ns", "train", {}, "u1")


async def test_a_patch_of_an_owned_object_is_false_when_gone_or_not_the_callers() -> None:
    """patch_owned (the job's Secret's contract): a JSON patch; a failed test op (the API server's 422, measured
    on the test cluster for a test of another value and of an absent path) or a 404 is False, nothing written;
    another 422 is the error it is."""
    path = "/api/v1/namespaces/ns/secrets/train-contract"
    target = ("v1", "Secret", "ns", "train-contract")
    patch = [{"op": "test", "path": "/metadata/ownerReferences/0/uid", "value": "u1"},
             {"op": "add", "path": "/data/contract.json", "value": "e30="}]
    http = StandInHttp()
    assert await _api(http).patch_owned(target, patch)
    assert http.sent == [("PATCH", path, {"fieldManager": naming.FIELD_MANAGER}, "application/json-patch+json", patch)]
    failed = {"message": "the server rejected our request due to an error in our request", "reason": "Invalid"}
    assert not await _api(StandInHttp({("PATCH", path): Reply(422, failed)})).patch_owned(target, patch)
    assert not await _api(StandInHttp({("PATCH", path): Reply(404, {"reason": "NotFound"})})).patch_owned(target, patch)
    schema = {"message": 'Secret "train-contract" is invalid: data[contract.json]: Invalid value', "reason": "Invalid"}
    with pytest.raises(Invalid, match="data"):
        await _api(StandInHttp({("PATCH", path): Reply(422, schema)})).patch_owned(target, patch)
