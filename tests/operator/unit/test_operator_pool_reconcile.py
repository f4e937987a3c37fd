"""A pool's status pass (poolreconcile) with an in-memory stand-in for kubepool.kube.aio.Api: placeholders created (after
their PriorityClass), deleted when instances take the warm nodes, when the pool suspends or when they were
built from an older spec; the auto-suspend wake-up scheduled from idleSince."""

from __future__ import annotations

import asyncio
from typing import Any

from kubepool import naming
from kubepool.api import ComputePool, MLJob
from kubepool.controller.builders.placeholders import build_placeholder_pod
from kubepool.controller.config import OperatorConfig
from kubepool.controller.observed import PlaceholderView
from kubepool.controller.poolreconcile import reconcile_pool
from kubepool.controller.state import OperatorState
from support.factories import job, pool
from support.fake_api import FakeApi
from support.operator import index_job, operator_state


def state(p: ComputePool, jobs: list[MLJob] | None = None, placeholders: list[PlaceholderView] | None = None,
          cfg: OperatorConfig | None = None) -> tuple[OperatorState, FakeApi]:
    op, api, _ = operator_state(jobs or [], [p], placeholders={"cpu": list(placeholders or [])}, cfg=cfg,
                                placeholder_namespace="ops")
    return op, api


def warm_pool(**spec: Any) -> ComputePool:
    p = pool(**{"minNodes": 2, **spec})
    p.metadata["uid"] = "pool-uid"
    return p


def view(p: ComputePool, index: int, spec_hash: str | None = None) -> PlaceholderView:
    body = build_placeholder_pod(p, index, namespace="ops", cfg=OperatorConfig())
    return PlaceholderView(name=body["metadata"]["name"], namespace="ops", pool="cpu", owner_uid="pool-uid",
                           phase="Running", node=f"n{index}",
                           spec_hash=spec_hash or body["metadata"]["annotations"][naming.ANNOTATION_PLACEHOLDER_SPEC])


def admitted_job(instances: int) -> MLJob:
    insts = [{"instanceId": i, "group": naming.DEFAULT_GROUP, "rankInGroup": i, "host": f"algo-{i + 1}", "pod": f"p{i}"}
             for i in range(instances)]
    return job(targetInstances=instances, status={"phase": "RUNNING", "admittedAt": "2026-01-01T12:00:00Z",
                                                  "instances": insts})


async def test_placeholders_follow_the_priority_class_and_the_status_is_written_first() -> None:
    op, api = state(warm_pool())
    await reconcile_pool(op, "cpu")
    assert api.calls == [("pool-status", "cpu"), ("create", "PriorityClass/kubepool-placeholder"),
                         ("create", "Pod/kubepool-warm-cpu-0"), ("create", "Pod/kubepool-warm-cpu-1")]
    assert all(o["metadata"].get("namespace") == "ops" for (kind, _), o in api.objects.items() if kind == "Pod")
    assert api.pool_status["warmInstances"] == 0 and api.pool_status["idleSince"]
    # A second pass before the watch shows them creates nothing again (and writes no unchanged status).
    api.calls.clear()
    await reconcile_pool(op, "cpu")
    assert api.calls == []


async def test_instances_in_use_release_the_placeholders_they_replace() -> None:
    p = warm_pool()
    op, api = state(p, jobs=[admitted_job(1)], placeholders=[view(p, 0), view(p, 1)])
    await reconcile_pool(op, "cpu")
    assert ("delete", "ops/kubepool-warm-cpu-1") in api.calls and ("delete", "ops/kubepool-warm-cpu-0") not in api.calls
    assert api.pool_status["instancesInUse"] == 1 and api.pool_status["warmInstances"] == 2
    assert api.pool_status["idleSince"] is None  # busy: removed from the stored status


async def test_a_suspended_pool_drops_its_placeholders() -> None:
    p = warm_pool(suspend=True)
    op, api = state(p, placeholders=[view(p, 0), view(p, 1)])
    await reconcile_pool(op, "cpu")
    assert {c for c in api.calls if c[0] == "delete"} == {("delete", "ops/kubepool-warm-cpu-0"),
                                                          ("delete", "ops/kubepool-warm-cpu-1")}
    assert api.pool_status["phase"] == "SUSPENDED"


async def test_a_placeholder_of_an_older_spec_is_replaced() -> None:
    p = warm_pool()
    op, api = state(p, placeholders=[view(p, 0), view(p, 1, spec_hash="old")])
    await reconcile_pool(op, "cpu")
    assert [c for c in api.calls if c[0] in ("delete", "create")] == [("delete", "ops/kubepool-warm-cpu-1")]


async def test_warm_capacity_off_creates_nothing() -> None:
    op, api = state(warm_pool(), cfg=OperatorConfig(warm_capacity=False))
    await reconcile_pool(op, "cpu")
    assert api.calls == [("pool-status", "cpu")]


async def test_the_auto_suspend_wake_up_is_scheduled_only_while_idle() -> None:
    op, api = state(warm_pool(autoSuspendSeconds=600))
    await reconcile_pool(op, "cpu")
    handle = op.pool_memo.suspend_timers["cpu"]
    assert 500 < handle.when() - asyncio.get_running_loop().time() <= 601
    index_job(op, admitted_job(1))
    await reconcile_pool(op, "cpu")
    assert "cpu" not in op.pool_memo.suspend_timers and handle.cancelled()
