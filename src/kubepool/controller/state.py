"""The operator's in-memory view of the cluster: kopf indexes (jobs, pods, pools, nodes) plus the last
status this process wrote for each job, so a decision never reads a status older than its own write.
Nothing here calls the API; everything is rebuilt from the watches after a restart."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import kopf
from pydantic import ValidationError

from kubepool.api import ComputePool, MLJob, MLJobStatus
from kubepool.controller.admission import Claim
from kubepool.controller.builders.common import placement_of
from kubepool.controller.config import OperatorConfig
from kubepool.controller.observed import NodeView, PlaceholderView, PodView
from kubepool.kube.aio import Api

log = logging.getLogger(__name__)
JobKey = tuple[str, str]  # (namespace, name)


def _values(index: Any, key: Any) -> list[Any]:
    try:
        return list(index[key]) if key in index else []
    except KeyError:  # the key vanished between the check and the read
        return []


@dataclass
class OperatorState:
    """One per operator process, kept in kopf's memo."""

    cfg: OperatorConfig
    api: Api
    indexes: Mapping[str, Any] = field(default_factory=dict)  # kopf indexes: live views, refreshed by every handler
    written: dict[str, MLJobStatus] = field(default_factory=dict)  # job uid → last status written (or to flush)
    unflushed: dict[str, bool] = field(default_factory=dict)  # job uid → written[uid] not yet sent; flush due
    # job uid → the (attempt, generation) pairs whose shared children are written (a resize changes the contract)
    children_ready: dict[str, set[tuple[int, int]]] = field(default_factory=dict)
    rayclusters: dict[str, dict[str, Any]] = field(default_factory=dict)  # job uid → RayCluster last applied
    endpoint_slices: dict[str, dict[str, Any]] = field(default_factory=dict)  # job uid → EndpointSlice last applied
    # namespace → the write of its shared runtime account (RuntimeAccountPolicy.PER_NAMESPACE), once per process
    runtime_accounts: dict[str, asyncio.Future[None]] = field(default_factory=dict)
    locks: dict[JobKey, asyncio.Lock] = field(default_factory=dict)
    admission_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    wakeups: dict[JobKey, asyncio.TimerHandle] = field(default_factory=dict)
    pending: set[JobKey] = field(default_factory=set)  # background passes queued but not started
    seen_jobs: dict[JobKey, tuple[str, Any, bool]] = field(default_factory=dict)  # (uid, generation, deleting) handled
    # Parsed models by resourceVersion: every decision reads every job and pool, and pydantic validation of
    # the whole index per decision made bursts quadratic. Models handed out are never mutated.
    parsed_jobs: dict[JobKey, tuple[str, MLJob]] = field(default_factory=dict)
    parsed_pools: dict[str, tuple[str, ComputePool]] = field(default_factory=dict)
    claim_cache: dict[JobKey, tuple[MLJob, MLJobStatus | None, Claim]] = field(default_factory=dict)
    # Jobs seen finished (a finished phase is final): claims() skips them without a look, so a decision costs
    # O(unfinished jobs), not O(all jobs); at 1000 live jobs the full walk per decision was a fifth of the CPU.
    finished: set[JobKey] = field(default_factory=set)
    created_pods: dict[str, dict[str, float]] = field(default_factory=dict)  # job uid → pod → monotonic expiry
    pools_written: dict[str, dict[str, Any]] = field(default_factory=dict)  # pool → last status written
    node_views: dict[str, NodeView] = field(default_factory=dict)  # node name → as last handled by node_event
    pools_due: set[str] = field(default_factory=set)  # pool status refreshes scheduled, not started (coalescing)
    # Warm capacity (controller.pools): where placeholders live, creates not yet in the watch, auto-suspend timers.
    placeholder_namespace: str = "default"
    pools_written_uid: dict[str, str] = field(default_factory=dict)  # pool → uid of pools_written's pool
    placeholders_created: dict[str, float] = field(default_factory=dict)  # pod name → monotonic expiry
    priority_class_ready: bool = False
    suspend_timers: dict[str, asyncio.TimerHandle] = field(default_factory=dict)  # pool → its auto-suspend wake-up
    recheck: asyncio.Task[None] | None = None  # the queue's periodic re-check (reconcile.recheck_queue_forever)
    post_event: Callable[..., None] = field(default=kopf.event)  # kopf's Event poster; tests record instead

    def lock(self, key: JobKey) -> asyncio.Lock:
        return self.locks.setdefault(key, asyncio.Lock())

    def forget(self, key: JobKey, uid: str) -> None:
        self.written.pop(uid, None)
        self.unflushed.pop(uid, None)
        self.children_ready.pop(uid, None)
        self.rayclusters.pop(uid, None)
        self.endpoint_slices.pop(uid, None)
        self.created_pods.pop(uid, None)
        self.locks.pop(key, None)
        self.seen_jobs.pop(key, None)
        self.parsed_jobs.pop(key, None)
        self.claim_cache.pop(key, None)
        self.finished.discard(key)  # a new job of the same name starts unfinished
        handle = self.wakeups.pop(key, None)
        if handle is not None:
            handle.cancel()

    # --- reads ----------------------------------------------------------------------------------------
    def job(self, key: JobKey) -> tuple[MLJob, dict[str, Any]] | None:
        """The job as watched, with the status this process last wrote (if newer than the watch's)."""
        bodies = _values(self.indexes.get("mljob_index", {}), key)
        if not bodies:
            return None
        body = bodies[0]
        job = self._parsed_job(key, body)
        if job is None:
            return None
        mine = self.written.get(job.metadata.get("uid", ""))
        if mine is not None and mine is not job.status:
            job = job.model_copy(update={"status": mine})  # shallow: the cached model stays as watched
        return job, body

    def _parsed_job(self, key: JobKey, body: dict[str, Any]) -> MLJob | None:
        rv = (body.get("metadata") or {}).get("resourceVersion")
        hit = self.parsed_jobs.get(key)
        if rv and hit is not None and hit[0] == rv:
            return hit[1]
        try:
            job = MLJob.model_validate(body)
        except ValidationError as e:
            log.warning("MLJob %s/%s does not parse: %s", *key, e)
            return None
        if rv:
            self.parsed_jobs[key] = (rv, job)
        return job

    def jobs(self) -> Iterator[tuple[JobKey, MLJob]]:
        index = self.indexes.get("mljob_index", {})
        for key in list(index):
            found = self.job(key)
            if found is not None:
                yield key, found[0]

    def pods(self, key: JobKey, uid: str | None = None) -> list[PodView]:
        """The job's pods; with uid None, also those of an earlier job of the same name."""
        return [p for p in _values(self.indexes.get("pod_index", {}), key) if uid is None or p.job_uid == uid]

    def pools(self) -> dict[str, ComputePool]:
        out = {}
        index = self.indexes.get("pool_index", {})
        for name in list(index):
            for body in _values(index, name):
                rv = (body.get("metadata") or {}).get("resourceVersion")
                hit = self.parsed_pools.get(name)
                if rv and hit is not None and hit[0] == rv:
                    out[name] = hit[1]
                    continue
                try:
                    out[name] = ComputePool.model_validate(body)
                except ValidationError as e:
                    log.warning("ComputePool %s does not parse: %s", name, e)
                    continue
                if rv:
                    self.parsed_pools[name] = (rv, out[name])
        for gone in self.parsed_pools.keys() - out.keys():
            del self.parsed_pools[gone]
        return out

    def nodes(self) -> list[NodeView]:
        index = self.indexes.get("node_index", {})
        return [n for name in list(index) for n in _values(index, name)]

    def placeholders(self, pool: str | None = None) -> list[PlaceholderView]:
        """Placeholder pods of one pool (None: of every pool), as watched."""
        index = self.indexes.get("placeholder_index", {})
        keys = [pool] if pool is not None else list(index)
        return [p for k in keys for p in _values(index, k)]

    def claims(self) -> list[Claim]:
        """Every unfinished job's claim on its pools."""
        out = []
        index = self.indexes.get("mljob_index", {})
        for key in list(index):
            if key in self.finished:
                continue
            bodies = _values(index, key)
            parsed = self._parsed_job(key, bodies[0]) if bodies else None
            if parsed is None:
                continue
            mine = self.written.get(parsed.metadata.get("uid", ""))
            st = mine if mine is not None else parsed.status
            if st is not None and st.phase is not None and st.phase.finished:
                self.finished.add(key)
                self.claim_cache.pop(key, None)
                continue
            # A claim depends only on the parsed job and its status: reuse it while both are the same objects
            # (no copy of the model per job per decision, as job() makes).
            hit = self.claim_cache.get(key)
            if hit is None or hit[0] is not parsed or hit[1] is not st:
                job = parsed if st is parsed.status else parsed.model_copy(update={"status": st})
                hit = (parsed, st, claim_of(job, *key))
                self.claim_cache[key] = hit
            out.append(hit[2])
        return out


def claim_of(job: MLJob, namespace: str, name: str) -> Claim:
    st = job.status or MLJobStatus()
    return Claim(
        namespace=namespace, name=name, created=str(job.metadata.get("creationTimestamp", "")),
        pools=tuple(p.pool for p in placement_of(job)), min_instances=job.spec.resolved_min(),
        granted=len(st.instances) if st.admitted_at is not None else 0,
    )
