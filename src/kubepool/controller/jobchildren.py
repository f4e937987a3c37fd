"""A job's children made to match its plan: the shared children (runtime account, the Secret of its contract
and token, Service, network policy), the instance pods or the RayCluster, the EndpointSlice, pods let go or
deleted, and the job itself past its TTL. `memos.ChildMemo` holds what this process already wrote, so an unchanged pass
writes nothing."""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Awaitable, Sequence
from typing import TYPE_CHECKING, Any

from kubepool import contract, naming, objectmeta
from kubepool.api import ComputePool, MLJob, MLJobStatus
from kubepool.controller.builders import (
    JobRef,
    build_headless_service,
    build_job_contract,
    build_job_secret,
    build_namespace_runtime_rbac,
    build_network_policy,
    build_runtime_rbac,
    contract_patch,
)
from kubepool.controller.builders.common import Placement, local_port_shift
from kubepool.controller.builders.raycluster import raycluster_name
from kubepool.controller.config import RuntimeAccountPolicy
from kubepool.controller.observed import PodView
from kubepool.controller.plan import FOREIGN, OWNED, Plan, existing_child, slice_to_write
from kubepool.controller.view import JobKey, owning_job
from kubepool.kube.errors import Foreign, Going

if TYPE_CHECKING:
    from kubepool.controller.state import OperatorState

log = logging.getLogger(__name__)
EXPECT_POD_SECONDS = 30.0  # a created pod not yet in the watch is not created again for this long
WRITE_CONCURRENCY = 8  # independent child writes of one job in flight at once


async def apply_plan(op: OperatorState, key: JobKey, job: MLJob, st: MLJobStatus, plan: Plan,
                     pools: dict[str, ComputePool], layout: Sequence[Placement] | None = None) -> None:
    memo = op.children
    if plan.ensure_children:
        await _ensure_children(op, job, st, pools, layout)
    uid = objectmeta.uid(job)
    # Pods created by an earlier pass but not yet in the watch would be planned again (a 409 per pod): remember
    # them until the watch shows them, or EXPECT_POD_SECONDS passed (a create that never landed is retried).
    expected = memo.created_pods.setdefault(uid, {})
    now = time.monotonic()
    todo = [p for p in plan.create_pods if expected.get(p["metadata"]["name"], 0.0) <= now]
    if todo and not op.leading():  # the lease ran out during the pass: the new leader creates them
        return
    # Pods that go are deleted before any is created: a retry's new pods start only once the failed attempt's
    # are being deleted, so no instance ever has two live pods.
    for name in plan.delete_pods:
        await op.api.delete_pod(key[0], name, op.cfg.pod_termination_grace_seconds)
    try:
        await _all([op.api.create_if_absent(p) for p in todo])
    except Exception:
        memo.runtime_accounts.pop(key[0], None)  # e.g. its ServiceAccount was deleted: written again next pass
        raise
    for p in todo:
        expected[p["metadata"]["name"]] = now + EXPECT_POD_SECONDS
    if (endpoint_slice := slice_to_write(plan, memo.endpoint_slices.get(uid))) is not None:
        await op.api.apply(endpoint_slice)
        memo.endpoint_slices[uid] = endpoint_slice
    if plan.apply_raycluster is not None and memo.rayclusters.get(uid) != plan.apply_raycluster:
        await op.api.apply(plan.apply_raycluster)  # replicas follow the granted instances (scale_cluster)
        memo.rayclusters[uid] = plan.apply_raycluster
    if plan.delete_raycluster:
        await op.api.delete_raycluster(key[0], raycluster_name(key[1]))
        memo.rayclusters.pop(uid, None)
    await release_pods(op, key, plan.release_pods)
    if plan.delete_job:
        log.info("MLJob %s/%s: ttlSecondsAfterFinished passed; deleting it", *key)
        await op.api.delete_job(key[0], key[1], objectmeta.uid(job))


async def release_pods(op: OperatorState, key: JobKey, pods: list[PodView]) -> None:
    """Let KubeRay's deleted pods go: their outcome was seen."""
    for p in pods:
        await op.api.remove_pod_finalizer(key[0], p.name, p.finalizers, naming.POD_FINALIZER)


async def _ensure_children(op: OperatorState, job: MLJob, st: MLJobStatus, pools: dict[str, ComputePool],
                           layout: Sequence[Placement] | None) -> None:
    ref = JobRef.of(job)
    await _ensure_runtime_account(op, ref.namespace)
    generation = objectmeta.generation(job) or 0
    if (st.attempt, generation) in op.children.ready.get(ref.uid, ()):
        return
    # Independent writes, sent together; the pods come after them (their ServiceAccount and Secret must exist).
    # Objects that never change are created, not applied (a create costs the API server less than a server-side
    # apply); the contract follows attempts and resizes: the Secret that holds it is created once, then patched.
    writes: list[Awaitable[Any]] = []
    if op.cfg.runtime_account is RuntimeAccountPolicy.PER_JOB:
        writes.append(_apply_rbac(op, build_runtime_rbac(ref)))
    shift = local_port_shift(ref.uid, op.cfg.ray_port_stride)
    doc = build_job_contract(job, pools, attempt=st.attempt, port_shift=shift, admitted_at=st.admitted_at,
                             store=op.cfg.results_location, layout=layout)
    token = secrets.token_urlsafe(32) if job.spec.ray.auth_mode == "token" else None
    written = ref.uid in op.children.ready  # this process created or found the Secret for an earlier pass
    deletions = op.children.deletions.get(ref.uid, 0)
    writes += [_write_job_secret(op, ref, doc, token, written), _create_owned(op, ref, build_headless_service(ref)),
               _create_owned(op, ref, build_network_policy(ref))]
    await _all(writes)
    if op.children.deletions.get(ref.uid, 0) != deletions:  # a child went during the writes: the next pass checks
        return
    op.children.ready.setdefault(ref.uid, set()).add((st.attempt, generation))


