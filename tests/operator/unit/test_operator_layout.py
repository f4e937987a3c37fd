"""Stable instance identities across resizes (builders.layout): a two-group job (group a holds the head) grown and
shrunk at its first group, through the real status computation and the plan of both backends. No other
instance's id, host, rank or pod changes; the removed instance is the grown group's highest."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kubepool import contract, naming
from kubepool.api import Backend, JobPhase, MLJob, MLJobStatus
from kubepool.api.kuberay import LABEL_REPLICA_INDEX, kuberay_instance_id
from kubepool.controller.admission import Decision
from kubepool.controller.builders import build_instance_pods, placement_of
from kubepool.controller.builders.jobcontract import build_job_contract
from kubepool.controller.builders.layout import consecutive, reconcile
from kubepool.controller.builders.raycluster import build_raycluster
from kubepool.controller.config import OperatorConfig
from kubepool.controller.jobstatus import Observed, compute_job_status
from kubepool.controller.observed import PodView
from kubepool.controller.plan import plan_job
from kubepool.runtime_cluster import scale_patch
from support.factories import T0, at, job, pool, with_status

CFG = OperatorConfig(default_image="img:1", ray_port_stride=20)
POOLS = {"cpu": pool("cpu", max_nodes=8)}


def _job(a: int, b: int, status: MLJobStatus | None = None, **spec: Any) -> MLJob:
    j = job(instanceGroups=[{"name": "a", "computePool": "cpu", "instanceCount": a},
                            {"name": "b", "computePool": "cpu", "instanceCount": b}], **spec)
    return j if status is None else with_status(j, status)


def _running(pods: list[dict[str, Any]]) -> list[PodView]:
    out = []
    for p in pods:
        p = copy.deepcopy(p)
        p["metadata"]["uid"] = "uid-" + p["metadata"]["name"]
        p["spec"]["nodeName"] = "node-" + p["metadata"]["name"]
        p["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
        out.append(PodView.of(p))
    return out


def _ids(j: MLJob) -> list[tuple[int, str, int]]:
    return [(p.instance_id, p.group, p.rank) for p in placement_of(j)]


def _resized(j: MLJob, a: int, b: int, pods: list[PodView], t: float) -> MLJob:
    """The job after its spec became a/b and the operator's pass (regrant of everything) wrote its status."""
    resized = _job(a, b, j.status)
    st = compute_job_status(resized, Observed(pods=pods, now=at(t), decision=Decision(True, granted=a + b)))
    return with_status(resized, st)


def _start() -> tuple[MLJob, list[PodView]]:
    j = _job(2, 2)
    j = with_status(j, compute_job_status(j, Observed(pods=[], now=T0, decision=Decision(True, granted=4))))
    pods = _running(build_instance_pods(j, POOLS, granted=4, attempt=0, cfg=CFG))
    j = with_status(j, compute_job_status(j, Observed(pods=pods, now=at(1))))
    assert j.status is not None and j.status.phase is JobPhase.RUNNING
    return j, pods


def test_reconcile_keeps_ids_and_allocates_past_every_id_used() -> None:
    counts = [("a", 2), ("b", 2)]
    assert consecutive(counts) == {"a": [0, 1], "b": [2, 3]}
    assert reconcile(counts, {}, 0) == ({"a": [0, 1], "b": [2, 3]}, 4)  # nothing held: as never resized
    assert reconcile([("a", 3), ("b", 2)], {"a": [0, 1], "b": [2, 3]}, 4) == ({"a": [0, 1, 4], "b": [2, 3]}, 5)
    assert reconcile([("a", 2), ("b", 2)], {"a": [0, 1, 4], "b": [2, 3]}, 5) == ({"a": [0, 1], "b": [2, 3]}, 5)
    # Grown again: a new id, never the removed instance's (its pod may still be leaving).
    assert reconcile([("a", 3), ("b", 2)], {"a": [0, 1], "b": [2, 3]}, 5) == ({"a": [0, 1, 5], "b": [2, 3]}, 6)
    # A partial grant's never-granted ids had no pod: given out again in group order, as consecutive ids.
    assert reconcile(counts, {"a": [0]}, 1) == ({"a": [0, 1], "b": [2, 3]}, 4)


def test_a_job_never_resized_records_nothing_and_keeps_consecutive_ids() -> None:
    j, _ = _start()
    assert j.status is not None and j.status.instance_layout is None
    assert "instanceLayout" not in j.status.model_dump(by_alias=True, exclude_none=True)
    assert _ids(j) == [(0, "a", 0), (1, "a", 1), (2, "b", 0), (3, "b", 1)]
    grown_last = _resized(j, 2, 3, [], 2)  # growing the last group is what consecutive ids did already
    assert grown_last.status is not None and grown_last.status.instance_layout is None


