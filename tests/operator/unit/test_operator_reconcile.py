"""A job's pass (jobreconcile), the work queue and the status writer, wired as in production over an in-memory
stand-in for kubepool.kube.aio.Api (no cluster). Checks ordering (status persisted before children),
idempotency and queue progression."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from kubepool import naming
from kubepool.api import MLJob
from kubepool.controller import jobwatch, statuswriter, view, workqueue
from kubepool.controller.config import OperatorConfig
from kubepool.controller.jobreconcile import reconcile_job
from kubepool.controller.observed import PodView
from kubepool.controller.state import OperatorState
from support.factories import job, pod, pool
from support.fake_api import FakeApi
from support.operator import operator_state, set_pods


def state(jobs: list[MLJob], pods: list[PodView] | None = None,
          max_nodes: int = 3) -> tuple[OperatorState, FakeApi, list[str]]:
    return operator_state(jobs, [pool(max_nodes=max_nodes)], {("ns", "train"): list(pods or [])})


async def test_status_is_persisted_before_children_and_passes_are_idempotent() -> None:
    op, api, events = state([job(targetInstances=2)])
    await reconcile_job(op, ("ns", "train"))
    assert api.calls[0] == ("status", "train"), "admission is written before anything is created"
    assert api.statuses["train"]["phase"] == "PENDING" and len(api.statuses["train"]["instances"]) == 2
    assert api.pods() == ["train-homogeneouscluster-0"], "the head first; its workers once it holds a node"
    assert {k for k, _ in api.objects} >= {"Service", "NetworkPolicy", "Secret", "Role"}
    assert events == ["WaitingForInstances"]
    set_pods(op, ("ns", "train"), [pod(0, ready=False)])  # holds a node, not yet ready
    await reconcile_job(op, ("ns", "train"))
    assert api.pods() == ["train-homogeneouscluster-0", "train-homogeneouscluster-1"]
    api.calls.clear()
    await reconcile_job(op, ("ns", "train"))
    assert ("status", "train") not in api.calls, "an unchanged status is not written again"
    assert api.pods() == ["train-homogeneouscluster-0", "train-homogeneouscluster-1"]
    assert not api.count("apply"), "children are applied once per attempt"


async def test_done_frees_capacity_for_the_queued_job() -> None:
    first = job("train", targetInstances=1, created="2026-01-01T12:00:00Z")
    second = job("next", targetInstances=1, created="2026-01-01T12:00:05Z")
    op, api, events = state([first, second], max_nodes=1)
    await reconcile_job(op, ("ns", "train"))
    await reconcile_job(op, ("ns", "next"))
    assert api.statuses["next"]["reason"] == "Queued" and api.pods() == ["train-homogeneouscluster-0"]
    set_pods(op, ("ns", "train"), [pod(0, "Succeeded", False)])
    await reconcile_job(op, ("ns", "train"))
    assert api.statuses["train"]["phase"] == "DONE" and "Completed" in events
    await asyncio.sleep(0.05)  # the queued job's pass runs in the background
    assert api.statuses["next"]["phase"] == "PENDING" and "admittedAt" in api.statuses["next"]
    assert "next-homogeneouscluster-0" in api.pods()


async def test_admission_wakes_the_queue_even_when_creating_children_fails() -> None:
    """A younger job decided first queues behind the older one; the older one's admission must wake it even if
    its pass then fails (the retry sees no transition any more)."""
    older = job("job-12", targetInstances=1, created="2026-01-01T12:00:00Z")  # same second: "job-12" < "job-2"
    younger = job("job-2", targetInstances=1, created="2026-01-01T12:00:00Z")
    op, api, _ = state([older, younger], max_nodes=2)
    await reconcile_job(op, ("ns", "job-2"))
    assert api.statuses["job-2"]["reason"] == "Queued"

    async def refuse(obj: dict[str, Any]) -> None:
        raise RuntimeError("apply refused")
    api.apply = refuse  # type: ignore[method-assign]
    try:
        await reconcile_job(op, ("ns", "job-12"))
    except RuntimeError:
        pass
    assert "admittedAt" in api.statuses["job-12"]
    await asyncio.sleep(0.05)  # the woken job's pass runs in the background (and fails the same way)
    assert "admittedAt" in api.statuses["job-2"]


async def test_periodic_recheck_admits_a_stranded_job(monkeypatch: Any) -> None:
    """The safety net: a waiting job nobody wakes is re-decided within QUEUE_RECHECK_SECONDS."""
    op, api, _ = state([job("train", targetInstances=1)], max_nodes=1)
    monkeypatch.setattr(workqueue, "QUEUE_RECHECK_SECONDS", 0.01)
    task = asyncio.ensure_future(op.queue.recheck_forever())
    await asyncio.sleep(0.1)
    task.cancel()
    assert "admittedAt" in api.statuses["train"]


async def test_pool_refreshes_are_coalesced(monkeypatch: Any) -> None:
    op, api, _ = state([])
    monkeypatch.setattr(workqueue, "POOL_REFRESH_SECONDS", 0.01)
    for _ in range(5):
        op.queue.refresh_pools(["cpu", "cpu"])
    await asyncio.sleep(0.1)
    assert api.calls == [("pool-status", "cpu")] and not op.queue.pools_due


async def test_created_pods_are_not_created_again_before_the_watch_shows_them() -> None:
    op, api, _ = state([job(targetInstances=2)])
    await reconcile_job(op, ("ns", "train"))
    await reconcile_job(op, ("ns", "train"))  # the pod watch has not caught up
    assert api.count("create", "Pod") == 1  # the head (its workers wait for it to hold a node)
    for expected in op.children.created_pods.values():  # expired: a create that never showed up is retried
        expected.update(dict.fromkeys(expected, 0.0))
    await reconcile_job(op, ("ns", "train"))
    assert api.count("create", "Pod") == 2


async def test_admissions_in_flight_never_share_capacity() -> None:
    """The admission write happens outside the admission lock: a decision made while another job's admission
    is still being written counts that job's grant, and a failed write gives its grant back."""
    first = job("first", targetInstances=1, created="2026-01-01T12:00:00Z")
    second = job("second", targetInstances=1, created="2026-01-01T12:00:05Z")
    op, api, _ = state([first, second], max_nodes=1)
    release = asyncio.Event()
    written = api.patch_job_status

    async def slow(namespace: str, name: str, status: dict[str, Any], uid: str = "") -> None:
        if name == "first":
            await release.wait()
        await written(namespace, name, status, uid)
    api.patch_job_status = slow  # type: ignore[method-assign]
    pending = asyncio.ensure_future(reconcile_job(op, ("ns", "first")))
    await asyncio.sleep(0.01)
    assert "first" not in api.statuses, "the first admission is still being written"
    await asyncio.wait_for(reconcile_job(op, ("ns", "second")), 5)  # not behind the first's write
    assert api.statuses["second"]["reason"] == "Queued"
    release.set()
    await pending
    assert "admittedAt" in api.statuses["first"]

    async def refuse(namespace: str, name: str, status: dict[str, Any], uid: str = "") -> None:
        raise RuntimeError("status write refused")
    third = job("third", targetInstances=1, created="2026-01-01T12:00:10Z")
    op, api, _ = state([third], max_nodes=1)
    api.patch_job_status = refuse  # type: ignore[method-assign]
    try:
        await reconcile_job(op, ("ns", "third"))
    except RuntimeError:
        pass
    assert "uid-third" not in op.status.written and [c.granted for c in op.view.claims()] == [0]


