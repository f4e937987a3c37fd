"""When a pod event's pass runs (workqueue.pod_event_delay) and how the work queue brings a waiting pass forward:
the events that change what a pass does get it soon, the rest wait about as long as the status writer would."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from kubepool import naming
from kubepool.controller import podwatch, workqueue
from kubepool.controller.workqueue import POD_EVENT_DELAY_SECONDS, POD_PROGRESS_DELAY_SECONDS, pod_event_delay
from support.factories import job, pool
from support.operator import operator_state

KEY = ("ns", "train")


def pod_body(instance: int = 1, phase: str = "Pending", node: str | None = None, ip: str | None = None,
             deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": f"train-homogeneouscluster-{instance}", "namespace": "ns", "uid": f"p{instance}",
                            "labels": {naming.LABEL_JOB: "train", naming.LABEL_INSTANCE: str(instance),
                                       naming.LABEL_MANAGED_BY: naming.MANAGED_BY}}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T12:00:00Z"
    status: dict[str, Any] = {"phase": phase}
    if ip:
        status["podIP"] = ip
    return {"metadata": meta, "spec": {"nodeName": node} if node else {}, "status": status}


@pytest.mark.parametrize(("body", "delay"), [
    (pod_body(phase="Succeeded"), 0.0),
    (pod_body(phase="Failed", node="n1", ip="10.0.0.2"), 0.0),
    (pod_body(phase="Running", node="n1", ip="10.0.0.2", deleting=True), 0.0),
    (pod_body(phase="Running", node="n1", ip="10.0.0.2"), POD_EVENT_DELAY_SECONDS),
    (pod_body(node="n1", ip="10.0.0.2"), POD_EVENT_DELAY_SECONDS),  # an address: the job's endpoints
    (pod_body(instance=0, node="n1"), POD_EVENT_DELAY_SECONDS),  # the head bound: its workers are due
    (pod_body(instance=0), POD_PROGRESS_DELAY_SECONDS),  # the echo of its creation
    (pod_body(node="n1"), POD_PROGRESS_DELAY_SECONDS),  # a worker bound, its containers being made
])
def test_only_pod_events_that_change_the_pass_get_the_burst_window(body: dict[str, Any], delay: float) -> None:
    assert pod_event_delay(body) == delay


async def started_after(op: Any, events: list[tuple[float, dict[str, Any]]], limit: float = 2.0) -> float:
    """Send the pod events (each after its pause; none: in the same turn of the loop) to the operator's pod
    intake, as kopf's pod stream does; seconds until the job's pass started."""
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    for pause, body in events:
        if pause:
            await asyncio.sleep(pause)
        podwatch.seen(op, "MODIFIED", body)
    while KEY in op.queue.pending and loop.time() - t0 < limit:
        await asyncio.sleep(0.005)
    assert KEY not in op.queue.pending, "the pass never started"
    return loop.time() - t0


async def test_a_waiting_pass_is_brought_forward_never_put_back(monkeypatch: Any) -> None:
    monkeypatch.setattr(workqueue, "POD_PROGRESS_DELAY_SECONDS", 0.5)
    op, _, _ = operator_state([job(targetInstances=2)], [pool()], {KEY: []})
    # a worker's creation echo alone: the pass waits the progress window
    assert await started_after(op, [(0.0, pod_body())]) >= 0.45
    # then the head bound: the waiting pass comes forward to the burst window
    took = await started_after(op, [(0.0, pod_body()), (0.05, pod_body(instance=0, node="n1"))])
    assert 0.05 + POD_EVENT_DELAY_SECONDS * 0.9 <= took < 0.4
    # a pod that ended: at once, and a slow event before the pass starts does not put it back
    took = await started_after(op, [(0.0, pod_body(phase="Running", node="n1", ip="10.0.0.2")),
                                    (0.0, pod_body(phase="Failed", node="n1")), (0.0, pod_body())])
    assert took < POD_EVENT_DELAY_SECONDS * 0.9 and not op.queue.timers
