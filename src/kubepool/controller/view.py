"""The operator's read side: kopf's indexes (pools, nodes; live views kopf keeps current) and the operator's own
of jobs (jobwatch), pods and placeholders (podwatch), read as parsed models, with the status this process last
wrote winning over the watch's, so a decision never reads a status older than its own write. Nothing here calls
the API; everything is rebuilt from the watches after a restart."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from kubepool import naming, objectmeta
from kubepool.api import ComputePool, JobPhase, MLJob, MLJobStatus
from kubepool.controller import vocabulary
from kubepool.controller.admission import Claim
from kubepool.controller.builders.common import Placement, laid_out
from kubepool.controller.observed import NodeView, PlaceholderView, PodView

log = logging.getLogger(__name__)
JobKey = tuple[str, str]  # (namespace, name)

# The indexes by name: kopf's (handler ids in `handlers`: kopf passes each to every handler under this name),
# and the operator's own: the jobs', kept by jobwatch, the pods', kept by podwatch.
JOB_INDEX = "mljob_index"
POD_INDEX = "pod_index"
PLACEHOLDER_INDEX = "placeholder_index"
POOL_INDEX = "pool_index"
NODE_INDEX = "node_index"
WORKLOAD_INDEX = "workload_index"  # only where the operator acts for Kueue (OperatorConfig.kueue): kueuehandlers


def job_key(body: Mapping[str, Any]) -> JobKey:
    return objectmeta.namespace(body), objectmeta.name(body)


def owning_job(body: Mapping[str, Any]) -> JobKey | None:
    """The job an object the operator made for it (pod, Service, Workload, ...) belongs to, by its job label."""
    job = (objectmeta.meta(body).get("labels") or {}).get(naming.LABEL_JOB)
    return (objectmeta.namespace(body), job) if job else None


def indexed_job(body: Mapping[str, Any]) -> dict[str, Any]:
    """What the job index keeps of an MLJob event: the body itself (kopf never mutates an event's body), less its
    managedFields (more than half of a finished job's body, read by nothing here) and the results its instances
    kept (up to 160 KiB each, read only by the SDK), so a finished job costs the operator no more memory than a
    running one."""
    meta = body.get("metadata") or {}
    notes = meta.get("annotations")
    prefix = naming.RESULT_ANNOTATION_PREFIX + "/"
    kept = {k: v for k, v in meta.items() if k != "managedFields"}
    if notes and any(k.startswith(prefix) for k in notes):
        kept["annotations"] = {k: v for k, v in notes.items() if not k.startswith(prefix)}
    return {**body, "metadata": kept}


_FINISHED_PHASES = frozenset(str(p) for p in JobPhase if p.finished)
INDEXES = (POOL_INDEX, NODE_INDEX)  # kopf's; the job and pod indexes are the operator's own (jobwatch, podwatch)
OPTIONAL_INDEXES = (WORKLOAD_INDEX,)  # registered with their handlers only when configured


def _values(index: Any, key: Any) -> list[Any]:
    found = index.get(key)
    return list(found) if found else []


@dataclass
class ClusterView:
    """The cluster as this process watched it. `written` is the status writer's map (job uid → the status this
    process last wrote or is about to), read here, never written."""

    written: Mapping[str, MLJobStatus]
    # The status writer's `settle`: called for a job whose watched status is final and no older than `written`'s.
    settled: Callable[[str], None] = lambda _: None
    indexes: Mapping[str, Any] = field(default_factory=dict)  # INDEXES → kopf's (captured at startup); jobwatch's, podwatch's
    # Parsed models by resourceVersion: every decision reads every job and pool, and pydantic validation of
    # the whole index per decision made bursts quadratic. Models handed out are never mutated.
    parsed_jobs: dict[JobKey, tuple[str, MLJob]] = field(default_factory=dict)
    parsed_pools: dict[str, tuple[str, ComputePool]] = field(default_factory=dict)
    claim_cache: dict[JobKey, tuple[MLJob, MLJobStatus | None, Claim]] = field(default_factory=dict)
    # Jobs seen finished, by uid (a finished phase is final): a claim is never built for them again. By uid: a job
    # created under a finished one's name (a delete seen late, after a watch gap) is a new claim.
    finished: set[str] = field(default_factory=set)
    # Tracking (`track_open_jobs`, as the operator runs): every open job's claim is kept, by key and by pool, and
    # re-read only for the keys reported changed since (`stale`: by the job handlers and the status writer), so a
    # decision or a pool pass costs O(the claims on its pools) instead of a look at every unfinished job. Where
    # kopf's handlers file the jobs (its stream not taken over: jobwatch), a key whose index handler ran but not
    # yet its event handler (`indexing`) is re-read on every call.
    tracking: bool = False
    kept: dict[JobKey, Claim] = field(default_factory=dict)
    kept_by_pool: dict[str, dict[JobKey, Claim]] = field(default_factory=dict)
    stale: set[JobKey] = field(default_factory=set)
    indexing: set[JobKey] = field(default_factory=set)
    # What the event handlers last acted on: a job's (uid, generation, deleting), a node as the pools read it.
    seen_jobs: dict[JobKey, tuple[str, Any, bool]] = field(default_factory=dict)
    # A pool's (uid, generation) as its event handler last acted on it (poolwatch).
    seen_pools: dict[str, tuple[str, Any]] = field(default_factory=dict)
    # The generation this process' own last write to a job's spec made, by uid (Kueue's suspend and resume): a
    # watched job older than that is not decided on (`behind`).
    spec_written: dict[str, int] = field(default_factory=dict)
    node_views: dict[str, NodeView] = field(default_factory=dict)
    # The pools as last read, kept while the pool index is unchanged: every job pass, pool pass and node event
    # reads them all, O(pools) each. None: not tracked (read every time). The handlers count the index's changes
    # (`pool_changed`) when a pool is indexed and again once kopf has stored or dropped it, so a read in between
    # keeps the old content only until the second count.
    pool_version: int | None = None
    pools_read: tuple[int, dict[str, ComputePool]] | None = None

    def forget(self, key: JobKey, uid: str) -> None:
        """Job `uid` was deleted. What is kept by name goes too, unless a newer job of that name is already
        watched (a deletion seen after the re-create: a watch gap resynced, `kopf_fence.relist_deletions`)."""
        self.finished.discard(uid)
        self.spec_written.pop(uid, None)
        if self.superseded(key, uid):
            return
        self.stale.discard(key)
        self.indexing.discard(key)
        self._keep(key, None)
        self.seen_jobs.pop(key, None)
        self.parsed_jobs.pop(key, None)
        self.claim_cache.pop(key, None)

    def track_open_jobs(self) -> None:
        """From now on claims() keeps what it read, starting with every job the index holds."""
        self.tracking = True
        self.stale = set(self._index(JOB_INDEX))

    def job_indexed(self, key: JobKey) -> None:
        """kopf's index handler is filing a body of the job (where kopf's stream is not taken over): claims() reads
        it again on every call until the job's event handler ran."""
        if self.tracking:
            self.indexing.add(key)

    def job_event(self, key: JobKey) -> None:
        """An event of the job was filed (jobwatch): its claim is read again once;
        a job the index holds finished, or none, has no claim and is not looked at again."""
        if not self.tracking:
            return
        self.indexing.discard(key)
        body = _newest(_values(self._index(JOB_INDEX), key))
        phase = ((body or {}).get("status") or {}).get("phase")
        if body is None or (phase is not None and phase in _FINISHED_PHASES):
            self.stale.discard(key)
            self._keep(key, None)
        else:
            self.stale.add(key)

    def status_changed(self, key: JobKey) -> None:
        """The status writer changed what `written` holds for the job: its claim is read again."""
        if self.tracking:
            self.stale.add(key)

    def behind(self, job: MLJob) -> bool:
        """Whether the watch has not yet shown this process' own last write to the job's spec."""
        return (objectmeta.generation(job) or 0) < self.spec_written.get(objectmeta.uid(job), 0)

    def superseded(self, key: JobKey, uid: str) -> bool:
        """Whether a job named `key` other than `uid` is watched."""
        return any((b.get("metadata") or {}).get("uid") != uid for b in _values(self._index(JOB_INDEX), key))

    def _index(self, name: str) -> Any:
        return self.indexes.get(name, {})

    def job(self, key: JobKey) -> tuple[MLJob, dict[str, Any]] | None:
        """The job as watched, with the status this process last wrote (if newer than the watch's)."""
        body = _newest(_values(self._index(JOB_INDEX), key))
        if body is None:
            return None
        job = self._parsed_job(key, body)
        if job is None:
            return None
        mine = self.written.get(objectmeta.uid(job))
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
        uid = objectmeta.uid(job)
        mine = self.written.get(uid)
        caught_up = mine is None or mine == job.status
        if caught_up and job.status is not None and job.status.phase is not None and job.status.phase.finished:
            # A finished job as the watch shows it, final: its body is all the operator keeps of it (its rare later
            # passes, the TTL's and its pods' going, parse it again), so thousands of finished jobs kept in the
            # cluster cost their bodies alone.
            self.settled(uid)
            self.parsed_jobs.pop(key, None)
            return job
        if mine is not None and caught_up:
            # The watch caught up with this process' write: the model keeps that status object, so a live job's
            # status (most of what it costs in memory) is held once, not twice, and job() needs no copy.
            job = job.model_copy(update={"status": mine})
        if rv:
            self.parsed_jobs[key] = (rv, job)
        return job

    def phase_counts(self) -> dict[str, int]:
        """How many jobs are in each phase (the status this process last wrote, else the watch's), read without
        parsing a model: the job gauges read it every second."""
        counts: dict[str, int] = {}
        index = self._index(JOB_INDEX)
        for key in list(index):
            body = _newest(_values(index, key))
            if body is None:
                continue
            mine = self.written.get(objectmeta.uid(body))
            phase = mine.phase if mine is not None else (body.get("status") or {}).get("phase")
            if phase:
                counts[str(phase)] = counts.get(str(phase), 0) + 1
        return counts

    def pods(self, key: JobKey, uid: str | None = None) -> list[PodView]:
        """The job's pods; with uid None, also those of an earlier job of the same name."""
        return [p for p in _values(self._index(POD_INDEX), key) if uid is None or p.job_uid == uid]

    def workloads(self, key: JobKey, uid: str) -> list[dict[str, Any]]:
        """Kueue Workloads owned by job `uid` (none unless the operator acts for Kueue)."""
        return [w for w in _values(self._index(WORKLOAD_INDEX), key)
                if any(o.get("uid") == uid for o in (w.get("metadata") or {}).get("ownerReferences") or [])]

    def track_pool_changes(self) -> None:
        """From now on the handlers report every change of the pool index: pools() may keep what it read."""
        self.pool_version = 0

    def pool_changed(self) -> None:
        if self.pool_version is not None:
            self.pool_version += 1

    def pools(self) -> dict[str, ComputePool]:
        """Every pool by name (shared between readers: never mutated)."""
        version, read = self.pool_version, self.pools_read
        if version is not None and read is not None and read[0] == version:
            return read[1]
        out = {}
        index = self._index(POOL_INDEX)
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
        if version is not None:
            self.pools_read = (version, out)
        return out

    def nodes(self) -> list[NodeView]:
        index = self._index(NODE_INDEX)
        return [n for name in list(index) for n in _values(index, name)]

    def placeholders(self, pool: str | None = None) -> list[PlaceholderView]:
        """Placeholder pods of one pool (None: of every pool), as watched."""
        index = self._index(PLACEHOLDER_INDEX)
        keys = [pool] if pool is not None else list(index)
        return [p for k in keys for p in _values(index, k)]

    def claims(self, pools: Iterable[str] | None = None) -> list[Claim]:
        """Every unfinished job's claim on its pools (with `pools`, only the claims on any of them); a suspended
        (or cancelled) job has none: it holds no capacity and waits for none."""
        index = self._index(JOB_INDEX)
        if not self.tracking:
            names = None if pools is None else set(pools)
            return [c for key in list(index) if (c := self._claim(index, key)) is not None
                    and (names is None or not names.isdisjoint(c.pools))]
        for key in self.stale | self.indexing:
            self._keep(key, self._claim(index, key))
        self.stale.clear()
        if pools is None:
            return list(self.kept.values())
        found: dict[JobKey, Claim] = {}
        for name in pools:
            found.update(self.kept_by_pool.get(name, {}))
        return list(found.values())

    def _claim(self, index: Any, key: JobKey) -> Claim | None:
        body = _newest(_values(index, key))
        if body is None or objectmeta.uid(body) in self.finished:
            return None
        parsed = self._parsed_job(key, body)
        if parsed is None:
            return None
        uid = objectmeta.uid(parsed)
        mine = self.written.get(uid)
        st = mine if mine is not None else parsed.status
        if st is not None and st.phase is not None and st.phase.finished:
            self.finished.add(uid)
            self.claim_cache.pop(key, None)
            return None
        if parsed.spec.suspend or parsed.spec.cancel or (st is not None and st.reason == vocabulary.SUSPENDED):
            return None
        # A claim depends only on the parsed job and its status: reuse it while both are the same objects
        # (no copy of the model per job per decision, as job() makes).
        hit = self.claim_cache.get(key)
        if hit is None or hit[0] is not parsed or hit[1] is not st:
            job = parsed if st is parsed.status else parsed.model_copy(update={"status": st})
            hit = (parsed, st, claim_of(job, *key))
            self.claim_cache[key] = hit
        return hit[2]

    def _keep(self, key: JobKey, claim: Claim | None) -> None:
        old = self.kept.pop(key, None)
        if old is not None:
            for name in old.pools:
                on = self.kept_by_pool.get(name)
                if on is not None:
                    on.pop(key, None)
                    if not on:
                        del self.kept_by_pool[name]
        if claim is not None:
            self.kept[key] = claim
            for name in claim.pools:
                self.kept_by_pool.setdefault(name, {})[key] = claim


def _newest(bodies: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Of the bodies watched under one job's name, the latest job's: there are two only between a re-create and
    the deletion of the earlier job being seen (after a watch gap, a re-list shows the new job first)."""
    if len(bodies) <= 1:
        return bodies[0] if bodies else None
    return max(bodies, key=lambda b: (str((b.get("metadata") or {}).get("creationTimestamp", "")),
                                      int((b.get("metadata") or {}).get("resourceVersion") or 0)))


def claim_of(job: MLJob, namespace: str, name: str, layout: Sequence[Placement] | None = None) -> Claim:
    st = job.status or MLJobStatus()
    # Its place in the queue: its creation, or when it was last resumed (RFC 3339, as creationTimestamp, so
    # that the two sort together as text).
    since = st.queued_at.strftime("%Y-%m-%dT%H:%M:%SZ") if st.queued_at else str(job.metadata.get("creationTimestamp", ""))
    return Claim(
        namespace=namespace, name=name, created=since,
        pools=tuple(p.pool for p in laid_out(job, layout)), min_instances=job.spec.resolved_min(),
        granted=len(st.instances) if st.admitted_at is not None else 0,
    )