def test_growing_the_first_group_gives_new_ids_and_leaves_the_other_group_alone() -> None:
    j, pods = _start()
    grown = _resized(j, 3, 2, pods, 2)
    assert grown.status is not None and grown.status.instance_layout is not None
    assert _ids(grown) == [(0, "a", 0), (1, "a", 1), (2, "b", 0), (3, "b", 1), (4, "a", 2)]
    assert [(i.instance_id, i.host, i.group, i.rank_in_group) for i in grown.status.instances] == [
        (0, "algo-1", "a", 0), (1, "algo-2", "a", 1), (2, "algo-3", "b", 0), (3, "algo-4", "b", 1), (4, "algo-5", "a", 2)]

    plan = plan_job(grown, grown.status, pods, POOLS, cfg=CFG, now=at(2))
    assert plan.delete_pods == []
    [new] = plan.create_pods  # only the new instance; every existing pod keeps its name
    assert new["spec"]["hostname"] == "algo-5" and new["metadata"]["name"] == naming.pod_name("train", "a", 2, 0)
    assert new["metadata"]["labels"][naming.LABEL_INSTANCE] == "4"
    env = {e["name"]: e.get("value") for e in new["spec"]["containers"][0]["env"]}
    assert env[contract.ENV_INSTANCE_ID] == "4"
    hosts = {p.hostname for p in pods} | {new["spec"]["hostname"]}
    assert len(hosts) == 5, "no two live pods share a hostname"

    # What the runtime reads: b keeps its hosts, ranks and place in `hosts`; a's new host is appended.
    doc = build_job_contract(grown, POOLS)
    assert [i.host for i in doc.instances] == ["algo-1", "algo-2", "algo-3", "algo-4", "algo-5"]
    me = doc.identity(4)
    assert (me.group, me.rank_in_group, me.group_hosts, me.world_size) == ("a", 2, ["algo-1", "algo-2", "algo-5"], 5)
    assert doc.identity(3).rank_in_group == 1 and doc.identity(3).group_hosts == ["algo-3", "algo-4"]
    assert {g.name: g.count for g in doc.groups} == {"a": 3, "b": 2}


def test_shrinking_the_first_group_removes_its_highest_never_the_other_groups() -> None:
    j, pods = _start()
    grown = _resized(j, 3, 2, pods, 2)
    assert grown.status is not None
    pods = pods + _running(build_instance_pods(grown, POOLS, granted=5, attempt=0, cfg=CFG))[4:]
    shrunk = _resized(grown, 2, 2, pods, 3)
    assert shrunk.status is not None and [i.instance_id for i in shrunk.status.instances] == [0, 1, 2, 3]
    plan = plan_job(shrunk, shrunk.status, pods, POOLS, cfg=CFG, now=at(3))
    assert plan.delete_pods == [naming.pod_name("train", "a", 2, 0)] and plan.create_pods == []
    # Shrinking a below where it started: its rank 1 (instance 1) goes, not b's first pod (instance 2).
    smaller = _resized(shrunk, 1, 2, pods[:4], 4)
    assert smaller.status is not None and [i.instance_id for i in smaller.status.instances] == [0, 2, 3]
    plan = plan_job(smaller, smaller.status, pods[:4], POOLS, cfg=CFG, now=at(4))
    assert plan.delete_pods == [naming.pod_name("train", "a", 1, 0)]
    # Grown back: new ids (5, 6) for the new ranks, none of the removed ones.
    regrown = _resized(smaller, 3, 2, pods[:1] + pods[2:4], 5)
    assert _ids(regrown) == [(0, "a", 0), (2, "b", 0), (3, "b", 1), (5, "a", 1), (6, "a", 2)]


def test_suspending_a_resized_job_forgets_its_layout() -> None:
    j, pods = _start()
    grown = _resized(j, 3, 2, pods, 2)
    suspended = _job(3, 2, grown.status, suspend=True)
    st = compute_job_status(suspended, Observed(pods=pods, now=at(3)))
    assert st.instance_layout is None and st.instances == []
    assert _ids(with_status(suspended, st)) == [(0, "a", 0), (1, "a", 1), (2, "a", 2), (3, "b", 0), (4, "b", 1)]