async def test_a_burst_of_pod_events_costs_one_pass() -> None:
    op, api, _ = state([job(targetInstances=2)])
    await reconcile_job(op, ("ns", "train"))
    passes = len(api.calls)
    set_pods(op, ("ns", "train"), [pod(0, "Running", True), pod(1, "Running", True)])
    for _ in range(4):
        op.queue.spawn(("ns", "train"), delay=0.01)
    assert op.queue.pending == {("ns", "train")}
    await asyncio.sleep(0.1)
    assert api.calls[passes:] == [("status", "train")] and not op.queue.pending


@pytest.mark.parametrize("path", ["stream", "kopf"])
async def test_job_events_trigger_a_pass_on_new_jobs_spec_changes_and_deletion_only(path: str) -> None:
    """From kopf's stream taken over (jobwatch.seen), or through kopf's handlers where it cannot be: the index
    handler files the job, then the event handler runs."""
    from types import SimpleNamespace

    import kopf

    from kubepool.controller import handlers
    op, api, _ = state([job(targetInstances=1)])
    memo = cast(kopf.Memo, SimpleNamespace(op=op))
    body = dict(next(iter(op.view.indexes[view.JOB_INDEX][("ns", "train")])))

    async def event(kind: str | None, **meta: Any) -> bool:
        b = {**body, "metadata": {**body["metadata"], **meta}}
        if path == "stream":
            jobwatch.seen(op, kind, b)
        else:
            if kind != "DELETED":
                await handlers.mljob_index(body=kopf.Body(b), memo=memo)
            await handlers.reconcile_mljob(event={"type": kind, "object": b}, body=kopf.Body(b), memo=memo)
        triggered = ("ns", "train") in op.queue.pending
        await asyncio.sleep(0.02)  # let the pass run
        return triggered

    assert await event(None), "listed after a restart"
    assert not await event("MODIFIED", resourceVersion="2"), "a status write: same generation"
    assert await event("MODIFIED", generation=2), "the spec changed"
    assert await event("MODIFIED", generation=2, deletionTimestamp="2026-01-01T13:00:00Z")
    assert not await event("DELETED", generation=2) and ("ns", "train") not in op.view.seen_jobs
    assert op.view.job(("ns", "train")) is None, "out of the index"
    assert await event("ADDED", uid="uid-again"), "a new job of the same name"
    assert op.view.job(("ns", "train")) is not None


