"""ComputePool minNodes (warm capacity) and autoSuspendSeconds, pure: the placeholder count and pods, the
PriorityClass, and the pool status' suspend/resume transitions and restart-safe idle timer."""

from __future__ import annotations

import pytest

from kubepool import naming
from kubepool.api import ComputePool, ComputePoolStatus, PoolPhase
from kubepool.controller.admission import Claim
from kubepool.controller.builders.common import placement_of
from kubepool.controller.builders.placeholders import (
    build_placeholder_pod,
    build_placeholder_pods,
    build_placeholder_priority_class,
    desired_placeholders,
)
from kubepool.controller.builders.pods import build_instance_pod
from kubepool.controller.config import OperatorConfig, resolve_placeholder_namespace
from kubepool.controller.observed import PlaceholderView
from kubepool.controller.poolstatus import auto_suspend_at, compute_pool_status, placeholders_wanted
from support.factories import T0, at, gpu_pool, job, pool

CFG = OperatorConfig()


def warm_pool(min_nodes: int = 2, max_nodes: int = 3, **spec: object) -> ComputePool:
    p = pool(max_nodes=max_nodes, minNodes=min_nodes, **spec)
    p.metadata["uid"] = "pool-uid"
    return p


def admitted(n: int, name: str = "a") -> Claim:
    return Claim("ns", name, "t", ("cpu",) * n, n, n)


def queued(n: int, name: str = "q") -> Claim:
    return Claim("ns", name, "t", ("cpu",) * n, n)


def running(p: ComputePool, index: int, phase: str = "Running", **kw: object) -> PlaceholderView:
    name = p.metadata["name"]
    return PlaceholderView(name=naming.placeholder_pod_name(name, index), namespace="ops", pool=name,
                           owner_uid=p.metadata.get("uid", ""), phase=phase,
                           node=None if phase == "Pending" else f"node-{index}", **kw)  # type: ignore[arg-type]


# --- how many ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("min_nodes", "max_nodes", "in_use", "suspended", "enabled", "want"), [
    (2, 3, 0, False, True, 2),
    (2, 3, 1, False, True, 1),
    (2, 3, 2, False, True, 0),
    (2, 3, 3, False, True, 0),  # never negative
    (0, 3, 0, False, True, 0),
    (3, 3, 0, True, True, 0),  # suspended: warm nodes released
    (3, 3, 0, False, False, 0),  # warm capacity turned off
])
def test_desired_placeholders(min_nodes: int, max_nodes: int, in_use: int, suspended: bool, enabled: bool,
                              want: int) -> None:
    p = warm_pool(min_nodes, max_nodes)
    assert desired_placeholders(p, in_use, suspended=suspended, enabled=enabled) == want


def test_desired_placeholders_never_exceed_max_nodes() -> None:
    # The CRD refuses minNodes > maxNodes; a pool that slipped through (an older CRD) still holds at most maxNodes.
    p = warm_pool(1, 1).model_copy(deep=True)
    p.spec.min_nodes = 5
    assert desired_placeholders(p, 0, suspended=False) == 1


