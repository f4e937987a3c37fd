"""PURE: how long a pass that hit an API error waits before it runs again: exponential backoff with jitter,
never sooner than the API server's Retry-After. A refusal that lasts (a quota, a policy) costs the API server
one request per CAP_SECONDS, not one per 5 s forever; a transient error is retried within a second or two."""

from __future__ import annotations

import random
from collections.abc import Callable

BASE_SECONDS = 1.0  # the first retry's ceiling
CAP_SECONDS = 60.0  # the ceiling never grows past this


def retry_delay(failures: int, retry_after: float | None = None, rand: Callable[[], float] = random.random) -> float:
    """Seconds before retry number `failures` (1 after the first failure): a random point in the upper half of
    min(CAP_SECONDS, BASE_SECONDS * 2^(failures-1)), so many jobs refused at once do not retry in step; at
    least `retry_after` when the server asked for it."""
    ceiling = min(CAP_SECONDS, BASE_SECONDS * 2 ** max(failures - 1, 0))
    return max(ceiling * (0.5 + 0.5 * rand()), retry_after or 0.0)
