"""The operator's Events: posted in the background through its own client, one attempt each. An Event is
auxiliary: a failure never fails a pass. One whose namespace is gone or being deleted (a user deleting a
namespace with jobs in it) is dropped quietly; kopf's poster retried each of those nine times, logging every try
as an error."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from kubepool.controller.builders.events import event
from kubepool.kube.api import KubeApi
from kubepool.kube.errors import Forbidden, KubeError, NotFound

log = logging.getLogger(__name__)
TERMINATING = "being terminated"  # the API server's refusal of new objects in a namespace being deleted


def dropped_quietly(e: KubeError) -> bool:
    """The Event's namespace is gone, or is going: nobody will read the Event."""
    return isinstance(e, NotFound) or (isinstance(e, Forbidden) and TERMINATING in str(e))


class EventPoster:
    """`poster(obj, type=..., reason=..., message=...)`: kopf.event's call, without kopf's queue and retries."""

    def __init__(self, api: KubeApi, component: str, clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self._api = api
        self._component = component
        self._clock = clock
        self._pending: set[asyncio.Task[None]] = set()  # held until done: the loop keeps only weak references

    def __call__(self, obj: Mapping[str, Any], *, type: str, reason: str, message: str) -> None:
        body = event(obj, type=type, reason=reason, message=message, component=self._component, now=self._clock())
        task = asyncio.get_running_loop().create_task(self._post(body))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _post(self, body: dict[str, Any]) -> None:
        try:
            await self._api.post_event(body)
        except KubeError as e:
            if dropped_quietly(e):
                log.debug("Event %s not posted: %s", body["reason"], e)
            else:
                log.warning("Event %s about %s %s not posted: %s", body["reason"], body["involvedObject"].get("kind"),
                            body["involvedObject"].get("name"), e)

    async def drain(self, timeout: float = 5.0) -> None:
        """Wait (a while) for the Events in flight: on shutdown, the last transitions' Events still go out."""
        if self._pending:
            await asyncio.wait(set(self._pending), timeout=timeout)