async def test_instance_details_are_written_together_and_transitions_at_once(monkeypatch: Any) -> None:
    monkeypatch.setattr(statuswriter, "STATUS_FLUSH_SECONDS", 0.05)
    monkeypatch.setattr(statuswriter, "STARTUP_FLUSH_SECONDS", 0.05)
    op, api, _ = state([job(targetInstances=2)])
    key = ("ns", "train")
    await reconcile_job(op, key)
    assert api.calls.count(("status", "train")) == 1  # admitted: at once
    set_pods(op, key, [pod(0, "Pending", False), pod(1, "Pending", False)])
    await reconcile_job(op, key)
    set_pods(op, key, [pod(0, "Running", True), pod(1, "Pending", False)])
    await reconcile_job(op, key)
    assert api.calls.count(("status", "train")) == 1, "pods starting: not written yet"
    assert op.view.job(key)[0].status.ready_instances == 1, "but this process reads them at once"
    await asyncio.sleep(0.15)
    assert api.calls.count(("status", "train")) == 2 and api.statuses["train"]["readyInstances"] == 1
    assert api.statuses["train"]["instances"][0]["phase"] == "Running" and not op.status.unflushed
    set_pods(op, key, [pod(0, "Running", True), pod(1, "Running", True)])
    await reconcile_job(op, key)
    assert api.calls.count(("status", "train")) == 3 and api.statuses["train"]["phase"] == "RUNNING"
    await asyncio.sleep(0.15)
    assert api.calls.count(("status", "train")) == 3, "nothing left to flush"
    assert api.urgent == [], "admitted, RUNNING: the common lanes"
    set_pods(op, key, [pod(0, "Succeeded", False), pod(1, "Running", True)])
    await reconcile_job(op, key)
    assert api.statuses["train"]["phase"] == "DONE" and api.urgent == ["train"], "the end: the urgent lanes"


