"""Leader election between operator replicas (a coordination.k8s.io Lease; the decisions are `election`'s, the
API calls `kube.aio`'s). A replica waits for the lease before kopf starts (no watch, no handler, no write while it
stands by), then renews it every `retry_seconds`; once it could not renew for `renew_deadline_seconds` it stops
leading at once (`leading()` turns False: no admission, no child write) and the process stops, to be restarted
as a standby. A clean shutdown gives the lease up, so the next replica takes over without waiting it out."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime

from kubepool.controller.election import Timing, claim, record_of, released
from kubepool.kube.api import KubeApi
from kubepool.kube.errors import Conflict, KubeError

log = logging.getLogger(__name__)


class LeadershipLost(Exception):
    """This replica's lease ran out (it could not renew it in time): it must not write anything any more."""


class LeaderElector:
    def __init__(self, namespace: str, name: str, timing: Timing, identity: str = "") -> None:
        self.namespace, self.name, self.timing = namespace, name, timing
        self.identity = identity or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.renewed_at: float | None = None  # monotonic time of the start of the last successful write
        self._record: tuple[str, str, str] | None = None
        self._seen_at = 0.0  # monotonic time this replica first saw _record
        self._waiting_for: str | None = None

    @property
    def lease(self) -> str:
        return f"{self.namespace}/{self.name}"

    def leading(self) -> bool:
        return self.renewed_at is not None and time.monotonic() < self.renewed_at + self.timing.renew_deadline_seconds

    def check(self) -> None:
        """Raise LeadershipLost unless this replica leads now (right before a write only the leader may make)."""
        if not self.leading():
            raise LeadershipLost(f"not the leader (lease {self.lease}): nothing is written")

    async def try_once(self, api: KubeApi) -> bool:
        """Take or renew the lease if this replica may; True when it holds it now."""
        started = time.monotonic()
        lease = await api.get_lease(self.namespace, self.name)
        if lease is not None and record_of(lease) != self._record:
            self._record, self._seen_at = record_of(lease), started
        spec = claim(lease, self.identity, started - self._seen_at, self.timing, datetime.now(UTC))
        if spec is None:
            holder = record_of(lease)[0] if lease is not None else ""
            if holder != self._waiting_for:
                log.info("standing by: lease %s is held by %s", self.lease, holder)
                self._waiting_for = holder
            return False
        try:
            await api.write_lease(self.namespace, self.name, spec,
                                  None if lease is None else str(lease["metadata"]["resourceVersion"]))
        except Conflict:
            return False  # another replica wrote it first
        if not self.leading():
            log.info("became the leader: lease %s held by %s", self.lease, self.identity)
        self.renewed_at = started
        return True

    async def _attempt(self, api: KubeApi) -> bool:
        try:
            return await self.try_once(api)
        except KubeError as e:
            log.warning("lease %s: %s", self.lease, e)
            return False

    async def acquire(self, api: KubeApi) -> None:
        """Wait until this replica holds the lease."""
        while not await self._attempt(api):
            await asyncio.sleep(self.timing.retry_seconds)

    async def keep(self, api: KubeApi, on_lost: Callable[[], None]) -> None:
        """Renew the lease until it cannot be renewed in time; then stop leading and call `on_lost`."""
        while True:
            await asyncio.sleep(self.timing.retry_seconds)
            if not await self._attempt(api) and not self.leading():
                self.renewed_at = None
                log.error("lost the lease %s (not renewed for %.0fs): stopping", self.lease,
                          self.timing.renew_deadline_seconds)
                on_lost()
                return

    async def release(self, api: KubeApi) -> None:
        """Give the lease up (a clean shutdown) if this replica holds it."""
        if not self.leading():
            return
        self.renewed_at = None
        try:
            lease = await api.get_lease(self.namespace, self.name)
            spec = released(lease, self.identity, datetime.now(UTC)) if lease is not None else None
            if lease is not None and spec is not None:
                await api.write_lease(self.namespace, self.name, spec, str(lease["metadata"]["resourceVersion"]))
                log.info("released the lease %s", self.lease)
        except KubeError as e:
            log.warning("could not release the lease %s (it runs out by itself): %s", self.lease, e)
