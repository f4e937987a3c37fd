"""PURE leader election over a coordination.k8s.io Lease, as client-go does it: a replica takes the lease when
nobody holds it, when it holds it already (a renewal), or when the holder's record has not changed for a whole
lease duration as this replica observed it (its own clock from the moment it saw that record, never the holder's
timestamps: clock skew between machines does not matter, only clock rates). The holder acts as leader only until
its renew deadline (shorter than the lease duration) after its last successful write, so a paused or cut-off
leader stops before another can take over (`leader.LeaderElector` does the I/O)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

Obj = dict[str, Any]


@dataclass(frozen=True)
class Timing:
    lease_seconds: float = 8.0  # a holder silent this long (as a candidate observes it) has lost the lease
    renew_deadline_seconds: float = 5.0  # a holder that could not renew for this long stops leading
    retry_seconds: float = 1.0  # how often the holder renews and candidates look

    def __post_init__(self) -> None:
        if not 0 < self.retry_seconds < self.renew_deadline_seconds < self.lease_seconds:
            raise ValueError(f"leader election needs 0 < retry ({self.retry_seconds}s) < renew deadline "
                             f"({self.renew_deadline_seconds}s) < lease duration ({self.lease_seconds}s)")


def micro_time(at: datetime) -> str:
    """A Lease's MicroTime: RFC 3339 with microseconds, UTC."""
    return at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def record_of(lease: Obj) -> tuple[str, str, str]:
    """What a candidate watches for change: the holder, its last renewal and the object's version."""
    spec = lease.get("spec") or {}
    return (str(spec.get("holderIdentity") or ""), str(spec.get("renewTime") or ""),
            str((lease.get("metadata") or {}).get("resourceVersion") or ""))


def claim(lease: Obj | None, me: str, unchanged_for: float, timing: Timing, now: datetime) -> Obj | None:
    """The Lease's next spec if `me` may hold it now (a create when `lease` is None), or None: wait.

    Args:
        lease: the Lease as read (None: it does not exist).
        me: this replica's identity.
        unchanged_for: seconds since this replica first saw the lease's current record (`record_of`).
        timing: the election's timing.
        now: the wall clock (written as acquireTime/renewTime, for people; never compared across replicas).
    """
    spec = (lease or {}).get("spec") or {}
    holder = str(spec.get("holderIdentity") or "")
    duration = float(spec.get("leaseDurationSeconds") or timing.lease_seconds)
    mine = holder == me
    if holder and not mine and unchanged_for < duration:
        return None
    return {
        "holderIdentity": me,
        "leaseDurationSeconds": int(round(timing.lease_seconds)),
        "acquireTime": spec.get("acquireTime") if mine and spec.get("acquireTime") else micro_time(now),
        "renewTime": micro_time(now),
        "leaseTransitions": int(spec.get("leaseTransitions") or 0) + (0 if mine or lease is None else 1),
    }


def released(lease: Obj, me: str, now: datetime) -> Obj | None:
    """The spec that gives the lease up (a clean shutdown: the next replica takes it at once), or None when `me`
    does not hold it."""
    spec = dict(lease.get("spec") or {})
    if spec.get("holderIdentity") != me:
        return None
    spec.update(holderIdentity="", leaseDurationSeconds=1, renewTime=micro_time(now))
    return spec
