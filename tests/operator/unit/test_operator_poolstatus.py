"""ComputePool status (pure): phase, counts, which pools a node change moves, whether a status changed."""

from __future__ import annotations

import pytest

from kubepool.api import PoolPhase
from kubepool.controller import poolstatus as S
from kubepool.controller.admission import Claim
from kubepool.controller.observed import NodeView, Taint
from kubepool.controller.poolstatus import compute_pool_status, pool_status_changed
from support.factories import T0, at, gpu_pool, pool

NODES = [
    NodeView("cpu-node-1", True, {"kubepool.dev/node-pool": "cpu"}),
    NodeView("cpu-node-2", False, {"kubepool.dev/node-pool": "cpu"}),
    NodeView("gpu-node-1", True, {"kubepool.dev/node-pool": "gpu"}, (Taint("nvidia.com/gpu", "NoSchedule", "present"),)),
]


@pytest.mark.parametrize(("p", "claims", "phase", "ready", "in_use", "running", "queued"), [
    (pool(nodeSelector={"kubepool.dev/node-pool": "cpu"}), [], PoolPhase.IDLE, 1, 0, 0, 0),
    (pool(), [Claim("ns", "a", "t", ("cpu",) * 2, 2, 2), Claim("ns", "b", "t", ("cpu",), 1)], PoolPhase.ACTIVE, 1, 2, 1, 1),
    (gpu_pool(), [], PoolPhase.IDLE, 1, 0, 0, 0),
    (pool(suspend=True), [], PoolPhase.SUSPENDED, 1, 0, 0, 0),
], ids=["idle-selector", "active-with-queue", "gpu-tolerates-taint", "suspended"])
def test_pool_status(p, claims, phase, ready, in_use, running, queued) -> None:  # type: ignore[no-untyped-def]
    st = compute_pool_status(p, NODES, claims, T0)
    assert (st.phase, st.ready_nodes, st.instances_in_use, st.running_jobs, st.queued_jobs) == (
        phase, ready, in_use, running, queued)


def test_node_change_touches_only_the_pools_it_matched_or_matches() -> None:
    pools = {"cpu": pool(nodeSelector={"kubepool.dev/node-pool": "cpu"}), "gpu": gpu_pool(),
             "other": pool("other", nodeSelector={"kubepool.dev/node-pool": "other"})}
    cpu, gpu = NODES[0], NODES[2]
    assert S.pools_affected_by_node(pools, cpu, NodeView("cpu-node-1", True, {"kubepool.dev/node-pool": "cpu"})) == []
    assert S.pools_affected_by_node(pools, None, cpu) == ["cpu"]  # added
    assert S.pools_affected_by_node(pools, gpu, None) == ["gpu"]  # deleted
    relabelled = NodeView("cpu-node-1", True, {"kubepool.dev/node-pool": "other"})
    assert S.pools_affected_by_node(pools, cpu, relabelled) == ["cpu", "other"]
    assert S.pools_affected_by_node(pools, cpu, NodeView("cpu-node-1", False, dict(cpu.labels))) == ["cpu"]


def test_a_status_changes_with_any_field_or_condition_and_not_otherwise() -> None:
    p = pool(nodeSelector={"kubepool.dev/node-pool": "cpu"})
    st = compute_pool_status(p, NODES, [], T0)
    assert pool_status_changed(None, st)
    assert not pool_status_changed(st, compute_pool_status(p, NODES, [], T0))
    assert not pool_status_changed(st, compute_pool_status(p.model_copy(update={"status": st}), NODES, [], at(5)))
    assert pool_status_changed(st, compute_pool_status(p, NODES[1:], [], T0))  # readyNodes and Ready's message


def test_events_announce_lost_nodes_suspension_and_resumption_once() -> None:
    p = pool(nodeSelector={"kubepool.dev/node-pool": "cpu"}, autoSuspendSeconds=60)
    first = compute_pool_status(p, NODES, [], T0)
    assert S.pool_events(None, first) == []  # a healthy new pool: nothing to announce
    p = p.model_copy(update={"status": first})
    lost = compute_pool_status(p, NODES[1:], [], at(1))
    assert [e[:2] for e in S.pool_events(first, lost)] == [("Warning", "NoReadyNodes")]
    assert S.pool_events(lost, compute_pool_status(p.model_copy(update={"status": lost}), NODES[1:], [], at(2))) == []
    back = compute_pool_status(p.model_copy(update={"status": lost}), NODES, [], at(3))
    assert [e[:2] for e in S.pool_events(lost, back)] == [("Normal", "NodesReady")]
    asleep = compute_pool_status(p.model_copy(update={"status": back}), NODES, [], at(61))
    assert [e[:2] for e in S.pool_events(back, asleep)] == [("Normal", "AutoSuspended")]
    woken = compute_pool_status(p.model_copy(update={"status": asleep}), NODES, [Claim("ns", "a", "t", ("cpu",), 1)], at(62))
    assert [e[:2] for e in S.pool_events(asleep, woken)] == [("Normal", "Resumed")]
    assert [e[:2] for e in S.pool_events(None, compute_pool_status(pool(suspend=True), [], [], T0))] == [
        ("Warning", "NoReadyNodes"), ("Normal", "Suspended")]