async def _write_job_secret(op: OperatorState, ref: JobRef, doc: contract.JobContract, token: str | None,
                            written: bool) -> None:
    """The job's Secret with this contract: one create for a job's first pass; a patch of the contract's key
    (the token stays as created) once it exists. The patch writes only into a Secret the job owns; one that is
    gone or not the job's goes through the create's checks (`_create_owned`) again."""
    if written and await op.api.patch_owned(_secret_ref(ref), contract_patch(ref, doc)):
        return
    if not await _create_owned(op, ref, build_job_secret(ref, doc, token)):
        if not await op.api.patch_owned(_secret_ref(ref), contract_patch(ref, doc)):  # gone or replaced since
            raise Going(f"Secret {ref.namespace}/{naming.job_secret_name(ref.name)} changed while MLJob {ref.name} "
                        "wrote its contract; writing it again", 409)


def _secret_ref(ref: JobRef) -> tuple[str, str, str, str]:
    return "v1", "Secret", ref.namespace, naming.job_secret_name(ref.name)


async def _create_owned(op: OperatorState, ref: JobRef, obj: dict[str, Any]) -> bool:
    """Create a child, if absent (True when this call created it); an object already there must be the job's own. One of an
    earlier job of the same name (deleted and created again within a second: the garbage collector has not
    removed its children yet) is waited for: the pass fails and is retried until it is gone, then creates the
    job's own (the Service and NetworkPolicy watches also wake the job when it goes). One that no MLJob owns is
    refused: the job's status names it."""
    if await op.api.create_if_absent(obj):
        return True
    meta = obj["metadata"]
    what = f"{obj['kind']} {meta['namespace']}/{meta['name']}"
    found = await op.api.metadata_of(obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"])
    verdict = existing_child(found, ref)
    if verdict == OWNED:
        return False
    if verdict == FOREIGN:
        raise Foreign(f"{what} exists and is not MLJob {ref.name}'s (uid {ref.uid}); delete or rename it", 409)
    if found is None and await op.api.create_if_absent(obj):  # gone between the create and the read
        return True
    owners = [o.get("uid") for o in (found or {}).get("ownerReferences") or []]
    raise Going(f"{what} still belongs to an earlier MLJob {ref.name} (owner uid {', '.join(owners) or '?'}, this "
                   f"job's {ref.uid}); waiting for the garbage collector to remove it", 409)


def child_seen(op: OperatorState, event_type: str | None, body: dict[str, Any]) -> None:
    """One event of the Service and NetworkPolicy streams (type None: listed), taken over from kopf
    (`kopf_fence.take_over`; kopf's `handlers.child_event` where it cannot be): only a deletion of a job's own
    asks for anything. Must not raise: the stream is kopf's."""
    try:
        labels = objectmeta.meta(body).get("labels") or {}
        if event_type != "DELETED" or labels.get(naming.LABEL_MANAGED_BY) != naming.MANAGED_BY:
            return
        key, uid = owning_job(body), labels.get(naming.LABEL_JOB_UID)
        if key is not None and uid:
            child_deleted(op, key, uid)
    except Exception:
        log.exception("%s event not handled: %s", body.get("kind"), objectmeta.meta(body).get("name"))


def child_deleted(op: OperatorState, key: JobKey, uid: str) -> None:
    """A Service or NetworkPolicy of a job (uid: the job it belonged to) was deleted: the job's next pass writes
    its shared children again, and runs now (a child of an earlier job of the same name going is what a new
    job may be waiting for)."""
    op.children.ready.pop(uid, None)
    op.children.deletions[uid] = op.children.deletions.get(uid, 0) + 1
    op.queue.spawn(key)


async def _ensure_runtime_account(op: OperatorState, namespace: str) -> None:
    """The namespace's shared runtime account (RuntimeAccountPolicy.PER_NAMESPACE), applied once per process:
    concurrent first jobs of a namespace wait on the same write; a failed write is tried again by the next."""
    if op.cfg.runtime_account is not RuntimeAccountPolicy.PER_NAMESPACE:
        return
    accounts = op.children.runtime_accounts
    pending = accounts.get(namespace)
    if pending is None:
        pending = asyncio.ensure_future(_apply_rbac(op, build_namespace_runtime_rbac(namespace)))
        accounts[namespace] = pending
    try:
        await asyncio.shield(pending)
    except Exception:
        if accounts.get(namespace) is pending:
            del accounts[namespace]
        raise


async def _apply_rbac(op: OperatorState, objs: list[dict[str, Any]]) -> None:
    """The ServiceAccount and Role together, then the RoleBinding: the API server checks a binding against its
    Role's rules (the operator holds them, it has no `bind` right), so a binding sent before its Role exists is
    refused and the whole pass would wait out a backoff."""
    await _all([op.api.apply(o) for o in objs if o["kind"] != "RoleBinding"])
    await _all([op.api.apply(o) for o in objs if o["kind"] == "RoleBinding"])


async def _all(writes: list[Awaitable[Any]]) -> None:
    """Await independent API writes concurrently (at most WRITE_CONCURRENCY at once per call); every one runs
    to its end before the first error, if any, is raised."""
    slots = asyncio.Semaphore(WRITE_CONCURRENCY)

    async def bounded(write: Awaitable[Any]) -> Any:
        async with slots:
            return await write

    for result in await asyncio.gather(*(bounded(w) for w in writes), return_exceptions=True):
        if isinstance(result, BaseException):
            raise result
