"""Leader election decisions (pure, kubepool.controller.election): who may take or renew the Lease, when."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from kubepool.controller.election import Timing, claim, record_of, released

T = Timing(lease_seconds=8, renew_deadline_seconds=5, retry_seconds=1)
NOW = datetime(2026, 12, 1, 12, 0, 0, 123456, tzinfo=UTC)


def lease(holder: str, rv: str = "1", transitions: int = 0, duration: int = 8) -> dict[str, object]:
    return {"metadata": {"resourceVersion": rv},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": duration, "renewTime": "2026-12-01T11:59:59.000000Z",
                     "acquireTime": "2026-12-01T11:00:00.000000Z", "leaseTransitions": transitions}}


def test_nobody_holds_it_the_first_one_takes_it() -> None:
    spec = claim(None, "a", 0, T, NOW)
    assert spec == {"holderIdentity": "a", "leaseDurationSeconds": 8, "acquireTime": "2026-12-01T12:00:00.123456Z",
                    "renewTime": "2026-12-01T12:00:00.123456Z", "leaseTransitions": 0}
    assert claim(lease(""), "b", 0, T, NOW) is not None  # released: taken at once


def test_a_held_lease_is_waited_out_for_a_whole_duration_as_observed_here() -> None:
    held = lease("a", transitions=2)
    assert claim(held, "b", 0, T, NOW) is None
    assert claim(held, "b", 7.9, T, NOW) is None  # the holder's own timestamps are never compared
    taken = claim(held, "b", 8.0, T, NOW)
    assert taken is not None and taken["holderIdentity"] == "b" and taken["leaseTransitions"] == 3
    assert taken["acquireTime"] == "2026-12-01T12:00:00.123456Z"
    assert claim(lease("a", duration=30), "b", 10, T, NOW) is None  # the holder's duration counts


def test_the_holder_renews_keeping_its_acquire_time() -> None:
    spec = claim(lease("a", transitions=2), "a", 0, T, NOW)
    assert spec is not None and spec["acquireTime"] == "2026-12-01T11:00:00.000000Z"
    assert spec["renewTime"] == "2026-12-01T12:00:00.123456Z" and spec["leaseTransitions"] == 2


def test_a_change_of_record_restarts_the_wait() -> None:
    assert record_of(lease("a", rv="1")) != record_of(lease("a", rv="2"))


def test_release_only_by_the_holder() -> None:
    assert released(lease("a"), "b", NOW) is None
    spec = released(lease("a"), "a", NOW)
    assert spec is not None and spec["holderIdentity"] == "" and spec["leaseDurationSeconds"] == 1


def test_timing_must_leave_the_old_leader_time_to_stop_first() -> None:
    with pytest.raises(ValueError, match="renew deadline"):
        Timing(lease_seconds=5, renew_deadline_seconds=5, retry_seconds=1)
