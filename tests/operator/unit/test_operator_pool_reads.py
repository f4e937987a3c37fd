"""The pools as the operator reads them (ClusterView.pools) while the pool handlers count the index's changes:
the parsed pools are kept between reads while no pool changed, and every pool event that kopf processes (its
real processing, the operator's handlers and settings) makes the next read see the index as kopf stored it:
added, changed, deleted."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import kopf
from kopf._cogs.clients import patching
from kopf._cogs.structs import references
from kopf._core.engines import indexing
from kopf._core.intents import registries
from kopf._core.reactor import inventory, processing

from kubepool import naming
from kubepool.controller import handlers, podwatch, view
from kubepool.controller.main import apply_settings
from kubepool.controller.view import POOL_INDEX, ClusterView
from support.factories import pool
from support.operator import operator_state, wire

POOLS = references.Resource(naming.GROUP, "v1alpha1", naming.POOL_PLURAL, kind=naming.POOL_KIND, namespaced=False)


def test_untracked_reads_follow_the_index_and_tracked_ones_wait_for_a_change() -> None:
    v = ClusterView(written={})
    v.indexes = {POOL_INDEX: {"cpu": [{**wire(pool()), "metadata": {"name": "cpu", "resourceVersion": "1"}}]}}
    assert v.pools() is not v.pools()  # not tracked (unit tests edit the index by hand): read every time
    v.track_pool_changes()
    first = v.pools()
    assert v.pools() is first and list(first) == ["cpu"]
    v.indexes[POOL_INDEX]["gpu"] = [{**wire(pool("gpu")), "metadata": {"name": "gpu", "resourceVersion": "2"}}]
    assert v.pools() is first  # no change reported yet
    v.pool_changed()
    assert sorted(v.pools()) == ["cpu", "gpu"] and v.pools()["cpu"] is first["cpu"]  # parsed once per version


async def test_each_pool_event_kopf_processes_is_seen_by_the_next_read(monkeypatch: Any) -> None:
    async def patch_obj(**_: Any) -> tuple[None, None]:
        return None, None  # kopf's own bookkeeping writes (diff base, progress): not under test

    monkeypatch.setattr(patching, "patch_obj", patch_obj)
    settings = kopf.OperatorSettings()
    apply_settings(settings)
    registry = registries.get_default_registry()
    assert handlers.pool_event.__name__ in {h.id for h in registry._watching.get_all_handlers()}
    # A pass that reads the pools after the pool's index handler ran and before kopf stored its result (the
    # handler is a coroutine: other tasks may run in between) reads the old index; the next read must not keep it.
    at = next(i for i, h in enumerate(registry._indexing._handlers) if h.id == view.POOL_INDEX)
    original = registry._indexing._handlers[at]

    async def index_then_read(**kwargs: Any) -> Any:
        out = await original.fn(**kwargs)
        kwargs["memo"].op.view.pools()
        return out

    registry._indexing._handlers[at] = dataclasses.replace(original, fn=index_then_read)
    indexers = indexing.OperatorIndexers()
    indexers.ensure(registry._indexing.get_all_handlers())
    op, _, _ = operator_state()
    op.view.indexes = {**{name: indexers.indices[name] for name in view.INDEXES}, **podwatch.new_indexes()}
    op.view.track_pool_changes()
    memories, memo = inventory.ResourceMemories(), kopf.Memo(op=op)

    async def event(kind: str, max_nodes: int, rv: str) -> None:
        body = {**wire(pool(max_nodes=max_nodes)), "apiVersion": naming.API_VERSION, "kind": naming.POOL_KIND}
        body["metadata"].update(uid="c1", resourceVersion=rv)
        await processing.process_resource_event(
            lifecycle=kopf.lifecycles.all_at_once, indexers=indexers, registry=registry, settings=settings,
            memories=memories, memobase=memo, resource=POOLS, raw_event={"type": kind, "object": body},
            event_queue=asyncio.Queue(), no_throttling=True)

    try:
        assert op.view.pools() == {}
        await event("ADDED", 3, "1")
        assert {n: p.spec.max_nodes for n, p in op.view.pools().items()} == {"cpu": 3}
        await event("MODIFIED", 5, "2")
        assert {n: p.spec.max_nodes for n, p in op.view.pools().items()} == {"cpu": 5}
        await event("DELETED", 5, "3")
        assert op.view.pools() == {}
    finally:
        registry._indexing._handlers[at] = original
        op.close()
