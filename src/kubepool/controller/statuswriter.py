"""Writing a job's status: the write-behind (changes that are not decisive are sent together a little later)
and the reservation an admission takes under the admission lock before its write. `written` is this
process' view of every job's status, newer than the watch's; ClusterView reads it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

from kubepool import objectmeta
from kubepool.api import JobPhase, MLJob, MLJobStatus
from kubepool.controller.jobstatus import decisive, ends, status_changed
from kubepool.controller.view import JobKey
from kubepool.kube.api import KubeApi

STATUS_FLUSH_SECONDS = 1.0  # a job's status changes that are not decisive are written this late
# ... or this late while its instances start (admitted, not yet RUNNING): a start quicker than this is written
# once, with RUNNING; a slower one shows its progress.
STARTUP_FLUSH_SECONDS = 10.0
UNCHANGED = object()  # reserve(): the status needs no write


def flush_delay(st: MLJobStatus) -> float:
    """How late a change that is not decisive is written: STARTUP_FLUSH_SECONDS while the job's instances start."""
    starting = st.phase is JobPhase.PENDING and st.admitted_at is not None
    return STARTUP_FLUSH_SECONDS if starting else STATUS_FLUSH_SECONDS


@dataclass
class StatusWriter:
    api: KubeApi
    wake: Callable[[JobKey], None]  # asks for the job's pass: a due flush is written by it
    changed: Callable[[JobKey], None] = lambda _: None  # `written` changed for the job (ClusterView.status_changed)
    written: dict[str, MLJobStatus] = field(default_factory=dict)  # job uid → last status written (or to flush)
    unflushed: dict[str, bool] = field(default_factory=dict)  # job uid → written[uid] not yet sent; flush due

    def forget(self, uid: str) -> None:
        self.written.pop(uid, None)
        self.unflushed.pop(uid, None)

    def settle(self, uid: str) -> None:
        """The watch shows the job's final status as this process wrote it: the watched one stands for it from
        now on (as after a restart), unless a flush of it is still pending."""
        if uid not in self.unflushed:
            self.written.pop(uid, None)

    async def write(self, key: JobKey, job: MLJob, new: MLJobStatus) -> None:
        """Persist `new` as the job's status: at once when a decisive field changed (or a flush is due), else
        `flush_delay` later, this process reading `new` meanwhile."""
        uid = objectmeta.uid(job)
        changed = status_changed(job.status, new)
        unflushed = self.unflushed.get(uid)  # None: all written; False: a flush is scheduled; True: it is due
        if not changed and not unflushed:
            return
        if changed and not unflushed and job.status is not None and decisive(job.status) == decisive(new):
            self.written[uid] = new  # this process' view at once; the API's with the flush
            self.changed(key)
            if unflushed is None:
                self.unflushed[uid] = False
                asyncio.get_running_loop().call_later(flush_delay(new), self._flush_due, key, uid)
            return
        await self.api.patch_job_status(key[0], key[1], new.merge_patch(), uid, urgent=ends(job.status, new))
        self.written[uid] = new
        self.changed(key)
        self.unflushed.pop(uid, None)

    def _flush_due(self, key: JobKey, uid: str) -> None:
        if uid in self.unflushed:
            self.unflushed[uid] = True
            self.wake(key)

    def reserve(self, key: JobKey, job: MLJob, new: MLJobStatus) -> object:
        """Under the admission lock: make `new` the job's status for every later decision (ClusterView.claims
        reads `written`) before it is written, so the write itself happens outside the lock. Admissions in a
        burst then overlap their round trips instead of queueing one PATCH at a time behind the lock. Returns
        what `written` held before (None: nothing), or UNCHANGED."""
        if not status_changed(job.status, new):
            return UNCHANGED
        uid = objectmeta.uid(job)
        before = self.written.get(uid)
        self.written[uid] = new
        self.changed(key)
        return before

    async def write_reserved(self, key: JobKey, job: MLJob, new: MLJobStatus, before: object) -> None:
        """Write a status `reserve` took; if the write fails, give the reservation back. The job's retried pass
        decides again, and wakes the queue once its admission is written (jobs that waited meanwhile also have
        the periodic re-check)."""
        if before is UNCHANGED:
            return
        uid = objectmeta.uid(job)
        try:
            await self.api.patch_job_status(key[0], key[1], new.merge_patch(), uid)
            self.unflushed.pop(uid, None)
        except BaseException:
            if self.written.get(uid) is new:
                if before is None:
                    self.written.pop(uid, None)
                else:
                    self.written[uid] = cast(MLJobStatus, before)
                self.changed(key)
            raise
