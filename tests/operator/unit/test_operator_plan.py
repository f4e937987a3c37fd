"""What the operator does with children for each status: create, delete, TTL, wake-ups (pure)."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from kubepool.api import JobPhase, MLJob
from kubepool.controller.admission import Decision
from kubepool.controller.config import OperatorConfig
from kubepool.controller.jobstatus import Observed, compute_job_status
from kubepool.controller.observed import PodView
from kubepool.controller.plan import SLICE_WAIT, Plan, plan_job, slice_to_write
from support.factories import T0, at, job, pod, pool, with_status

CFG = OperatorConfig(worker_grace_seconds=30)
POOLS = {"cpu": pool()}


def admitted(j: MLJob, granted: int) -> MLJob:
    return with_status(j, compute_job_status(j, Observed(pods=[], now=T0, decision=Decision(True, granted=granted))))


def test_a_grant_below_min_never_deletes_running_pods() -> None:
    """An inconsistent view (grant below minInstances, or empty) must not kill the head or the gang."""
    j = admitted(job(targetInstances=3, minInstances=2), granted=3)
    assert j.status is not None
    st = j.status.model_copy(update={"instances": j.status.instances[:1], "phase": JobPhase.RUNNING})
    plan = plan_job(j, st, [pod(0), pod(1), pod(2)], POOLS, cfg=CFG, now=at(1))
    assert plan.delete_pods == []
    shrunk = j.status.model_copy(update={"instances": j.status.instances[:2], "phase": JobPhase.RUNNING})
    assert plan_job(j, shrunk, [pod(0), pod(1), pod(2)], POOLS, cfg=CFG, now=at(1)).delete_pods == [
        "train-homogeneouscluster-2"]


def test_queued_job_has_no_children() -> None:
    j = job(targetInstances=2)
    st = compute_job_status(j, Observed(pods=[], now=T0, decision=Decision(False, reason="Queued")))
    plan = plan_job(j, st, [], POOLS, cfg=CFG, now=T0)
    assert not plan.ensure_children and not plan.create_pods and plan.wake_at is None


def test_admitted_creates_missing_granted_pods_and_wakes_at_timeout() -> None:
    j = admitted(job(targetInstances=3, minInstances=2, instancesTimeoutSeconds=60), granted=2)
    assert j.status is not None
    plan = plan_job(j, j.status, [pod(0)], POOLS, cfg=CFG, now=at(1))
    assert plan.ensure_children
    assert [p["metadata"]["name"] for p in plan.create_pods] == ["train-homogeneouscluster-1"]
    assert plan.wake_at == at(60)


def test_retry_deletes_previous_attempt() -> None:
    j = admitted(job(targetInstances=2, backoffLimit=2), granted=2)
    st = compute_job_status(j, Observed(pods=[pod(0, "Failed", False), pod(1)], now=at(5)))
    plan = plan_job(j, st, [pod(0, "Failed", False), pod(1)], POOLS, cfg=CFG, now=at(5))
    assert plan.delete_pods == ["train-homogeneouscluster-1"]
    assert not plan.create_pods, "the retry starts only once the failed attempt's worker has ended"
    deleting = dataclasses.replace(pod(1), deleting=True)  # its SIGTERM grace: a last checkpoint sync may run
    assert not plan_job(j, st, [pod(0, "Failed", False), deleting], POOLS, cfg=CFG, now=at(5)).create_pods
    plan = plan_job(j, st, [pod(0, "Failed", False), pod(1, "Failed", False)], POOLS, cfg=CFG, now=at(5))
    assert [p["metadata"]["name"] for p in plan.create_pods] == ["train-homogeneouscluster-0-r1"]  # the head first
    plan = plan_job(j, st, [pod(0, "Failed", False)], POOLS, cfg=CFG, now=at(5))  # the worker gone
    assert [p["metadata"]["name"] for p in plan.create_pods] == ["train-homogeneouscluster-0-r1"]
    never_placed = dataclasses.replace(pod(1, "Pending", False), node=None)  # never ran: nothing to wait for
    assert plan_job(j, st, [pod(0, "Failed", False), never_placed], POOLS, cfg=CFG, now=at(5)).create_pods
    ended = pod(1, "Failed", False)
    plan = plan_job(j, st, [pod(0, "Failed", False), ended, pod(0, "Pending", False, attempt=1)], POOLS, cfg=CFG, now=at(6))
    assert not plan.create_pods, "a retried head that holds no node yet keeps its workers back"
    plan = plan_job(j, st, [pod(0, "Failed", False), ended, pod(0, attempt=1)], POOLS, cfg=CFG, now=at(7))
    assert [p["metadata"]["name"] for p in plan.create_pods] == ["train-homogeneouscluster-1-r1"]


def test_workers_wait_for_the_head_to_hold_a_node() -> None:
    """Created together, the scheduler could give the pool's last free nodes to workers and leave the head
    Pending: every worker would then wait for a head that never comes."""
    j = admitted(job(targetInstances=3, minInstances=2), granted=3)
    assert j.status is not None
    names = [p["metadata"]["name"] for p in plan_job(j, j.status, [], POOLS, cfg=CFG, now=at(1)).create_pods]
    assert names == ["train-homogeneouscluster-0"]
    plan = plan_job(j, j.status, [pod(0, "Pending", False)], POOLS, cfg=CFG, now=at(2))
    assert not plan.create_pods
    plan = plan_job(j, j.status, [pod(0, ready=False)], POOLS, cfg=CFG, now=at(3))
    assert [p["metadata"]["name"] for p in plan.create_pods] == ["train-homogeneouscluster-1", "train-homogeneouscluster-2"]


def test_a_pass_builds_only_the_pods_it_may_create(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every pass plans the children again; building a pod (its env, volumes, affinity) is most of a plan, so
    the pods that exist, and the workers while the head holds no node, are not built at all."""
    import kubepool.controller.builders.pods as pods_builder

    built: list[int] = []
    real = pods_builder.build_instance_pod
    monkeypatch.setattr(pods_builder, "build_instance_pod", lambda j, p, inst, **kw: built.append(inst.instance_id) or real(j, p, inst, **kw))
    j = admitted(job(targetInstances=4), granted=4)
    assert j.status is not None
    plan_job(j, j.status, [], POOLS, cfg=CFG, now=at(1))
    assert built == [0]  # the head alone
    built.clear()
    plan = plan_job(j, j.status, [pod(0), pod(2)], POOLS, cfg=CFG, now=at(2))
    assert built == [1, 3] and [p["metadata"]["name"] for p in plan.create_pods] == [
        "train-homogeneouscluster-1", "train-homogeneouscluster-3"]
    built.clear()
    assert not plan_job(j, j.status, [pod(i) for i in range(4)], POOLS, cfg=CFG, now=at(3)).create_pods and built == []


