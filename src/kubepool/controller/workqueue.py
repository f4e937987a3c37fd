"""When passes run: the operator's work queue. Every trigger (an event, a deadline, a queue move, a status
flush, a retry) asks for a job's pass or a pool's status pass here; the queue coalesces bursts, runs the
pass in the background, retries it after API errors and keeps the per-job locks. It knows the passes only
as the callables `bind` gives it (jobreconcile.reconcile_job, poolreconcile.reconcile_pool)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kubepool.controller import admission, metrics
from kubepool.controller.admission import Claim
from kubepool.controller.backoff import retry_delay
from kubepool.controller.observed import FAILED, RUNNING, SUCCEEDED, instance_id_of
from kubepool.controller.view import JobKey
from kubepool.kube import aio, lanes
from kubepool.kube.errors import Going, KubeError

log = logging.getLogger(__name__)
RETRY_SECONDS = 5.0  # a pool's status pass that hit an API error runs again after this (a job's backs off)
POOL_REFRESH_SECONDS = 1.0  # pool status passes are coalesced over this window
EXPORT_DUE = ""  # the job-phase gauges' entry in pools_due (no pool has an empty name)
POD_EVENT_DELAY_SECONDS = 0.1  # a pod event's pass waits this long, so the rest of the job's burst joins it
POD_PROGRESS_DELAY_SECONDS = 1.0  # ... or this long when it can only change what the status shows (pod_event_delay)
QUEUE_RECHECK_SECONDS = 30.0  # waiting jobs re-decide at least this often, whatever wake-up was lost
GOING_RETRY_MAX_SECONDS = 2.0  # a pass waiting for an object on its way out (errors.Going) retries at least this often
# Job passes running at once; the rest wait to start, the oldest job's first (kube.lanes). A pass holds what it
# builds (its decision, its children's bodies) while it waits for an API slot: a burst of admissions started every
# pass at once, and the operator's peak memory was theirs, not the jobs'. So one pass per API slot.
MAX_JOB_PASSES = aio.MAX_IN_FLIGHT


def pod_event_delay(pod: Any) -> float:
    """How long a pod event's pass waits. A pod that ended or is being deleted decides the job's outcome: no
    wait. One that runs, has an address (the job's endpoints) or is the head on a node (its workers are created
    then) changes what the pass does: the burst window. Any other (the echo of its creation, a worker bound,
    its containers being made, unschedulable) changes only what the status shows, which the status writer
    sends STATUS_FLUSH_SECONDS late anyway: the pass waits about as long, and the job's next event that
    matters brings it forward (most of a start-up's pod events are of this kind)."""
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    phase = status.get("phase")
    if phase in (SUCCEEDED, FAILED) or meta.get("deletionTimestamp"):
        return 0.0
    head = instance_id_of(meta.get("labels") or {}, meta.get("annotations")) == 0
    if phase == RUNNING or status.get("podIP") or (head and (pod.get("spec") or {}).get("nodeName")):
        return POD_EVENT_DELAY_SECONDS
    return POD_PROGRESS_DELAY_SECONDS


async def _unbound(_: object) -> None:
    raise RuntimeError("WorkQueue.bind was not called")


def _no_claims(_: Iterable[str] | None) -> list[Claim]:
    return []


@dataclass
class WorkQueue:
    """One per operator process. Passes of one job never overlap (`lock`); admission decisions of all jobs
    are serialised by `admission_lock`; at most MAX_JOB_PASSES job passes run at once (`passes`)."""

    run_job: Callable[[JobKey], Awaitable[None]] = _unbound
    run_pool: Callable[[str], Awaitable[None]] = _unbound
    export: Callable[[], None] = lambda: None  # the job gauges, refreshed with the pools
    claims: Callable[[Iterable[str] | None], list[Claim]] = _no_claims  # ClusterView.claims: those on any of the pools (None: all)
    locks: dict[JobKey, asyncio.Lock] = field(default_factory=dict)
    admission_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    pending: set[JobKey] = field(default_factory=set)  # job passes asked for but not started
    wakeups: dict[JobKey, asyncio.TimerHandle] = field(default_factory=dict)  # a job's next deadline
    pools_due: set[str] = field(default_factory=set)  # pool passes scheduled, not started (coalescing)
    recheck: asyncio.Task[None] | None = None  # recheck_forever, while it runs
    failures: dict[JobKey, int] = field(default_factory=dict)  # a job's passes failed in a row (backoff)
    places: dict[JobKey, int] = field(default_factory=dict)  # a job's place in line for API slots (kube.lanes)
    timers: dict[JobKey, tuple[float, asyncio.TimerHandle]] = field(default_factory=dict)  # a delayed pass: when, its timer
    # Passes asked for while the queue is held (`hold`, until the first listings are in: `release`), by job key
    # or pool name: none starts before then, so none decides on a part of the cluster (a running job with half
    # its pods listed would be failed as having lost the rest).
    held: tuple[set[JobKey], set[str]] | None = None
    passes: lanes.OrderedSlots = field(default_factory=lambda: lanes.OrderedSlots(MAX_JOB_PASSES))
    urgent: set[JobKey] = field(default_factory=set)  # jobs whose asked-for pass takes no pass slot (`spawn`)

    def bind(self, *, run_job: Callable[[JobKey], Awaitable[None]], run_pool: Callable[[str], Awaitable[None]],
             export: Callable[[], None], claims: Callable[[Iterable[str] | None], list[Claim]]) -> None:
        self.run_job, self.run_pool, self.export, self.claims = run_job, run_pool, export, claims

    def hold(self) -> None:
        """From now on until `release`, passes asked for wait."""
        if self.held is None:
            self.held = (set(), set())

    def release(self) -> None:
        """Start every pass asked for while held: jobs in the order they were first seen, then the pools."""
        held, self.held = self.held, None
        if held is None:
            return
        jobs, pools = held
        for key in sorted(jobs, key=lambda k: self.places.get(k, 0)):
            self._start_job(key)
        for name in sorted(pools):
            self._start_pool(name)

    def forget(self, key: JobKey) -> None:
        self.locks.pop(key, None)
        self.urgent.discard(key)
        self.failures.pop(key, None)
        self.places.pop(key, None)
        handle = self.wakeups.pop(key, None)
        if handle is not None:
            handle.cancel()

    def close(self) -> None:
        for handle in [*self.wakeups.values(), *(t[1] for t in self.timers.values())]:
            handle.cancel()
        if self.recheck is not None:
            self.recheck.cancel()

    # --- jobs -------------------------------------------------------------------------------------------------
    def lock(self, key: JobKey) -> asyncio.Lock:
        return self.locks.setdefault(key, asyncio.Lock())

    def started(self, key: JobKey) -> None:
        """A pass of the job began (under its lock): events from here on need a new pass; earlier ones are
        covered by this one."""
        self.pending.discard(key)
        self.urgent.discard(key)

    def idle(self) -> bool:
        """No job pass asked for, and none running."""
        return not self.pending and not any(lock.locked() for lock in self.locks.values())

    def spawn(self, key: JobKey, delay: float = 0.0, urgent: bool = False) -> None:
        """Run a job's pass in the background; retried on errors. A burst of events while one pass is already
        waiting (for `delay`, then for a pass slot and the job's lock) costs one pass, not one per event; a
        request for a sooner pass moves the waiting one forward. An `urgent` pass (a pod ended or is going: the
        job's outcome, which its user and the jobs queued behind it wait for) takes no pass slot: where the
        job's pass already waits for one, an urgent one starts beside it."""
        loop = asyncio.get_running_loop()
        if key in self.pending:
            timer = self.timers.get(key)
            if timer is None:
                if urgent and key not in self.urgent:  # one urgent pass beside the waiting one, however many ask
                    self._start_job(key, urgent=True)
                return
            if timer[0] <= loop.time() + delay:
                return
            timer[1].cancel()
        else:
            self.pending.add(key)
        if key not in self.places:  # first seen: behind every job seen before (creation order, or the listing's)
            self.places[key] = lanes.new_place()
        if delay > 0:
            at = loop.time() + delay
            self.timers[key] = (at, loop.call_at(at, self._start_job, key))
        else:
            self._start_job(key, urgent)

    def _start_job(self, key: JobKey, urgent: bool = False) -> None:
        self.timers.pop(key, None)
        if self.held is not None:
            self.held[0].add(key)
            return
        if urgent:
            self.urgent.add(key)
        asyncio.ensure_future(self._guarded_job(key, urgent))

    async def _guarded_job(self, key: JobKey, urgent: bool = False) -> None:
        place = self.places.get(key)  # None: forgotten (deleted) since it was asked for
        place = lanes.new_place() if place is None else place
        lanes.take_place(place)  # this task's requests wait there
        try:
            async with contextlib.nullcontext() if urgent else self.passes.slot(place):
                await self.run_job(key)
            self.failures.pop(key, None)
            return
        except KubeError as e:
            metrics.API_ERRORS.labels(status=str(e.status)).inc()
            metrics.RECONCILE_ERRORS.labels(kind="job", reason=str(e.status)).inc()
            n = self.failures[key] = self.failures.get(key, 0) + 1
            delay = retry_delay(n, e.retry_after, transient=not e.refused)
            if isinstance(e, Going):  # the garbage collector is about to finish: no long backoff
                delay = min(delay, GOING_RETRY_MAX_SECONDS)
            log.warning("MLJob %s/%s: %s; retry %d in %.1fs", key[0], key[1], e, n, delay)
        except Exception as e:
            metrics.RECONCILE_ERRORS.labels(kind="job", reason=type(e).__name__).inc()
            n = self.failures[key] = self.failures.get(key, 0) + 1
            delay = retry_delay(n)
            log.exception("MLJob %s/%s: reconcile failed; retry %d in %.1fs", key[0], key[1], n, delay)
        finally:
            if urgent:  # also where the pass never began (not leading)
                self.urgent.discard(key)
        asyncio.get_running_loop().call_later(delay, self.spawn, key)

    def wake_at(self, key: JobKey, at: datetime | None) -> None:
        """Run the job's pass when its next deadline passes (timeouts, TTL, worker grace): no polling. Replaces
        the job's earlier wake-up; None: none."""
        old = self.wakeups.pop(key, None)
        if old is not None:
            old.cancel()
        if at is None:
            return
        delay = max((at - datetime.now(UTC).replace(microsecond=0)).total_seconds(), 0.0) + 0.5  # late beats early
        self.wakeups[key] = asyncio.get_running_loop().call_later(delay, self.spawn, key)

    def trigger_waiting(self, pool_names: list[str]) -> None:
        """Capacity or a pool changed: run the jobs waiting on those pools (oldest first), then the pools."""
        for c in admission.waiting_in_order(self.claims(pool_names), pool_names):
            self.spawn((c.namespace, c.name))
        self.refresh_pools(pool_names)

    async def recheck_forever(self) -> None:
        """Safety net against a lost wake-up: every QUEUE_RECHECK_SECONDS the waiting jobs decide again, oldest
        first. Cheap when nothing waits; a waiting job's pass writes nothing when its decision is unchanged."""
        while True:
            await asyncio.sleep(QUEUE_RECHECK_SECONDS)
            try:
                claims = self.claims(None)
                for c in admission.waiting_in_order(claims, {p for claim in claims for p in claim.pools}):
                    self.spawn((c.namespace, c.name))
            except Exception:  # never let the safety net die with one bad read
                log.exception("queue re-check failed")

    # --- pools ------------------------------------------------------------------------------------------------
    def refresh_pools(self, pool_names: Iterable[str]) -> None:
        """Run the pools' status passes (and refresh the job gauges) POOL_REFRESH_SECONDS from now: a pool's
        status is informational, so every trigger in that window costs one pass and at most one write per pool."""
        loop = asyncio.get_running_loop()
        for name in dict.fromkeys(pool_names):
            if name not in self.pools_due:
                self.pools_due.add(name)
                loop.call_later(POOL_REFRESH_SECONDS, self._start_pool, name)
        if EXPORT_DUE not in self.pools_due:
            self.pools_due.add(EXPORT_DUE)
            loop.call_later(POOL_REFRESH_SECONDS, self._start_pool, EXPORT_DUE)

    def _start_pool(self, name: str) -> None:
        if self.held is not None:
            self.held[1].add(name)
            return
        self.pools_due.discard(name)  # triggers from here on schedule the next pass
        if name == EXPORT_DUE:
            self.export()
        else:
            asyncio.ensure_future(self._guarded_pool(name))

    async def _guarded_pool(self, name: str) -> None:
        try:
            await self.run_pool(name)
        except KubeError as e:
            metrics.API_ERRORS.labels(status=str(e.status)).inc()
            metrics.RECONCILE_ERRORS.labels(kind="pool", reason=str(e.status)).inc()
            log.warning("ComputePool %s: %s; retrying in %ss", name, e, RETRY_SECONDS)
            # Its placeholders must not wait for the next unrelated event.
            asyncio.get_running_loop().call_later(RETRY_SECONDS, self.refresh_pools, [name])
