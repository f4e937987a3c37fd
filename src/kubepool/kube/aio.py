"""The operator's only door to the Kubernetes API: server-side apply under `naming.FIELD_MANAGER`,
create-if-absent, delete, status patches and a CRD presence check. Every call goes out as plain JSON through
one HTTP client (`kube.transport`, aiohttp with the operator's login), and answers are decoded only where a
caller reads them: a model round trip per request (dict → model → dict → JSON, and back for the reply) was a
tenth of the operator's CPU in a burst. Every client error leaves this module translated by
`kubepool.kube.errors`; nothing here decides anything."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Mapping
from typing import Any, Protocol

import orjson

from kubepool import naming
from kubepool.kube import lanes
from kubepool.kube.errors import NotFound, Unreachable, status_error
from kubepool.kube.transport import TRANSPORT_ERRORS

Obj = dict[str, Any]
# Requests in flight at once, all calls but a job's last status write (MAX_URGENT_IN_FLIGHT below; the two
# together within the HTTP client's keep-alive pool, transport.POOL_SIZE), so a burst
# reuses its connections instead of opening (TLS handshake) and dropping extra ones, and the pool's per-request
# bookkeeping (a readability check of every pooled connection) stays small. Excess calls wait here, the oldest
# job's first (kube.lanes).
MAX_IN_FLIGHT = 8
# Of those, creates, applies and deletes (a burst of new jobs sends ~8 each) take at most this many, so a status
# write (a job's DONE, an admission) never queues behind a burst's children.
MAX_BULK_IN_FLIGHT = 6
# A job's last status write (DONE, FAILED, CANCELLED) has lanes of its own beyond MAX_IN_FLIGHT (their sum still
# within the pool): a wave of admissions queues dozens of status writes, and the end of a job that ran, which its
# user and the jobs queued behind it wait for, would queue behind them.
MAX_URGENT_IN_FLIGHT = 4
# The plural (URL segment) of every kind the operator writes; anything else is a programming error.
PLURALS = {
    "Pod": "pods", "Service": "services", "ConfigMap": "configmaps", "Secret": "secrets",
    "ServiceAccount": "serviceaccounts", "Role": "roles", "RoleBinding": "rolebindings",
    "NetworkPolicy": "networkpolicies", "EndpointSlice": "endpointslices", "RayCluster": "rayclusters",
    "PriorityClass": "priorityclasses", naming.MLJOB_KIND: naming.MLJOB_PLURAL, naming.POOL_KIND: naming.POOL_PLURAL,
    "Lease": "leases", "Event": "events", naming.WORKLOAD_KIND: naming.WORKLOAD_PLURAL, "ResourceFlavor": "resourceflavors",
    "CustomResourceDefinition": "customresourcedefinitions", "PersistentVolumeClaim": "persistentvolumeclaims",
    "KopfPeering": "kopfpeerings", "ClusterKopfPeering": "clusterkopfpeerings",  # kopf's peering CRDs
}  # fmt: skip
LEASE_API = "coordination.k8s.io/v1"
CRD_API = "apiextensions.k8s.io/v1"
PEERING_API = "kopf.dev/v1"
_MERGE = "application/merge-patch+json"
_JSON_PATCH = "application/json-patch+json"
_METADATA = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"  # an object's metadata, nothing else
_APPLY = "application/apply-patch+yaml"  # JSON is YAML
_PATCH_TEST_FAILED = "the server rejected our request due to an error in our request"  # a JSON patch's test op


class Http(Protocol):
    """What Api needs of an HTTP client (`transport.AiohttpHttp`): `request`, relative to the API server's URL,
    authenticated, answering with the status code, the body and the headers."""

    async def request(self, method: str, url: str, *, content: bytes | None = None,
                      params: Mapping[str, str] | None = None, headers: Mapping[str, str] | None = None) -> Any: ...

    async def close(self) -> None: ...


def _what(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{obj.get('kind')} {meta.get('namespace', '')}/{meta.get('name')}"


def collection_path(api_version: str, kind: str, namespace: str | None) -> str:
    """`/api/v1/namespaces/ns/pods`, `/apis/group/version/plural`, ... for objects of `kind`."""
    root = f"/apis/{api_version}" if "/" in api_version else f"/api/{api_version}"
    plural = PLURALS[kind]
    return f"{root}/namespaces/{namespace}/{plural}" if namespace else f"{root}/{plural}"


def object_path(obj: Mapping[str, Any]) -> str:
    meta = obj["metadata"]
    return f"{collection_path(obj['apiVersion'], obj['kind'], meta.get('namespace'))}/{meta['name']}"


def _retry_after(status: Mapping[str, Any], headers: Mapping[str, str]) -> float | None:
    """The wait the API server asked for: the Status' details.retryAfterSeconds, else the Retry-After header."""
    raw = (status.get("details") or {}).get("retryAfterSeconds") or headers.get("Retry-After")
    try:
        return float(raw) if raw is not None else None
    except (TypeError, ValueError):
        return None