@pytest.mark.parametrize(("pods", "t", "deleted", "wake"), [
    # a worker still Pending: DONE does not wait for one that never reached a node (jobsteps._head_succeeded)
    ([pod(0, "Succeeded", False), pod(1, "Pending", False)], 5, [], 35),
    ([pod(0, "Succeeded", False), pod(1, "Pending", False)], 40, ["train-homogeneouscluster-1"], None),
    ([pod(0, "Succeeded", False), pod(1, "Succeeded", False)], 5, [], None),
], ids=["grace-running", "grace-over", "all-left"])
def test_done_workers_get_grace(pods: list[PodView], t: float, deleted: list[str], wake: float | None) -> None:
    j = admitted(job(targetInstances=2), granted=2)
    st = compute_job_status(j, Observed(pods=pods, now=at(5)))
    assert st.phase is JobPhase.DONE
    plan = plan_job(j, st, pods, POOLS, cfg=CFG, now=at(t))
    assert plan.delete_pods == deleted and plan.wake_at == (at(wake) if wake is not None else None)


def test_instances_unavailable_removes_pods_at_once() -> None:
    # Parallel mode: the operator keeps the instances clock (in head mode the head's launcher does once it runs).
    j = admitted(job(targetInstances=2, instancesTimeoutSeconds=10, mode="parallel"), granted=2)
    pods = [pod(0), pod(1, "Pending", False)]
    st = compute_job_status(j, Observed(pods=pods, now=at(11)))
    assert st.reason == "InstancesUnavailable", st
    plan = plan_job(j, st, pods, POOLS, cfg=CFG, now=at(11))
    assert plan.delete_pods == ["train-homogeneouscluster-0", "train-homogeneouscluster-1"]


def test_ttl_deletes_the_job() -> None:
    j = admitted(job(targetInstances=1, ttlSecondsAfterFinished=60), granted=1)
    st = compute_job_status(j, Observed(pods=[pod(0, "Succeeded", False)], now=at(5)))
    assert plan_job(j, st, [], POOLS, cfg=CFG, now=at(6)).wake_at == at(65)
    assert plan_job(j, st, [], POOLS, cfg=CFG, now=T0 + timedelta(seconds=65)).delete_job


