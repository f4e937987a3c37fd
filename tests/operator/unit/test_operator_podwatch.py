"""The operator's own pod indexes (podwatch): each pod event, as kopf's taken-over pod stream hands it on, is filed
where the view reads it and asks for the pass it needs; a deleted pod leaves no trace."""

from __future__ import annotations

import asyncio
from typing import Any

from kubepool import naming
from kubepool.controller import podwatch, statuswriter, view, workqueue
from kubepool.controller.jobreconcile import reconcile_job
from kubepool.controller.podwatch import ObjectIndex
from support.factories import job, pool
from support.operator import operator_state

KEY = ("ns", "train")


def body(uid: str, job_name: str | None = "train", phase: str = "Pending", instance: int = 1,
         pool_name: str | None = None, namespace: str = "ns") -> dict[str, Any]:
    labels = {naming.LABEL_MANAGED_BY: naming.MANAGED_BY, naming.LABEL_INSTANCE: str(instance)}
    if job_name:
        labels[naming.LABEL_JOB] = job_name
    if pool_name:
        labels |= {naming.LABEL_ROLE: naming.ROLE_PLACEHOLDER, naming.LABEL_POOL: pool_name}
    return {"metadata": {"name": f"pod-{uid}", "namespace": namespace, "uid": uid, "labels": labels},
            "status": {"phase": phase}}


def test_an_object_index_files_each_object_once_and_moves_it_with_its_key() -> None:
    index: ObjectIndex[str, int] = ObjectIndex()
    index.put("u1", "a", 1)
    index.put("u2", "a", 2)
    index.put("u1", "a", 3)  # replaced
    assert sorted(index["a"]) == [2, 3] and len(index) == 1
    index.put("u2", "b", 4)  # its key changed: gone from the old one
    assert list(index["a"]) == [3] and list(index["b"]) == [4]
    index.drop("u1")
    index.drop("never-filed")
    assert list(index) == ["b"] and index.get("a") is None


async def test_each_pod_event_is_filed_under_its_job_and_a_deleted_pod_is_forgotten() -> None:
    op, _, _ = operator_state([job(targetInstances=2)], [pool()])
    try:
        podwatch.seen(op, None, body("p0", instance=0))  # listed
        podwatch.seen(op, "ADDED", body("p1"))
        podwatch.seen(op, "MODIFIED", body("p1", phase="Running"))
        podwatch.seen(op, "ADDED", body("q0", job_name="other"))
        assert sorted((p.name, p.phase) for p in op.view.pods(KEY)) == [("pod-p0", "Pending"), ("pod-p1", "Running")]
        assert [p.name for p in op.view.pods(("ns", "other"))] == ["pod-q0"]
        podwatch.seen(op, "DELETED", {"metadata": body("p1")["metadata"]})  # a re-list's slim body
        assert [p.name for p in op.view.pods(KEY)] == ["pod-p0"]
        # neither unmanaged pods nor pods without a job are filed
        podwatch.seen(op, "ADDED", {"metadata": {"name": "x", "namespace": "ns", "uid": "x",
                                                 "labels": {naming.LABEL_JOB: "train"}}})
        podwatch.seen(op, "ADDED", body("y", job_name=None))
        assert [p.name for p in op.view.pods(KEY)] == ["pod-p0"]
    finally:
        op.close()


async def test_a_deleted_pod_asks_for_its_jobs_pass_at_once_a_created_one_after_the_progress_window() -> None:
    op, _, _ = operator_state([job(targetInstances=2)], [pool()])
    try:
        podwatch.seen(op, "ADDED", body("p1"))
        at, _ = op.queue.timers[KEY]
        assert at - asyncio.get_running_loop().time() > workqueue.POD_PROGRESS_DELAY_SECONDS / 2
        podwatch.seen(op, "DELETED", {"metadata": body("p1")["metadata"]})  # no deletionTimestamp in a slim body
        assert KEY not in op.queue.timers and KEY in op.queue.pending  # the waiting pass started now
    finally:
        op.close()


async def test_a_placeholder_is_filed_under_its_pool_and_wakes_the_pools_pass() -> None:
    op, _, _ = operator_state([], [pool()])
    try:
        podwatch.seen(op, "ADDED", body("w0", job_name=None, pool_name="cpu", namespace="ops"))
        assert [p.name for p in op.view.placeholders("cpu")] == ["pod-w0"] and "cpu" in op.queue.pools_due
        assert not op.queue.timers  # no job's pass
        podwatch.seen(op, "DELETED", body("w0", job_name=None, pool_name="cpu", namespace="ops"))
        assert op.view.placeholders("cpu") == []
    finally:
        op.close()


async def test_a_pod_not_kubepools_is_neither_filed_nor_wakes_anything() -> None:
    op, _, _ = operator_state([job(targetInstances=2)], [pool()])
    try:
        for b in (body("p1"), body("w0", job_name=None, pool_name="cpu")):
            del b["metadata"]["labels"][naming.LABEL_MANAGED_BY]
            for kind in ("ADDED", "DELETED"):
                podwatch.seen(op, kind, b)
        assert op.view.pods(KEY) == [] and op.view.placeholders("cpu") == []
        assert not op.queue.timers and not op.queue.pending and not op.queue.pools_due
    finally:
        op.close()


