"""Fencing: a replica that is not (or no longer) the leader writes nothing only the leader may write, and a TTL
deletion names the job by uid. Each test here kills a mutation of hack/mutants/mutants.toml (no cluster)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from kubepool.controller.election import Timing
from kubepool.controller.jobreconcile import reconcile_job
from kubepool.controller.leader import LeaderElector, LeadershipLost
from kubepool.kube import aio
from kubepool.kube.errors import Conflict
from support.factories import job, pod
from support.operator import operator_state, set_pods

T = Timing(lease_seconds=8, renew_deadline_seconds=5, retry_seconds=1)
KEY = ("ns", "train")


def test_leading_only_within_the_renew_deadline_of_the_last_renewal() -> None:
    elector = LeaderElector("ns", "lease", T, identity="me")
    assert not elector.leading(), "never renewed: not the leader"
    elector.renewed_at = time.monotonic()
    assert elector.leading()
    elector.check()
    elector.renewed_at = time.monotonic() - T.renew_deadline_seconds - 0.01
    assert not elector.leading(), "past the renew deadline a leader stops at once, before the lease runs out"
    with pytest.raises(LeadershipLost, match="not the leader"):
        elector.check()


class _Leases:
    """get_lease/write_lease of kube.aio.Api over one Lease in memory."""

    def __init__(self, holder: str = "") -> None:
        self.lease: dict[str, Any] | None = None if not holder else {
            "metadata": {"resourceVersion": "1"}, "spec": {"holderIdentity": holder, "leaseDurationSeconds": 8}}

    async def get_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.lease

    async def write_lease(self, namespace: str, name: str, spec: dict[str, Any], rv: str | None) -> None:
        self.lease = {"metadata": {"resourceVersion": str(int(rv or 0) + 1)}, "spec": spec}


async def test_a_standby_does_not_lead_while_another_holds_the_lease() -> None:
    api: Any = _Leases(holder="other")
    elector = LeaderElector("ns", "lease", T, identity="me")
    assert not await elector.try_once(api) and not elector.leading()
    free: Any = _Leases()
    assert await elector.try_once(free) and elector.leading()
    assert free.lease["spec"]["holderIdentity"] == "me"


async def test_a_lease_write_that_lost_the_race_is_not_leadership() -> None:
    """Two candidates read the free lease; the other's update lands first and ours answers 409: we stand by."""
    class Raced(_Leases):
        async def write_lease(self, namespace: str, name: str, spec: dict[str, Any], rv: str | None) -> None:
            raise Conflict("the object has been modified", 409)

    elector = LeaderElector("ns", "lease", T, identity="me")
    api: Any = Raced()
    assert not await elector.try_once(api) and not elector.leading()


async def test_a_leader_that_cannot_renew_past_its_deadline_stops() -> None:
    """keep(): a renewal refused (another replica took the lease while this one was paused) past the renew
    deadline ends leadership and calls on_lost (the process stops, to come back as a standby)."""
    fast = Timing(lease_seconds=0.4, renew_deadline_seconds=0.2, retry_seconds=0.05)
    elector = LeaderElector("ns", "lease", fast, identity="me")
    elector.renewed_at = time.monotonic() - 1.0
    api: Any = _Leases(holder="other")
    lost: list[bool] = []
    await asyncio.wait_for(elector.keep(api, lambda: lost.append(True)), 5)
    assert lost == [True] and elector.renewed_at is None and not elector.leading()


async def test_a_replica_that_is_not_the_leader_admits_nothing() -> None:
    op, api, _ = operator_state([job(targetInstances=1)], [_pool()], {KEY: []})
    op.leading = lambda: False
    with pytest.raises(LeadershipLost):
        await reconcile_job(op, KEY)
    assert ("status", "train") not in api.calls and not api.pods(), "admitted or created while not leading"


async def test_pods_are_not_created_once_the_lease_ran_out_during_the_pass() -> None:
    answers = iter([True])  # leading at admission, no longer when the pods are about to be created
    op, api, _ = operator_state([job(targetInstances=1)], [_pool()], {KEY: []})
    op.leading = lambda: next(answers, False)
    await reconcile_job(op, KEY)
    assert ("status", "train") in api.calls, "admitted while leading"
    assert not api.pods(), "pods created after the lease ran out"


async def test_the_ttl_deletion_names_the_job_by_uid() -> None:
    finished = job(ttlSecondsAfterFinished=0, targetInstances=1,
                   status={"phase": "DONE", "reason": "Completed", "attempt": 0,
                           "admittedAt": "2026-01-01T12:00:01Z", "startTime": "2026-01-01T12:00:02Z",
                           "completionTime": "2026-01-01T12:00:03Z"})
    op, api, _ = operator_state([finished], [_pool()], {KEY: []})
    set_pods(op, KEY, [pod(0, "Succeeded", False)])
    deleted: list[tuple[str, str]] = []

    async def delete_job(namespace: str, name: str, uid: str = "") -> None:
        deleted.append((name, uid))
    api.delete_job = delete_job  # type: ignore[method-assign]
    await reconcile_job(op, KEY)
    assert deleted == [("train", "uid-train")], "a TTL deletion without the uid may delete a same-name successor"


class _Http:
    def __init__(self) -> None:
        self.sent: list[tuple[str, str, Any]] = []

    async def request(self, method: str, url: str, *, content: bytes | None = None, params: Any = None,
                      headers: Any = None) -> Any:
        import json

        self.sent.append((method, url, json.loads(content) if content else None))

        class Reply:
            status_code = 409  # another job holds the name now
            content = b'{"reason": "Conflict"}'
            text = content.decode()
        return Reply()

    async def close(self) -> None:
        pass


async def test_a_job_deletion_by_uid_is_a_precondition_and_its_409_leaves_the_other_job() -> None:
    http = _Http()
    await aio.Api(http).delete_job("ns", "train", "u1")  # type: ignore[arg-type]
    [(method, url, body)] = http.sent
    assert method == "DELETE" and url.endswith("/namespaces/ns/mljobs/train")
    assert body["preconditions"] == {"uid": "u1"}


def _pool() -> Any:
    from support.factories import pool
    return pool(max_nodes=3)