def test_an_existing_child_is_the_jobs_only_when_it_owns_it() -> None:
    """A 409 on a child's create: the object there is the job's own, an earlier same-name job's (deleted; the
    garbage collector removes it: wait), gone or going (create again), or somebody else's (refused)."""
    from kubepool.controller.builders import JobRef
    from kubepool.controller.plan import FOREIGN, GOING, OWNED, existing_child

    ref = JobRef(name="train", namespace="ns", uid="u2")

    def owned_by(uid: str, name: str = "train", kind: str = "MLJob") -> dict[str, object]:
        return {"ownerReferences": [{"apiVersion": "kubepool.dev/v1alpha1", "kind": kind, "name": name, "uid": uid}]}

    assert existing_child(owned_by("u2"), ref) == OWNED
    assert existing_child(owned_by("u1"), ref) == GOING  # the earlier job of the name
    assert existing_child(None, ref) == GOING
    assert existing_child({**owned_by("u2"), "deletionTimestamp": "2026-01-01T00:00:00Z"}, ref) == GOING
    assert existing_child(owned_by("u1", name="other"), ref) == FOREIGN
    assert existing_child(owned_by("u1", kind="Deployment"), ref) == FOREIGN
    assert existing_child({}, ref) == FOREIGN  # e.g. the user's own Service of that name


def _addressed(p: PodView, ip: str | None, created: float, unschedulable: bool = False) -> PodView:
    return dataclasses.replace(p, ip=ip, uid=f"u-{p.name}", created=at(created).isoformat(), unschedulable=unschedulable)


def test_the_endpoint_slice_waits_for_the_pods_on_their_way_to_an_address() -> None:
    """One write for instances that start together: not the head's address alone, then each worker's. A pod the
    scheduler cannot place does not hold it; one that never gets an address holds it SLICE_WAIT at most."""
    j = admitted(job(targetInstances=3), granted=3)
    assert j.status is not None
    st = j.status
    head = _addressed(pod(0), "10.0.0.1", 1)
    plan = plan_job(j, st, [head], POOLS, cfg=CFG, now=at(2))
    assert plan.create_pods and plan.endpoint_slice_held, "the workers this pass creates are on their way"
    assert plan.wake_at == at(1) + SLICE_WAIT
    w1, w2 = _addressed(pod(1, "Pending", False), None, 2), _addressed(pod(2), None, 2)
    plan = plan_job(j, st, [head, w1, w2], POOLS, cfg=CFG, now=at(3))
    assert plan.endpoint_slice_held and plan.wake_at == at(2) + SLICE_WAIT
    w1, w2 = _addressed(pod(1), "10.0.0.2", 2), _addressed(pod(2), "10.0.0.3", 2)
    plan = plan_job(j, st, [head, w1, w2], POOLS, cfg=CFG, now=at(4))
    assert plan.endpoint_slice is not None and not plan.endpoint_slice_held
    assert [e["addresses"] for e in plan.endpoint_slice["endpoints"]] == [["10.0.0.1"], ["10.0.0.2"], ["10.0.0.3"]]
    # A pool short of nodes: the scheduler marked the last worker unschedulable; the others are published.
    w2 = _addressed(pod(2, "Pending", False), None, 2, unschedulable=True)
    plan = plan_job(j, st, [head, w1, w2], POOLS, cfg=CFG, now=at(4))
    assert not plan.endpoint_slice_held and plan.endpoint_slice and len(plan.endpoint_slice["endpoints"]) == 2
    # Placed but never addressed (a sandbox that does not start): held back SLICE_WAIT from its creation, no more.
    w2 = _addressed(pod(2), None, 2)
    assert plan_job(j, st, [head, w1, w2], POOLS, cfg=CFG, now=at(5)).endpoint_slice_held
    plan = plan_job(j, st, [head, w1, w2], POOLS, cfg=CFG, now=at(2) + SLICE_WAIT)
    assert not plan.endpoint_slice_held and plan.endpoint_slice and len(plan.endpoint_slice["endpoints"]) == 2


def test_a_held_slice_is_still_written_to_take_back_an_address() -> None:
    """A retry's head has its address while its workers are on their way: the earlier attempt's addresses must
    not keep resolving meanwhile, so the held slice goes out where it takes one back, not where it only adds."""
    def eps(*ips: str) -> dict[str, object]:
        return {"endpoints": [{"addresses": [ip]} for ip in ips]}

    old = eps("10.0.0.1", "10.0.0.2")  # the earlier attempt's head and worker
    assert slice_to_write(Plan(endpoint_slice=eps("10.0.0.9"), endpoint_slice_held=True), old) == eps("10.0.0.9")
    assert slice_to_write(Plan(endpoint_slice=eps("10.0.0.1", "10.0.0.2", "10.0.0.3"), endpoint_slice_held=True), old) is None
    assert slice_to_write(Plan(endpoint_slice=eps("10.0.0.1"), endpoint_slice_held=True), None) is None
    assert slice_to_write(Plan(endpoint_slice=eps("10.0.0.1")), None) == eps("10.0.0.1")
    assert slice_to_write(Plan(endpoint_slice=old), old) is None, "unchanged: nothing to write"
    assert slice_to_write(Plan(), old) is None, "no address at all: the slice is left as it is"
