"""The operator's only door to the Kubernetes API (lightkube AsyncClient): server-side apply under
`naming.FIELD_MANAGER`, create-if-absent, delete, status patches and a CRD presence check. Every client
error leaves this module translated by `kubepool.kube.errors`; nothing here decides anything."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import httpx
from lightkube import ApiError, AsyncClient, codecs
from lightkube.generic_resource import create_global_resource, create_namespaced_resource
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.resources.core_v1 import Pod
from lightkube.types import CascadeType, PatchType

from kubepool import naming
from kubepool.kube.errors import NotFound, translate
from kubepool.kube.resources import ComputePoolResource, MLJobResource

Obj = dict[str, Any]
# Requests in flight at once, all calls together: below httpx's keep-alive pool (20), so a burst reuses its
# connections instead of opening (TLS handshake) and dropping extra ones, and the pool's per-request
# bookkeeping (a readability check of every pooled connection) stays small. Excess calls wait here.
MAX_IN_FLIGHT = 16
# Of those, creates, applies and deletes (a burst of new jobs sends ~8 each) take at most this many, so a status
# write (a job's DONE, an admission) never queues behind a burst's children.
MAX_BULK_IN_FLIGHT = 12
_CLIENT_ERRORS = (ApiError, httpx.HTTPError)
# kopf's peering kinds (CRDs shipped by kopf, not by kubepool).
ClusterKopfPeering = create_global_resource("kopf.dev", "v1", "ClusterKopfPeering", "clusterkopfpeerings")
KopfPeering = create_namespaced_resource("kopf.dev", "v1", "KopfPeering", "kopfpeerings")
# KubeRay's cluster kind (backend: kuberay); registered so `apply` can encode it.
RayClusterResource = create_namespaced_resource("ray.io", "v1", "RayCluster", "rayclusters")


def _what(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{obj.get('kind')} {meta.get('namespace', '')}/{meta.get('name')}"


class Api:
    """Async calls the operator makes. One instance per operator process (it holds a connection pool)."""

    def __init__(self, client: AsyncClient | None = None) -> None:
        self._client = client or AsyncClient(field_manager=naming.FIELD_MANAGER)
        self._slots = asyncio.Semaphore(MAX_IN_FLIGHT)
        self._bulk = asyncio.Semaphore(MAX_BULK_IN_FLIGHT)

    async def close(self) -> None:
        await self._client.close()

    async def apply(self, obj: Obj) -> None:
        """Server-side apply: the operator owns the fields it sets; taking them back from others is intended."""
        try:
            async with self._bulk, self._slots:
                await self._client.apply(codecs.from_dict(obj), field_manager=naming.FIELD_MANAGER, force=True)
        except _CLIENT_ERRORS as e:
            raise translate(e, f"apply {_what(obj)}") from e

    async def create_if_absent(self, obj: Obj) -> bool:
        """Create `obj`; an existing object of the same name counts as success. True when created."""
        try:
            async with self._bulk, self._slots:
                await self._client.create(codecs.from_dict(obj), field_manager=naming.FIELD_MANAGER)
            return True
        except ApiError as e:
            if e.status.code == 409:
                return False
            raise translate(e, f"create {_what(obj)}") from e
        except httpx.HTTPError as e:
            raise translate(e, f"create {_what(obj)}") from e

    async def delete_pod(self, namespace: str, name: str, grace_seconds: int | None = None) -> None:
        """Delete a pod; one already gone counts as success."""
        await self._delete(Pod, name, namespace, grace_seconds)

    async def delete_raycluster(self, namespace: str, name: str) -> None:
        """Delete a RayCluster; KubeRay's pods go with it (owner references)."""
        await self._delete(RayClusterResource, name, namespace, None)

    async def remove_pod_finalizer(self, namespace: str, name: str, finalizers: tuple[str, ...], finalizer: str) -> None:
        """Remove one finalizer from a pod whose finalizers were last seen as `finalizers` (a JSON patch that
        tests the entry first, so a concurrent change fails instead of removing another's finalizer)."""
        if finalizer not in finalizers:
            return
        path = f"/metadata/finalizers/{finalizers.index(finalizer)}"
        patch = [{"op": "test", "path": path, "value": finalizer}, {"op": "remove", "path": path}]
        try:
            async with self._slots:
                await self._client.patch(Pod, name, patch, namespace=namespace, patch_type=PatchType.JSON)
        except _CLIENT_ERRORS as e:
            err = translate(e, f"remove finalizer of Pod {namespace}/{name}")
            if not isinstance(err, NotFound):
                raise err from e

    async def delete_job(self, namespace: str, name: str) -> None:
        """Delete an MLJob; the garbage collector removes its children in the background."""
        await self._delete(MLJobResource, name, namespace, None)

    async def _delete(self, res: Any, name: str, namespace: str, grace: int | None) -> None:
        try:
            async with self._bulk, self._slots:
                await self._client.delete(res, name, namespace=namespace, grace_period=grace,
                                          cascade=CascadeType.BACKGROUND)
        except _CLIENT_ERRORS as e:
            err = translate(e, f"delete {res.__name__} {namespace}/{name}")
            if not isinstance(err, NotFound):
                raise err from e

    async def patch_job_status(self, namespace: str, name: str, status: Obj) -> None:
        """JSON merge patch of an MLJob's status subresource (None values remove fields)."""
        try:
            async with self._slots:
                await self._client.patch(MLJobResource.Status, name, {"status": status}, namespace=namespace,
                                         patch_type=PatchType.MERGE)
        except _CLIENT_ERRORS as e:
            raise translate(e, f"patch status of MLJob {namespace}/{name}") from e

    async def patch_pool_status(self, name: str, status: Obj) -> None:
        try:
            async with self._slots:
                await self._client.patch(ComputePoolResource.Status, name, {"status": status}, patch_type=PatchType.MERGE)
        except _CLIENT_ERRORS as e:
            raise translate(e, f"patch status of ComputePool {name}") from e

    async def crd_exists(self, name: str) -> bool:
        try:
            async with self._slots:
                await self._client.get(CustomResourceDefinition, name)
            return True
        except _CLIENT_ERRORS as e:
            err = translate(e, f"get CRD {name}")
            if isinstance(err, NotFound):
                return False
            raise err from e

    async def ensure_peering(self, name: str, namespaces: tuple[str, ...]) -> bool:
        """Create kopf's peering object(s) named `name` if kopf's peering CRD is installed. False when it is
        not (the operator then runs alone)."""
        targets: list[tuple[Any, str | None]] = (
            [(KopfPeering, ns) for ns in namespaces] if namespaces else [(ClusterKopfPeering, None)])
        for res, ns in targets:
            meta: Obj = {"name": name, **({"namespace": ns} if ns else {})}
            try:
                async with self._slots:
                    await self._client.create(res(metadata=meta))
            except ApiError as e:
                if e.status.code == 409:
                    continue
                if e.status.code == 404:
                    return False
                raise translate(e, f"create {res.__name__} {name}") from e
            except httpx.HTTPError as e:
                raise translate(e, f"create {res.__name__} {name}") from e
        return True