def _generation(content: bytes) -> int:
    generation = (json.loads(content).get("metadata") or {}).get("generation")
    return generation if isinstance(generation, int) else 0


def _job_path(namespace: str, name: str) -> str:
    return f"{collection_path(naming.API_VERSION, naming.MLJOB_KIND, namespace)}/{name}"


class Api:
    """Async calls the operator makes. One instance per operator process (it holds a connection pool)."""

    def __init__(self, http: Http) -> None:
        self._http = http
        self._slots = lanes.OrderedSlots(MAX_IN_FLIGHT)
        self._bulk = lanes.OrderedSlots(MAX_BULK_IN_FLIGHT)
        self._urgent = asyncio.Semaphore(MAX_URGENT_IN_FLIGHT)

    async def close(self) -> None:
        await self._http.close()

    async def _send(self, method: str, path: str, what: str, *, body: Any = None, content_type: str = "",
                    params: Mapping[str, str] | None = None, bulk: bool = False, ok: tuple[int, ...] = (),
                    place: int | None = None) -> int:
        """One request; returns the HTTP status when it is 2xx or in `ok`, else raises the KubeError for it."""
        return int((await self._request(method, path, what, body=body, content_type=content_type, params=params,
                                        bulk=bulk, ok=ok, place=place)).status_code)

    async def _request(self, method: str, path: str, what: str, *, body: Any = None, content_type: str = "",
                       params: Mapping[str, str] | None = None, bulk: bool = False, ok: tuple[int, ...] = (),
                       accept: str = "", urgent: bool = False, place: int | None = None) -> Any:
        """One request; returns the response when it is 2xx or in `ok`, else raises the KubeError for it.
        `place`: its place in line for a slot (kube.lanes); by default its pass's job's, or a new one."""
        content = orjson.dumps(body) if body is not None else None
        headers = {"Content-Type": content_type or "application/json"} if content is not None else {}
        if accept:
            headers["Accept"] = accept
        place = lanes.current_place() if place is None else place
        try:
            async with (self._bulk.slot(place) if bulk else contextlib.nullcontext(),
                        self._urgent if urgent else self._slots.slot(place)):
                resp = await self._http.request(method, path, content=content, params=params, headers=headers or None)
        except TRANSPORT_ERRORS as e:
            raise Unreachable(f"{what}: cannot reach the Kubernetes API ({e}); is the cluster up and KUBECONFIG set?") from e
        code = int(resp.status_code)
        if code < 300 or code in ok:
            return resp
        try:
            status = json.loads(resp.content)
        except ValueError:
            status = {}
        raise status_error(code, status.get("message") or resp.text, status.get("reason") or "", what,
                           _retry_after(status, getattr(resp, "headers", None) or {}))

    async def apply(self, obj: Obj) -> None:
        """Server-side apply: the operator owns the fields it sets; taking them back from others is intended."""
        await self._send("PATCH", object_path(obj), f"apply {_what(obj)}", body=obj, content_type=_APPLY,
                         params={"fieldManager": naming.FIELD_MANAGER, "force": "true"}, bulk=True)

    async def create_if_absent(self, obj: Obj) -> bool:
        """Create `obj`; an existing object of the same name counts as success. True when created."""
        meta = obj["metadata"]
        path = collection_path(obj["apiVersion"], obj["kind"], meta.get("namespace"))
        code = await self._send("POST", path, f"create {_what(obj)}", body=obj,
                                params={"fieldManager": naming.FIELD_MANAGER}, bulk=True, ok=(409,))
        return code != 409

    async def post_event(self, event: Obj) -> None:
        """Create an Event (one attempt: the caller decides what a failure means)."""
        await self._send("POST", collection_path("v1", "Event", event["metadata"]["namespace"]),
                         f"post Event {event.get('reason')}", body=event, bulk=True)

    async def delete_pod(self, namespace: str, name: str, grace_seconds: int | None = None) -> None:
        """Delete a pod; one already gone counts as success."""
        await self._delete(f"{collection_path('v1', 'Pod', namespace)}/{name}", f"Pod {namespace}/{name}", grace_seconds)

    async def delete_raycluster(self, namespace: str, name: str) -> None:
        """Delete a RayCluster; KubeRay's pods go with it (owner references)."""
        await self._delete(f"{collection_path('ray.io/v1', 'RayCluster', namespace)}/{name}",
                           f"RayCluster {namespace}/{name}", None)

    async def remove_pod_finalizer(self, namespace: str, name: str, finalizers: tuple[str, ...], finalizer: str) -> None:
        """Remove one finalizer from a pod whose finalizers were last seen as `finalizers` (a JSON patch that
        tests the entry first, so a concurrent change fails instead of removing another's finalizer)."""
        if finalizer not in finalizers:
            return
        path = f"/metadata/finalizers/{finalizers.index(finalizer)}"
        patch = [{"op": "test", "path": path, "value": finalizer}, {"op": "remove", "path": path}]
        try:
            await self._send("PATCH", f"{collection_path('v1', 'Pod', namespace)}/{name}",
                             f"remove finalizer of Pod {namespace}/{name}", body=patch, content_type=_JSON_PATCH)
        except NotFound:
            pass

    async def delete_job(self, namespace: str, name: str, uid: str = "") -> None:
        """Delete an MLJob (with `uid`: only that one; another job of the name, created since, stays); the
        garbage collector removes its children in the background."""
        await self._delete(_job_path(namespace, name), f"MLJob {namespace}/{name}", None, uid)

    async def _delete(self, path: str, what: str, grace: int | None, uid: str = "") -> None:
        options: Obj = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"}
        if grace is not None:
            options["gracePeriodSeconds"] = grace
        if uid:
            options["preconditions"] = {"uid": uid}  # 409 when another object has the name now: it stays
        await self._send("DELETE", path, f"delete {what}", body=options, bulk=True, ok=(404, 409) if uid else (404,))

    async def patch_job_status(self, namespace: str, name: str, status: Obj, uid: str = "", urgent: bool = False) -> None:
        """Write an MLJob's status subresource: `status` as a JSON merge patch (None values remove fields); with
        `uid`, only if the job of that name is still that one (a JSON patch that tests metadata.uid, then sets
        the whole status to `status` less its None values): a job deleted and created again under its name never
        gets its predecessor's status (a merge patch's metadata.uid is ignored on the status subresource). Raises
        NotFound when the job is gone or another one has its name. `urgent`: in the lanes of MAX_URGENT_IN_FLIGHT."""
        what = f"patch status of MLJob {namespace}/{name}"
        params = {"fieldManager": naming.FIELD_MANAGER}
        path = f"{_job_path(namespace, name)}/status"
        if not uid:
            await self._request("PATCH", path, what, body={"status": status}, content_type=_MERGE, params=params,
                                urgent=urgent)
            return
        body = [{"op": "test", "path": "/metadata/uid", "value": uid},
                {"op": "add", "path": "/status", "value": {k: v for k, v in status.items() if v is not None}}]
        resp = await self._request("PATCH", path, what, body=body, content_type=_JSON_PATCH, params=params, ok=(422,),
                                   urgent=urgent)
        if int(resp.status_code) != 422:
            return
        try:
            status = json.loads(resp.content)
        except ValueError:
            status = {}
        message = str(status.get("message") or "")
        if _PATCH_TEST_FAILED in message:  # what the API server says of a failed test op, and nothing more
            raise NotFound(f"{what}: it is no longer uid {uid} (deleted; a new job may have its name)", 404)
        raise status_error(422, message or resp.text, str(status.get("reason") or ""), what)

    async def set_job_suspend(self, namespace: str, name: str, suspend: bool, uid: str) -> int:
        """Set an MLJob's spec.suspend (a queue manager's gate), only if the job of that name is still `uid`; the
        job's generation the write made."""
        body = [{"op": "test", "path": "/metadata/uid", "value": uid}, {"op": "add", "path": "/spec/suspend", "value": suspend}]
        resp = await self._request("PATCH", _job_path(namespace, name), f"set spec.suspend={suspend} of MLJob {namespace}/{name}",
                                   body=body, content_type=_JSON_PATCH, params={"fieldManager": naming.FIELD_MANAGER})
        return _generation(resp.content)

    async def set_job_placement(self, namespace: str, name: str, suspend: bool, uid: str,
                                annotations: dict[str, str | None]) -> int:
        """Set an MLJob's spec.suspend and some of its annotations (None removes one) in one merge patch; its
        metadata.uid makes it fail on another job of that name (a uid cannot change). The job's generation the
        write made."""
        body = {"metadata": {"uid": uid, "annotations": annotations}, "spec": {"suspend": suspend}}
        resp = await self._request("PATCH", _job_path(namespace, name), f"set spec.suspend={suspend} of MLJob {namespace}/{name}",
                                   body=body, content_type=_MERGE, params={"fieldManager": naming.FIELD_MANAGER})
        return _generation(resp.content)

    async def patch_owned(self, target: tuple[str, str, str, str], patch: list[Obj]) -> bool:
        """A JSON patch of one object (api_version, kind, namespace, name) whose first op tests that it is the
        caller's: False when the object is gone or the test failed (it is not, or no longer, the caller's)."""
        api_version, kind, namespace, name = target
        what = f"patch {kind} {namespace}/{name}"
        resp = await self._request("PATCH", f"{collection_path(api_version, kind, namespace)}/{name}", what, body=patch,
                                   content_type=_JSON_PATCH, params={"fieldManager": naming.FIELD_MANAGER},
                                   bulk=True, ok=(404, 422))
        code = int(resp.status_code)
        if code < 300:
            return True
        if code == 404:
            return False
        try:
            status = json.loads(resp.content)
        except ValueError:
            status = {}
        message = str(status.get("message") or "")
        if _PATCH_TEST_FAILED in message:  # a failed test op, or one whose path the object lacks (no owner)
            return False
        raise status_error(422, message or resp.text, str(status.get("reason") or ""), what)

    async def get_object(self, api_version: str, kind: str, namespace: str | None, name: str) -> Obj | None:
        """One object, or None when it does not exist."""
        path = f"{collection_path(api_version, kind, namespace)}/{name}"
        resp = await self._request("GET", path, f"get {kind} {name}", ok=(404,))
        if int(resp.status_code) == 404:
            return None
        obj: Obj = json.loads(resp.content)
        return obj

    async def delete_object(self, api_version: str, kind: str, namespace: str, name: str) -> None:
        """Delete one object (in the background); one already gone counts as success."""
        await self._delete(f"{collection_path(api_version, kind, namespace)}/{name}", f"{kind} {namespace}/{name}", None)

    async def replace_status(self, obj: Obj, status: Obj) -> None:
        """Replace an object's status as of the version `obj` was read at: a write of another controller since
        (Kueue's, on a Workload) fails the test and the caller decides again from what it wrote."""
        meta = obj["metadata"]
        body = [{"op": "test", "path": "/metadata/resourceVersion", "value": meta["resourceVersion"]},
                {"op": "add", "path": "/status", "value": {k: v for k, v in status.items() if v is not None}}]
        await self._send("PATCH", f"{object_path(obj)}/status", f"write status of {_what(obj)}", body=body,
                         content_type=_JSON_PATCH, params={"fieldManager": naming.FIELD_MANAGER})

    async def patch_pool_status(self, name: str, status: Obj) -> None:
        path = f"{collection_path(naming.API_VERSION, naming.POOL_KIND, None)}/{name}/status"
        await self._send("PATCH", path, f"patch status of ComputePool {name}", body={"status": status},
                         content_type=_MERGE, params={"fieldManager": naming.FIELD_MANAGER})

    async def metadata_of(self, api_version: str, kind: str, namespace: str, name: str) -> Obj | None:
        """The metadata of one object (labels, ownerReferences, uid, deletionTimestamp, ...), or None when it does
        not exist. Read as metadata only: a Secret's data never reaches the operator."""
        path = f"{collection_path(api_version, kind, namespace)}/{name}"
        resp = await self._request("GET", path, f"get {kind} {namespace}/{name}", ok=(404,), accept=_METADATA)
        if int(resp.status_code) == 404:
            return None
        meta: Obj = json.loads(resp.content).get("metadata") or {}
        return meta

    async def access_modes_of(self, namespace: str, name: str) -> list[str] | None:
        """A PersistentVolumeClaim's access modes (those of its bound volume, else those it asks for), or None
        when it does not exist."""
        path = f"{collection_path('v1', 'PersistentVolumeClaim', namespace)}/{name}"
        resp = await self._request("GET", path, f"get PersistentVolumeClaim {namespace}/{name}", ok=(404,))
        if int(resp.status_code) == 404:
            return None
        pvc: Obj = json.loads(resp.content)
        modes = (pvc.get("status") or {}).get("accessModes") or (pvc.get("spec") or {}).get("accessModes") or []
        return [str(m) for m in modes]

    async def labels_of(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, str] | None:
        """The labels of one object, or None when it does not exist (metadata only)."""
        meta = await self.metadata_of(api_version, kind, namespace, name)
        if meta is None:
            return None
        return {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}

    async def get_lease(self, namespace: str, name: str) -> Obj | None:
        """A coordination.k8s.io Lease (leader election), or None when it does not exist. Lease calls go first in
        line: a renewal late behind a burst would hand the lead over."""
        path = f"{collection_path(LEASE_API, 'Lease', namespace)}/{name}"
        resp = await self._request("GET", path, f"get Lease {namespace}/{name}", ok=(404,), place=lanes.FIRST)
        if int(resp.status_code) == 404:
            return None
        lease: Obj = json.loads(resp.content)
        return lease

    async def write_lease(self, namespace: str, name: str, spec: Obj, resource_version: str | None) -> None:
        """Create the Lease (resource_version None) or replace it if it is still at `resource_version`: a
        concurrent writer makes this raise Conflict (409), so two replicas never both take it."""
        meta: Obj = {"name": name, "namespace": namespace, "labels": {naming.LABEL_MANAGED_BY: naming.MANAGED_BY}}
        if resource_version is None:
            await self._send("POST", collection_path(LEASE_API, "Lease", namespace), f"create Lease {namespace}/{name}",
                             body={"apiVersion": LEASE_API, "kind": "Lease", "metadata": meta, "spec": spec},
                             place=lanes.FIRST)
            return
        meta["resourceVersion"] = resource_version
        await self._send("PUT", f"{collection_path(LEASE_API, 'Lease', namespace)}/{name}",
                         f"update Lease {namespace}/{name}",
                         body={"apiVersion": LEASE_API, "kind": "Lease", "metadata": meta, "spec": spec},
                         place=lanes.FIRST)

    async def crd_exists(self, name: str) -> bool:
        return await self.metadata_of(CRD_API, "CustomResourceDefinition", "", name) is not None

    async def ensure_peering(self, name: str, namespaces: tuple[str, ...]) -> bool:
        """Create kopf's peering object(s) named `name` if kopf's peering CRD is installed. False when it is
        not (the operator then runs alone)."""
        kind = "KopfPeering" if namespaces else "ClusterKopfPeering"
        for ns in namespaces or (None,):
            meta: Obj = {"name": name, **({"namespace": ns} if ns else {})}
            code = await self._send("POST", collection_path(PEERING_API, kind, ns), f"create {kind} {name}",
                                    body={"apiVersion": PEERING_API, "kind": kind, "metadata": meta}, ok=(404, 409))
            if code == 404:
                return False
        return True