def _kuberay_pod(template: dict[str, Any], name: str, index: int) -> PodView:
    body = {"metadata": {"name": name, "uid": name, "labels": {**template["metadata"]["labels"], LABEL_REPLICA_INDEX: str(index)},
                         "annotations": dict(template["metadata"].get("annotations") or {})},
            "spec": {"nodeName": "n"}, "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
    return PodView.of(body)


def test_kuberay_worker_groups_map_replicas_to_the_stable_ids() -> None:
    j, _ = _start()
    before = build_raycluster(j, POOLS, granted=4, attempt=0, cfg=CFG)
    for g in before["spec"]["workerGroupSpecs"]:  # never resized: exactly as before (base id + index)
        assert naming.ANNOTATION_INSTANCE_IDS not in (g["template"]["metadata"].get("annotations") or {})
        assert contract.ENV_INSTANCE_IDS not in {e["name"] for e in g["template"]["spec"]["containers"][0]["env"]}
    head = _kuberay_pod(before["spec"]["headGroupSpec"]["template"], "head", 0)
    a1 = _kuberay_pod(before["spec"]["workerGroupSpecs"][0]["template"], "a-0", 0)
    bs = [_kuberay_pod(before["spec"]["workerGroupSpecs"][1]["template"], f"b-{i}", i) for i in range(2)]
    assert [p.instance_id for p in [head, a1, *bs]] == [0, 1, 2, 3]
    grown = _resized(j, 3, 2, [head, a1, *bs], 2)
    rc = build_raycluster(grown, POOLS, granted=5, attempt=0, cfg=CFG)
    a, b = rc["spec"]["workerGroupSpecs"]
    assert (a["groupName"], a["replicas"], b["groupName"], b["replicas"]) == ("a", 2, "b", 2)
    assert b == next(g for g in before["spec"]["workerGroupSpecs"] if g["groupName"] == "b"), "b untouched"
    tpl = a["template"]
    assert tpl["metadata"]["annotations"][naming.ANNOTATION_INSTANCE_IDS] == "1,4"
    # The operator's view and the runtime's agree: replica 1 of a is instance 4, with its own Ray ports.
    assert _kuberay_pod(tpl, "a-1", 1).instance_id == 4 and _kuberay_pod(tpl, "a-0", 0).instance_id == 1
    env = {e["name"]: e["value"] for e in tpl["spec"]["containers"][0]["env"] if "value" in e}
    resolved = contract.resolve_replica_index({**env, contract.ENV_REPLICA_INDEX: "1"})
    assert resolved[contract.ENV_INSTANCE_ID] == "4"
    assert int(resolved[contract.ENV_RAY_PORT_OFFSET]) - int(env[contract.ENV_RAY_PORT_OFFSET]) == 3 * CFG.ray_port_stride
    assert kuberay_instance_id(tpl["metadata"]["labels"] | {LABEL_REPLICA_INDEX: "2"},
                               tpl["metadata"]["annotations"]) is None  # past the group's instances

    # Shrunk back: KubeRay is told to delete a's replica of instance 4, and b keeps its replicas.
    pods = [head, a1, _kuberay_pod(tpl, "a-1", 1), *bs]  # a-0 came from the template before the grow
    shrunk = _resized(grown, 2, 2, pods, 3)
    assert shrunk.status is not None
    plan = plan_job(shrunk, shrunk.status, pods, POOLS, cfg=CFG, now=at(3), backend=Backend.KUBERAY)
    assert plan.apply_raycluster is not None
    a2, b2 = plan.apply_raycluster["spec"]["workerGroupSpecs"]
    assert a2["replicas"] == 1 and a2["scaleStrategy"] == {"workersToDelete": ["a-1"]}
    assert b2["replicas"] == 2 and "scaleStrategy" not in b2


def test_scale_patch_resizes_the_named_group() -> None:
    spec = {"instanceGroups": [{"name": "a", "computePool": "cpu", "instanceCount": 2},
                               {"name": "b", "computePool": "cpu", "instanceCount": 2}]}
    assert scale_patch(spec, "b", 5) == [
        {"op": "test", "path": "/spec/instanceGroups/1/name", "value": "b"},
        {"op": "replace", "path": "/spec/instanceGroups/1/instanceCount", "value": 3}]
    with pytest.raises(ValueError, match="group 'c' is not in"):
        scale_patch(spec, "c", 5)
    with pytest.raises(ValueError, match="leaves no instance in group 'b'"):
        scale_patch(spec, "b", 2)
    with pytest.raises(ValueError, match="leaves no instance in the head's group"):
        scale_patch(spec, "a", 2)


def test_kuberay_shrinking_the_first_group_to_the_head_deletes_its_worker_itself() -> None:
    """a 1 -> 2 -> 1: a's worker group goes from the RayCluster, and KubeRay leaves the pods of a group it no
    longer has, so the plan deletes a's worker pod (never b's)."""
    j = _job(1, 1)
    j = with_status(j, compute_job_status(j, Observed(pods=[], now=T0, decision=Decision(True, granted=2))))
    grown = _resized(j, 2, 1, [], 1)
    rc = build_raycluster(grown, POOLS, granted=3, attempt=0, cfg=CFG)
    head = _kuberay_pod(rc["spec"]["headGroupSpec"]["template"], "head", 0)
    a, b = (g["template"] for g in rc["spec"]["workerGroupSpecs"])
    pods = [head, _kuberay_pod(a, "a-0", 0), _kuberay_pod(b, "b-0", 0)]
    assert [p.instance_id for p in pods] == [0, 2, 1]
    running = with_status(grown, compute_job_status(grown, Observed(pods=pods, now=at(2), backend=Backend.KUBERAY,
                                                                    kuberay_installed=True)))
    assert running.status is not None and running.status.phase is JobPhase.RUNNING
    shrunk = _resized(running, 1, 1, pods, 3)
    assert shrunk.status is not None
    plan = plan_job(shrunk, shrunk.status, pods, POOLS, cfg=CFG, now=at(3), backend=Backend.KUBERAY)
    assert plan.apply_raycluster is not None
    assert [g["groupName"] for g in plan.apply_raycluster["spec"]["workerGroupSpecs"]] == ["b"]
    assert plan.delete_pods == ["a-0"]