# --- the pods ------------------------------------------------------------------------------------------------
def test_placeholder_pod_holds_one_instance_slot_of_the_pool() -> None:
    p = gpu_pool()
    p.spec.min_nodes = 2
    p.metadata["uid"] = "gpu-uid"
    pod = build_placeholder_pod(p, 1, namespace="kubepool-system", cfg=CFG)
    meta, spec = pod["metadata"], pod["spec"]
    assert meta["name"] == naming.placeholder_pod_name("gpu", 1) == "kubepool-warm-gpu-1"
    assert meta["namespace"] == "kubepool-system"
    assert meta["labels"] == {naming.LABEL_POOL: "gpu", naming.LABEL_ROLE: naming.ROLE_PLACEHOLDER,
                              naming.LABEL_MANAGED_BY: naming.MANAGED_BY}
    assert naming.LABEL_JOB not in meta["labels"]  # never mistaken for an instance of a job
    [owner] = meta["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"], owner["apiVersion"]) == ("ComputePool", "gpu", "gpu-uid",
                                                                                 naming.API_VERSION)
    assert spec["priorityClassName"] == naming.PLACEHOLDER_PRIORITY_CLASS
    assert "priority" not in spec  # the Priority admission plugin resolves it from the class
    assert spec["terminationGracePeriodSeconds"] == 0
    assert spec["nodeSelector"] == {"kubepool.dev/node-pool": "gpu"}
    assert spec["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    [c] = spec["containers"]
    assert c["image"] == CFG.default_image and c["command"][:2] == [CFG.python, "-c"]
    # Same resources and one-per-node anti-affinity as the pool's instances: it holds exactly one slot.
    instance = build_instance_pod(job(computePool="gpu"), p, placement_of(job(computePool="gpu"))[0], attempt=0,
                                  cfg=CFG)
    assert c["resources"] == instance["spec"]["containers"][0]["resources"]
    assert c["resources"]["requests"]["nvidia.com/gpu"] == "1"
    assert spec["affinity"] == instance["spec"]["affinity"]
    assert instance["metadata"]["labels"][naming.LABEL_POOL] == meta["labels"][naming.LABEL_POOL]
    assert "priorityClassName" not in instance["spec"]  # instances keep the default priority 0: they pre-empt
    assert c["securityContext"]["allowPrivilegeEscalation"] is False and spec["automountServiceAccountToken"] is False


def test_placeholder_pods_are_deterministic_and_indexed_from_zero() -> None:
    p = warm_pool(3)
    pods = build_placeholder_pods(p, 3, namespace="ops", cfg=CFG)
    assert [x["metadata"]["name"] for x in pods] == [f"kubepool-warm-cpu-{i}" for i in range(3)]
    assert pods == build_placeholder_pods(p, 3, namespace="ops", cfg=CFG)
    assert build_placeholder_pods(p, 0, namespace="ops", cfg=CFG) == []


def test_a_changed_pool_changes_the_spec_hash() -> None:
    key = naming.ANNOTATION_PLACEHOLDER_SPEC
    before = build_placeholder_pod(warm_pool(), 0, namespace="ops", cfg=CFG)["metadata"]["annotations"][key]
    bigger = build_placeholder_pod(warm_pool(instanceFamily="CPU_X64_M"), 0, namespace="ops", cfg=CFG)
    same = build_placeholder_pod(warm_pool(maxNodes=5), 0, namespace="ops", cfg=CFG)
    assert bigger["metadata"]["annotations"][key] != before
    assert same["metadata"]["annotations"][key] == before  # maxNodes does not change a placeholder


def test_priority_class_is_below_instances_and_preempts_nothing() -> None:
    pc = build_placeholder_priority_class()
    assert pc["metadata"]["name"] == naming.PLACEHOLDER_PRIORITY_CLASS
    assert pc["value"] < 0 and pc["preemptionPolicy"] == "Never" and pc["globalDefault"] is False


def test_placeholder_view_of_a_pod() -> None:
    p = warm_pool()
    body = build_placeholder_pod(p, 0, namespace="ops", cfg=CFG)
    view = PlaceholderView.of({**body, "status": {"phase": "Running"}, "spec": {**body["spec"], "nodeName": "n1"}})
    assert (view.name, view.namespace, view.pool, view.owner_uid, view.node, view.warm) == (
        "kubepool-warm-cpu-0", "ops", "cpu", "pool-uid", "n1", True)
    assert view.spec_hash == body["metadata"]["annotations"][naming.ANNOTATION_PLACEHOLDER_SPEC]
    assert not PlaceholderView.of(body).warm  # Pending
    deleting = {**body, "metadata": {**body["metadata"], "deletionTimestamp": "x"}, "status": {"phase": "Running"},
                "spec": {**body["spec"], "nodeName": "n1"}}
    assert not PlaceholderView.of(deleting).warm  # being pre-empted


@pytest.mark.parametrize(("configured", "watched", "own", "want"), [
    ("ops", (), "kubepool-system", "ops"),
    ("", (), "kubepool-system", "kubepool-system"),
    ("", ("a", "kubepool-system"), "kubepool-system", "kubepool-system"),
    ("", ("a", "b"), "kubepool-system", "a"),  # its own namespace is not watched
    ("", ("a",), None, "a"),
    ("", (), None, "default"),
])
def test_placeholder_namespace(configured: str, watched: tuple[str, ...], own: str | None, want: str) -> None:
    cfg = OperatorConfig(placeholder_namespace=configured, namespaces=watched)
    assert resolve_placeholder_namespace(cfg, own) == want


def test_config_switch_from_env() -> None:
    cfg = OperatorConfig.from_env({"KUBEPOOL_OPERATOR_WARM_CAPACITY": "false",
                                   "KUBEPOOL_OPERATOR_PLACEHOLDER_NAMESPACE": "ops"})
    assert cfg.warm_capacity is False and cfg.placeholder_namespace == "ops"
    assert OperatorConfig.from_env({}).warm_capacity is True


# --- pool status: warm instances ------------------------------------------------------------------------------
def test_warm_instances_count_running_placeholders_of_this_pool_only() -> None:
    p = warm_pool(3)
    other = warm_pool(3).model_copy(update={"metadata": {"name": "other", "uid": "other-uid"}})
    views = [running(p, 0), running(p, 1, phase="Pending"), running(p, 2, deleting=True), running(other, 0),
             PlaceholderView("kubepool-warm-cpu-3", "ops", "cpu", owner_uid="old-pool-uid", phase="Running", node="n")]
    st = compute_pool_status(p, [], [], T0, views)
    assert st.warm_instances == 1
    assert placeholders_wanted(p, st) == 3
    warm = next(c for c in st.conditions if c.type == "Warm")
    assert (warm.status, warm.reason) == ("False", "WarmingUp") and "1 of 3" in warm.message


def test_placeholders_are_never_instances_in_use() -> None:
    p = warm_pool(2)
    st = compute_pool_status(p, [], [admitted(1)], T0, [running(p, 0)])
    assert (st.instances_in_use, st.warm_instances, placeholders_wanted(p, st)) == (1, 1, 1)
    assert st.phase is PoolPhase.ACTIVE
    warm = next(c for c in st.conditions if c.type == "Warm")
    assert (warm.status, warm.reason) == ("True", "WarmNodesHeld")


def test_warm_capacity_off_wants_no_placeholders() -> None:
    p = warm_pool(2)
    st = compute_pool_status(p, [], [], T0, warm_capacity=False)
    assert placeholders_wanted(p, st, warm_capacity=False) == 0
    warm = next(c for c in st.conditions if c.type == "Warm")
    assert (warm.status, warm.reason) == ("False", "WarmCapacityOff")


# --- pool status: auto-suspend and auto-resume -----------------------------------------------------------------
def step(p: ComputePool, claims: list[Claim], seconds: float) -> ComputePool:
    """One status pass at T0+seconds; the pool carries the new status (as after the write)."""
    return p.model_copy(update={"status": compute_pool_status(p, [], claims, at(seconds))})


def test_idle_pool_auto_suspends_after_the_timeout_and_a_job_resumes_it() -> None:
    p = step(warm_pool(2, autoSuspendSeconds=60), [], 0)
    assert p.status is not None and p.status.idle_since == T0 and p.status.phase is PoolPhase.IDLE
    assert auto_suspend_at(p, p.status) == at(60)
    p = step(p, [], 59)
    assert p.status is not None and p.status.phase is PoolPhase.IDLE and placeholders_wanted(p, p.status) == 2
    p = step(p, [], 60)
    st = p.status
    assert st is not None and st.phase is PoolPhase.SUSPENDED and st.idle_since == T0
    assert placeholders_wanted(p, st) == 0 and auto_suspend_at(p, st) is None
    cond = next(c for c in st.conditions if c.type == "Suspended")
    assert (cond.status, cond.reason) == ("True", "AutoSuspended")
    assert "2026-01-01T12:00:00Z" in cond.message and "autoSuspendSeconds=60" in cond.message
    # A job submitted to the suspended pool (queued, not yet admitted) resumes it.
    p = step(p, [queued(2)], 100)
    st = p.status
    assert st is not None and st.phase is PoolPhase.IDLE and st.idle_since is None
    assert placeholders_wanted(p, st) == 2 and auto_suspend_at(p, st) is None
    cond = next(c for c in st.conditions if c.type == "Suspended")
    assert (cond.status, cond.reason, cond.last_transition_time) == ("False", "Active", at(100))
    p = step(p, [admitted(2)], 101)
    assert p.status is not None and p.status.phase is PoolPhase.ACTIVE and placeholders_wanted(p, p.status) == 0
    # The job ends: the idle timer starts again from then.
    p = step(p, [], 200)
    assert p.status is not None and p.status.idle_since == at(200) and auto_suspend_at(p, p.status) == at(260)
    assert p.status.phase is PoolPhase.IDLE


def test_idle_timer_survives_a_restart_through_idle_since() -> None:
    # A restarted operator has only the stored status: the deadline is idleSince + autoSuspendSeconds, not
    # "now + autoSuspendSeconds".
    stored = ComputePoolStatus(phase=PoolPhase.IDLE, idle_since=T0)
    p = warm_pool(1, autoSuspendSeconds=300).model_copy(update={"status": stored})
    st = compute_pool_status(p, [], [], at(120))
    assert st.idle_since == T0 and st.phase is PoolPhase.IDLE and auto_suspend_at(p, st) == at(300)
    st = compute_pool_status(p, [], [], at(301))
    assert st.phase is PoolPhase.SUSPENDED  # the restart happened after the deadline: suspended at once


def test_a_busy_pool_never_auto_suspends() -> None:
    p = step(warm_pool(1, autoSuspendSeconds=10), [admitted(1)], 0)
    p = step(p, [admitted(1)], 1000)
    assert p.status is not None and p.status.phase is PoolPhase.ACTIVE and p.status.idle_since is None
    assert auto_suspend_at(p, p.status) is None


@pytest.mark.parametrize("seconds", [None, 0])
def test_no_auto_suspend_when_unset_or_zero(seconds: int | None) -> None:
    p = step(warm_pool(1, autoSuspendSeconds=seconds), [], 0)
    p = step(p, [], 10**6)
    assert p.status is not None and p.status.phase is PoolPhase.IDLE and auto_suspend_at(p, p.status) is None


def test_manual_suspend_releases_warm_nodes_and_keeps_its_reason() -> None:
    p = step(warm_pool(2, suspend=True, autoSuspendSeconds=5), [], 0)
    st = p.status
    assert st is not None and st.phase is PoolPhase.SUSPENDED and placeholders_wanted(p, st) == 0
    cond = next(c for c in st.conditions if c.type == "Suspended")
    assert (cond.status, cond.reason) == ("True", "Suspended")


def test_conditions_keep_their_transition_time_while_unchanged() -> None:
    p = step(warm_pool(0), [], 0)
    p2 = step(p, [], 50)
    assert p.status is not None and p2.status is not None
    assert [c.last_transition_time for c in p2.status.conditions] == [T0] * 3
    assert [c.type for c in p2.status.conditions] == ["Ready", "Suspended", "Warm"]
    assert p2.status.idle_since == T0
