"""PURE: how long a pass that hit an API error waits before it runs again: exponential backoff with jitter,
never sooner than the API server's Retry-After. Two schedules: a refusal that lasts (403, 422: a quota, a policy)
costs the API server one request per CAP_SECONDS, not one per 5 s forever; a transient error (a 5xx, a 429, a
conflict, a dropped connection) is retried within a second or two and never waits past TRANSIENT_CAP_SECONDS, so
a flaky control plane slows a job down without eating its instances timeout."""

from __future__ import annotations

import random
from collections.abc import Callable

BASE_SECONDS = 1.0  # the first retry's ceiling after a refusal
CAP_SECONDS = 60.0  # a refusal's ceiling never grows past this
TRANSIENT_BASE_SECONDS = 0.2
TRANSIENT_CAP_SECONDS = 10.0


def retry_delay(failures: int, retry_after: float | None = None, rand: Callable[[], float] = random.random, *,
                transient: bool = False) -> float:
    """Seconds before retry number `failures` (1 after the first failure): a random point in the upper half of
    min(cap, base * 2^(failures-1)), so many jobs refused at once do not retry in step; at least `retry_after`
    when the server asked for it. `transient` picks the short schedule."""
    base, cap = (TRANSIENT_BASE_SECONDS, TRANSIENT_CAP_SECONDS) if transient else (BASE_SECONDS, CAP_SECONDS)
    ceiling = min(cap, base * 2.0 ** max(failures - 1, 0))
    return max(ceiling * (0.5 + 0.5 * rand()), retry_after or 0.0)
