"""The cyclic garbage collector, off while the operator takes in its first listings and runs the passes they
bring, then on again.

At start-up (a restart with thousands of live jobs) the heap grows from nothing to every job and pod listed.
CPython walks its whole old generation each time that grows by a quarter, so a start-up pays for several
walks of the final heap, and what it walks (decoded JSON, the views built from it) holds no garbage cycles: the
walks were most of a restart's CPU (bench/NOTES.md, sixteenth session). The collector comes back once kopf has
indexed every listed object and the work queue has been idle for two looks in a row, or after
`HOLD_MAX_SECONDS` whatever happens (so garbage cycles made meanwhile wait at most that long).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import Callable

log = logging.getLogger(__name__)
HOLD_MAX_SECONDS = 60.0
LOOK_SECONDS = 0.25
IDLE_LOOKS = 2


class StartupHold:
    """`hold()` at start-up, then `release_when_settled` as a task; `indexed()` is kopf_fence.when_indexed's
    callback."""

    def __init__(self) -> None:
        self.was_enabled = False
        self.listed = False

    def hold(self) -> None:
        self.was_enabled = gc.isenabled()
        gc.disable()

    def indexed(self) -> None:
        self.listed = True

    async def release_when_settled(self, idle: Callable[[], bool], max_seconds: float = HOLD_MAX_SECONDS) -> None:
        started = time.monotonic()
        deadline, looks = started + max_seconds, 0
        try:
            while time.monotonic() < deadline and looks < IDLE_LOOKS:
                await asyncio.sleep(LOOK_SECONDS)
                looks = looks + 1 if self.listed and idle() else 0
        finally:
            if self.was_enabled:
                gc.enable()
        log.info("garbage collector back on %.1f s after start-up (%s)", time.monotonic() - started,
                  "settled" if looks >= IDLE_LOOKS else "time limit")