def test_an_event_that_cannot_be_filed_is_logged_and_the_stream_goes_on(caplog: Any) -> None:
    op, _, _ = operator_state()
    op.view.indexes = {name: {} for name in view.INDEXES}  # no pod indexes: filing fails
    podwatch.seen(op, "ADDED", body("p1"))
    assert "pod event not handled: pod-p1" in caplog.text


async def test_a_restarts_pod_listing_asks_for_no_pass_before_every_first_listing_is_in(monkeypatch: Any) -> None:
    """After a restart, kopf's pod stream hands the listed pods on one page at a time, before kopf's first
    listings are all in (main.take_over_streams). A pass run on the first page would see a running job with half
    its pods, and fail it as having lost the rest (deleting the pod it has): the queue holds every pass until
    kopf's readiness releases it, and then the job runs on."""
    monkeypatch.setattr(statuswriter, "STATUS_FLUSH_SECONDS", 0.01)
    monkeypatch.setattr(statuswriter, "STARTUP_FLUSH_SECONDS", 0.01)
    before, api, _ = operator_state([job(targetInstances=2)], [pool(max_nodes=3)])
    for _ in range(3):  # the head, then its worker, each running once made
        await reconcile_job(before, KEY)
        pods = [b for k, b in api.objects.items() if k[0] == "Pod"]
        for i, p in enumerate(pods):  # made and running, as the watch shows them
            p["metadata"]["uid"] = f"pod-{i}"
            p.update(spec={"nodeName": f"node-{i}"}, status={"phase": "Running", "podIP": f"10.0.0.{i + 1}",
                                                             "conditions": [{"type": "Ready", "status": "True"}]})
            podwatch.file(before, p)
    await asyncio.sleep(0.05)
    assert api.statuses["train"]["phase"] == "RUNNING" and len(pods) == 2

    running = job(targetInstances=2, status=api.statuses["train"])
    op, after, _ = operator_state([running], [pool(max_nodes=3)])  # the restarted operator, its jobs listed
    op.queue.hold()  # as main.take_over_streams, before kopf's streams start
    podwatch.seen(op, None, pods[0])  # the first page of the pod listing
    await asyncio.sleep(workqueue.POD_EVENT_DELAY_SECONDS + 0.1)  # the next page is slow to come
    assert after.calls == [] and op.queue.pending == {KEY}
    podwatch.seen(op, None, pods[1])
    op.queue.release()  # kopf_fence.when_indexed: every first listing in
    await asyncio.sleep(0.1)
    assert op.view.job(KEY)[0].status.phase == "RUNNING" and not any(c[0] == "delete" for c in after.calls)


async def test_a_pod_as_the_index_holds_it_wakes_nothing() -> None:
    """kopf lists every stream again at least every watch timeout: a listed pod (or a change to a field no view
    reads) that leaves its view as filed asks for no pass; thousands of finished jobs' pods would each wake their
    job. A pod or placeholder whose view changed, or that moved to another job, does."""
    op, _, _ = operator_state([job(targetInstances=2)], [pool()])
    try:
        podwatch.seen(op, "MODIFIED", body("p1", phase="Succeeded"))
        podwatch.seen(op, "ADDED", body("w0", job_name=None, pool_name="cpu", namespace="ops"))
        assert KEY in op.queue.pending and "cpu" in op.queue.pools_due
        op.queue.pending.clear()
        op.queue.pools_due.clear()
        listed = body("p1", phase="Succeeded")
        listed["metadata"]["resourceVersion"] = "99"  # read by no view
        podwatch.seen(op, None, listed)
        podwatch.seen(op, None, body("w0", job_name=None, pool_name="cpu", namespace="ops"))
        assert not op.queue.pending and not op.queue.pools_due and not op.queue.timers
        podwatch.seen(op, "MODIFIED", body("p1", phase="Failed"))
        assert KEY in op.queue.pending
        podwatch.seen(op, "MODIFIED", body("p1", phase="Failed", job_name="other"))
        assert ("ns", "other") in op.queue.pending
    finally:
        op.close()


def test_a_pod_that_ended_or_is_going_asks_for_an_urgent_pass() -> None:
    """Its job's outcome: the pass takes no pass slot (workqueue.spawn's `urgent`); any other pod event waits for one."""
    op, _, _ = operator_state([job(targetInstances=2)], [pool()])
    asked: list[tuple[float, bool]] = []
    op.queue.spawn = lambda key, delay=0.0, urgent=False: asked.append((delay, urgent))  # type: ignore[method-assign]
    try:
        podwatch.woken(op, "MODIFIED", body("p1", phase="Succeeded"))
        podwatch.woken(op, "DELETED", body("p1", phase="Running"))
        podwatch.woken(op, "MODIFIED", body("p1", phase="Running"))
        podwatch.woken(op, "MODIFIED", body("p1", phase="Pending"))
        assert [u for _, u in asked] == [True, True, False, False]
    finally:
        op.close()
