"""Retries after API errors: exponential backoff with jitter, Retry-After honoured (pure)."""

from __future__ import annotations

import pytest

from kubepool.controller.backoff import CAP_SECONDS, retry_delay


@pytest.mark.parametrize(("failures", "low", "high"), [(1, 0.5, 1), (2, 1, 2), (3, 2, 4), (6, 16, 32), (7, 30, 60), (50, 30, 60)])
def test_delay_doubles_up_to_the_cap_within_its_upper_half(failures: int, low: float, high: float) -> None:
    assert retry_delay(failures, rand=lambda: 0.0) == pytest.approx(low)
    assert retry_delay(failures, rand=lambda: 1.0) == pytest.approx(high)
    assert retry_delay(failures, rand=lambda: 1.0) <= CAP_SECONDS


def test_jitter_spreads_jobs_refused_together() -> None:
    delays = {round(retry_delay(5), 3) for _ in range(50)}
    assert len(delays) > 10 and all(8 <= d <= 16 for d in delays)


def test_retry_after_is_a_floor() -> None:
    assert retry_delay(1, retry_after=30, rand=lambda: 1.0) == 30
    assert retry_delay(7, retry_after=2, rand=lambda: 1.0) == 60


def test_transient_errors_retry_soon_and_never_wait_long() -> None:
    from kubepool.controller.backoff import TRANSIENT_CAP_SECONDS

    assert retry_delay(1, transient=True, rand=lambda: 1.0) == pytest.approx(0.2)
    assert retry_delay(50, transient=True, rand=lambda: 1.0) == TRANSIENT_CAP_SECONDS
    assert retry_delay(50, 30, transient=True, rand=lambda: 0.0) == 30  # Retry-After still a floor
    # Seven failed passes in a row (a control plane answering 5xx to a fifth of the requests) cost seconds, not a minute.
    assert sum(retry_delay(n, transient=True, rand=lambda: 1.0) for n in range(1, 8)) < 30