async def test_a_quick_start_is_written_twice_admitted_and_running(monkeypatch: Any) -> None:
    """A start-up's progress waits STARTUP_FLUSH_SECONDS, not STATUS_FLUSH_SECONDS: a start quicker than that
    writes the job's status twice (the floor), its progress folded into RUNNING; once RUNNING, the shorter wait."""
    monkeypatch.setattr(statuswriter, "STATUS_FLUSH_SECONDS", 0.05)
    monkeypatch.setattr(statuswriter, "STARTUP_FLUSH_SECONDS", 0.5)
    op, api, _ = state([job(targetInstances=2, minInstances=1)])
    key = ("ns", "train")
    await reconcile_job(op, key)
    set_pods(op, key, [pod(0, "Running", False), pod(1, "Pending", False)])
    await reconcile_job(op, key)
    await asyncio.sleep(0.15)
    assert api.calls.count(("status", "train")) == 1, "starting: progress not written after STATUS_FLUSH_SECONDS"
    set_pods(op, key, [pod(0, "Running", True), pod(1, "Pending", False)])
    await reconcile_job(op, key)
    assert api.calls.count(("status", "train")) == 2 and api.statuses["train"]["phase"] == "RUNNING"
    assert api.statuses["train"]["instances"][0]["phase"] == "Running", "the progress went with RUNNING"
    await asyncio.sleep(0.6)
    assert api.calls.count(("status", "train")) == 2, "nothing left to flush"
    set_pods(op, key, [pod(0, "Running", True), pod(1, "Running", True)])
    await reconcile_job(op, key)
    await asyncio.sleep(0.15)
    assert api.calls.count(("status", "train")) == 3 and api.statuses["train"]["readyInstances"] == 2, "running: soon"


async def test_a_pod_that_ended_is_handled_at_once_a_starting_one_after_the_burst_window() -> None:
    from kubepool import naming
    from kubepool.controller import podwatch
    op, api, _ = state([job(targetInstances=1)])
    meta = {"name": "train-homogeneouscluster-0", "namespace": "ns", "uid": "p0",
            "labels": {naming.LABEL_JOB: "train", naming.LABEL_MANAGED_BY: naming.MANAGED_BY}}
    for phase, delayed in (("Running", True), ("Succeeded", False)):
        podwatch.seen(op, "MODIFIED", {"metadata": meta, "status": {"phase": phase}})
        await asyncio.sleep(workqueue.POD_EVENT_DELAY_SECONDS / 4)
        assert (("ns", "train") in op.queue.pending) is delayed, phase
        await asyncio.sleep(workqueue.POD_EVENT_DELAY_SECONDS * 2)
        assert not op.queue.pending


async def test_a_job_is_not_decided_on_before_the_watch_shows_this_process_own_spec_write() -> None:
    """Kueue's suspend or resume, this process' write to the job's spec, made generation 2. A pass that still sees
    generation 1 (woken by another event: its Workload admitted before the watch showed the suspend) decides
    nothing and creates nothing; the pass on generation 2 goes on."""
    op, api, events = state([job(targetInstances=2)])
    op.view.spec_written["uid-train"] = 2
    await reconcile_job(op, ("ns", "train"))
    assert api.calls == [] and events == [], api.calls
    body = dict(next(iter(op.view.indexes[view.JOB_INDEX][("ns", "train")])))
    body["metadata"] = {**body["metadata"], "generation": 2, "resourceVersion": "2"}
    jobwatch.file(op, body)
    await reconcile_job(op, ("ns", "train"))
    assert api.calls[0] == ("status", "train") and api.pods() == ["train-homogeneouscluster-0"]


async def test_kueues_suspend_is_remembered_and_the_stale_view_waits_for_it() -> None:
    """A queued job with no Workload: its first pass writes the Workload and suspends the job (generation 2, as
    the API server answered), and decides nothing more on the generation 1 it still sees."""
    queued = job(targetInstances=2)
    queued = queued.model_copy(update={"metadata": {**queued.metadata, "labels": {naming.LABEL_KUEUE_QUEUE: "q"}}})
    op, api, events = operator_state([queued], [pool(max_nodes=3)], cfg=OperatorConfig(kueue=True))
    await reconcile_job(op, ("ns", "train"))
    assert ("suspend", "train") in api.calls and op.view.spec_written == {"uid-train": 2}
    api.calls.clear()
    await reconcile_job(op, ("ns", "train"))  # woken again before the watch showed the suspend
    assert api.calls == [] and api.pods() == []
