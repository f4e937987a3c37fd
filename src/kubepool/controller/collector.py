"""The cyclic garbage collector, set for a process whose heap is mostly long-lived: every job's model and
status, its pods' views, kopf's per-object memories. CPython collects its oldest generation whenever a quarter
as many objects again have reached it, and each such collection walks the whole heap with the event loop
stopped: the more jobs, the longer each pause, and every event and status write in flight waits it out.

So what survives a full collection is frozen (`gc.freeze`): the next full collections walk only what came after.
Frozen objects are still freed by reference counting, the way almost all of the operator's state goes; only a
cycle among objects frozen while alive outlives them. Every `review_seconds` the freeze is lifted, and the full
collection after it walks everything once more."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

REVIEW_SECONDS = 60.0  # how long a cycle among frozen objects can outlive them
OLDEST = 2  # gc's oldest generation: a full collection


@dataclass(eq=False)  # found in gc.callbacks by identity
class FreezeAfterFullCollections:
    """A `gc.callbacks` entry (`install`/`uninstall`)."""

    review_seconds: float = REVIEW_SECONDS
    clock: Callable[[], float] = time.monotonic
    reviewed: float = field(default_factory=time.monotonic)  # when the heap was last walked whole
    freezes: int = 0
    reviews: int = 0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase != "stop" or info.get("generation") != OLDEST:
            return
        now = self.clock()
        if now - self.reviewed >= self.review_seconds:
            gc.unfreeze()  # the next full collection walks everything again
            self.reviewed = now
            self.reviews += 1
        else:
            gc.freeze()
            self.freezes += 1

    def install(self) -> None:
        if not any(cb is self for cb in gc.callbacks):
            gc.callbacks.append(self)

    def uninstall(self) -> None:
        gc.callbacks[:] = [cb for cb in gc.callbacks if cb is not self]
        gc.unfreeze()
