"""The operator as Kueue's controller of MLJobs: the Workload it writes and the steps it takes, as pure functions.
The whole protocol against Kueue's own controller: tests/operator/test_operator_kueue.py."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kubepool import naming
from kubepool.api import MLJob
from kubepool.controller import kueue
from kubepool.controller.builders import build_instance_pods, podsettings
from kubepool.controller.builders.workload import build_workload
from kubepool.controller.config import OperatorConfig
from support.factories import T0, gpu_pool, job, pool

CFG = OperatorConfig()
POOLS = {"cpu": pool("cpu", "CPU_X64_M"), "gpu": gpu_pool()}


def queued(suspend: bool = True, status: dict[str, Any] | None = None, **spec: Any) -> MLJob:
    j = job(status=status, suspend=suspend, **spec)
    return j.model_copy(update={"metadata": {**j.metadata, "labels": {naming.LABEL_KUEUE_QUEUE: "team-a"}}})


def workload(j: MLJob, *conditions: str, status: dict[str, Any] | None = None) -> dict[str, Any]:
    w = build_workload(j, POOLS, CFG, "team-a")
    w["metadata"] |= {"resourceVersion": "7", "generation": 1}
    w["status"] = {"conditions": [{"type": c, "status": "True", "reason": "x"} for c in conditions], **(status or {})}
    return w


def test_the_workload_has_a_pod_set_per_group_with_the_instances_requests() -> None:
    j = queued(instanceGroups=[{"name": "trainers", "computePool": "gpu", "instanceCount": 2},
                               {"name": "data_loaders", "computePool": "cpu", "instanceCount": 3}])
    w = build_workload(j, POOLS, CFG, "team-a")
    assert w["apiVersion"] == "kueue.x-k8s.io/v1beta2" and w["spec"]["queueName"] == "team-a"
    assert [(p["name"], p["count"]) for p in w["spec"]["podSets"]] == [("trainers", 2), ("data-loaders", 3)]
    gpu, cpu = (p["template"]["spec"] for p in w["spec"]["podSets"])
    assert gpu["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] == "1"
    assert gpu["nodeSelector"] == {"kubepool.dev/node-pool": "gpu"}
    assert any(t.get("key") == "nvidia.com/gpu" for t in gpu["tolerations"])
    assert "nvidia.com/gpu" not in cpu["containers"][0]["resources"]["requests"]
    owner = w["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["uid"], owner["controller"]) == ("MLJob", "uid-train", True)
    assert w["metadata"]["labels"][naming.LABEL_KUEUE_JOB_UID] == "uid-train"


def test_a_queued_job_gets_its_workload_and_is_held_until_admitted() -> None:
    j = queued(suspend=False)  # nothing suspended it at creation (no admission policy): the operator does
    wanted = build_workload(j, POOLS, CFG, "team-a")
    steps = kueue.decide(j, [], wanted, T0)
    assert steps.create == wanted and steps.suspend is True
    assert kueue.decide(queued(), [workload(queued(), "QuotaReserved")], wanted, T0).empty  # waits, suspended


def test_admission_resumes_the_job_and_eviction_suspends_it_then_gives_the_quota_back() -> None:
    j = queued()
    wanted = build_workload(j, POOLS, CFG, "team-a")
    admitted = workload(j, "QuotaReserved", "Admitted", status={"admission": {"clusterQueue": "cq"}})
    assert kueue.decide(j, [admitted], wanted, T0).suspend is False
    running = kueue.decide(queued(suspend=False), [admitted], wanted, T0)
    assert running.suspend is None and running.pods_ready is not None  # its PodsReady only
    evicted = workload(j, "QuotaReserved", "Admitted", "Evicted", status={"admission": {"clusterQueue": "cq"}})
    assert kueue.decide(queued(suspend=False), [evicted], wanted, T0).suspend is True
    # Suspended, but its pods not yet gone: the quota stays reserved until the job says it stopped.
    assert kueue.decide(j, [evicted], wanted, T0).empty
    stopped = queued(status={"phase": "PENDING", "reason": "Suspended"})
    steps = kueue.decide(stopped, [evicted], wanted, T0)
    assert steps.release == evicted["metadata"]["name"]
    released = kueue.released_status(evicted, T0)
    assert released["admission"] is None
    kinds = {c["type"]: c["status"] for c in released["conditions"]}
    assert kinds == {"QuotaReserved": "False", "Admitted": "False", "Evicted": "True"}


def test_a_finished_job_finishes_its_workload_once() -> None:
    admitted = workload(queued(), "QuotaReserved", "Admitted")
    done = queued(suspend=False, status={"phase": "DONE", "reason": "Completed", "message": "ok"})
    steps = kueue.decide(done, [admitted], None, T0)
    assert steps.finish is not None and steps.finish["reason"] == "Succeeded" and steps.workload is admitted
    failed = queued(suspend=False, status={"phase": "FAILED", "reason": "HeadFailed", "message": "exit 1"})
    assert kueue.decide(failed, [admitted], None, T0).finish["reason"] == "Failed"  # type: ignore[index]
    assert kueue.decide(done, [workload(queued(), "Admitted", "Finished")], None, T0).empty


def test_a_workload_of_another_shape_or_an_earlier_run_is_replaced() -> None:
    small = workload(queued(targetInstances=2))
    bigger = queued(targetInstances=3)
    wanted = build_workload(bigger, POOLS, CFG, "team-a")
    steps = kueue.decide(bigger, [small], wanted, T0)
    assert steps.delete == (small["metadata"]["name"],) and steps.create is None  # same name: created after
    assert kueue.decide(bigger, [], wanted, T0).create == wanted
    # Holding quota, it stays: Kueue admitted that shape (a resize of a running job is scale_cluster's business).
    assert not kueue.decide(bigger, [workload(queued(targetInstances=2), "QuotaReserved")], wanted, T0).delete
    resumed = kueue.decide(queued(), [workload(queued(), "Admitted", "Finished")], wanted, T0)
    assert resumed.delete and resumed.create is None


def test_a_pool_not_there_yet_creates_nothing() -> None:
    steps = kueue.decide(queued(suspend=False), [], None, T0)
    assert steps.create is None and steps.suspend is True


def test_a_label_no_localqueue_can_have_holds_the_job_and_says_why() -> None:
    j = queued(suspend=False)
    j = j.model_copy(update={"metadata": {**j.metadata, "labels": {naming.LABEL_KUEUE_QUEUE: "Team_A"}}})
    steps = kueue.decide(j, [], None, T0)
    assert steps.suspend is True and steps.create is None and "Team_A" in steps.invalid and not steps.empty
    long = j.model_copy(update={"metadata": {**j.metadata, "labels": {naming.LABEL_KUEUE_QUEUE: "a" * 254}}})
    assert kueue.decide(long, [], None, T0).invalid


def _ready(value: bool) -> dict[str, Any]:
    return {"phase": "RUNNING" if value else "PENDING", "admittedAt": "2026-01-01T12:00:00Z", "conditions": [
        {"type": "InstancesReady", "status": "True" if value else "False", "reason": "x",
         "lastTransitionTime": "2026-01-01T12:00:00Z"}]}


def test_the_admitted_workload_says_whether_its_pods_are_ready_as_kueues_integrations_do() -> None:
    """PodsReady follows the job's InstancesReady (head mode: every counted instance joined): WaitForStart, then
    Started; after a loss WaitForRecovery, then Recovered (Kueue's waitForPodsReady reads exactly these)."""
    admitted = workload(queued(), "QuotaReserved", "Admitted", status={"admission": {"clusterQueue": "cq"}})
    starting = queued(suspend=False, status=_ready(False))
    steps = kueue.decide(starting, [admitted], None, T0)
    assert steps.pods_ready is not None and steps.workload is admitted and not steps.empty
    assert (steps.pods_ready["status"], steps.pods_ready["reason"]) == ("False", "WaitForStart")
    waiting = {**admitted, "status": kueue.with_condition(admitted, steps.pods_ready)}
    assert kueue.decide(starting, [waiting], None, T0).empty  # unchanged: not written again
    running = queued(suspend=False, status=_ready(True))
    started = kueue.decide(running, [waiting], None, T0).pods_ready
    assert started is not None and (started["status"], started["reason"]) == ("True", "Started")
    up = {**admitted, "status": kueue.with_condition(admitted, started)}
    lost = kueue.decide(starting, [up], None, T0).pods_ready
    assert lost is not None and (lost["status"], lost["reason"]) == ("False", "WaitForRecovery")
    down = {**admitted, "status": kueue.with_condition(admitted, lost)}
    again = kueue.decide(running, [down], None, T0).pods_ready
    assert again is not None and (again["status"], again["reason"]) == ("True", "Recovered")
    # Not admitted (or evicted): nothing to say; the finished job's Workload is marked Finished instead.
    assert kueue.decide(starting, [workload(queued(), "QuotaReserved")], None, T0).pods_ready is None
    assert kueue.instances_ready_changed(starting.status, running.status)  # type: ignore[arg-type]
    assert not kueue.instances_ready_changed(running.status, running.status)  # type: ignore[arg-type]


GROUPS = [{"name": "trainers", "computePool": "gpu", "instanceCount": 2},
          {"name": "data_loaders", "computePool": "cpu", "instanceCount": 3}]
SPOT = {"metadata": {"name": "spot"}, "spec": {"nodeLabels": {"example.com/capacity": "spot"},
                                               "tolerations": [{"key": "spot", "operator": "Exists", "effect": "NoSchedule"}]}}
ON_DEMAND = {"metadata": {"name": "on-demand"}, "spec": {"nodeLabels": {"example.com/capacity": "on-demand"}}}


def _admitted(j: MLJob, assignments: list[dict[str, Any]]) -> dict[str, Any]:
    return workload(j, "QuotaReserved", "Admitted", status={"admission": {"clusterQueue": "cq", "podSetAssignments": assignments}})


def test_each_groups_resourceflavors_reach_its_instance_pods() -> None:
    """Per pod set: the assigned flavors' nodeLabels join the pool's nodeSelector and their tolerations are added
    (Kueue's podset.FromAssignment); the placement travels in the job's annotation to the pod builder."""
    j = queued(instanceGroups=GROUPS)
    wl = _admitted(j, [{"name": "trainers", "count": 2, "flavors": {"cpu": "spot", "nvidia.com/gpu": "spot"}},
                       {"name": "data-loaders", "count": 3, "flavors": {"cpu": "on-demand", "memory": "on-demand"}}])
    assert kueue.flavors_of(wl) == {"trainers": ["spot"], "data-loaders": ["on-demand"]}
    selectors = {"trainers": {"kubepool.dev/node-pool": "gpu"}, "data-loaders": {}}
    placed = kueue.placement(wl, {"spot": SPOT, "on-demand": ON_DEMAND}, selectors)
    assert placed == {"trainers": {"nodeSelector": {"example.com/capacity": "spot"}, "tolerations": SPOT["spec"]["tolerations"]},
                      "data-loaders": {"nodeSelector": {"example.com/capacity": "on-demand"}}}
    annotated = j.model_copy(update={"metadata": {**j.metadata, "annotations": {
        podsettings.ANNOTATION_KUEUE_PLACEMENT: json.dumps(placed)}}})
    by_group: dict[str, dict[str, Any]] = {}
    for p in build_instance_pods(annotated, POOLS, granted=5, attempt=0, cfg=CFG):
        by_group.setdefault(p["metadata"]["labels"][naming.LABEL_GROUP], p["spec"])
    trainer, loader = by_group["trainers"], by_group["data-loaders"]
    assert trainer["nodeSelector"] == {"example.com/capacity": "spot", **POOLS["gpu"].spec.node_selector}
    assert SPOT["spec"]["tolerations"][0] in trainer["tolerations"]
    assert loader["nodeSelector"]["example.com/capacity"] == "on-demand"
    assert SPOT["spec"]["tolerations"][0] not in loader["tolerations"]
    plain = {p["spec"].get("nodeSelector", {}).get("example.com/capacity") for p in build_instance_pods(j, POOLS, granted=5, attempt=0, cfg=CFG)}
    assert plain == {None}


def test_an_admission_the_job_cannot_honour_is_refused_with_its_reason() -> None:
    j = queued(instanceGroups=GROUPS)
    selectors = {"trainers": {"example.com/capacity": "on-demand"}, "data-loaders": {}}
    wl = _admitted(j, [{"name": "trainers", "count": 2, "flavors": {"cpu": "spot"}}])
    with pytest.raises(ValueError, match="contradicts the group trainers's nodeSelector example.com/capacity=on-demand"):
        kueue.placement(wl, {"spot": SPOT}, selectors)
    with pytest.raises(ValueError, match="ResourceFlavor spot .* not found"):
        kueue.placement(wl, {}, {})
    # The Workload sets no minCount (minInstances is the whole job), so an admission of fewer instances is
    # refused, never run short.
    assert all("minCount" not in p for p in build_workload(j, POOLS, CFG, "team-a")["spec"]["podSets"])
    partial = _admitted(j, [{"name": "data-loaders", "count": 2, "flavors": {"cpu": "on-demand"}}])
    with pytest.raises(ValueError, match="admitted 2 of the 3 instances of group data-loaders"):
        kueue.placement(partial, {"on-demand": ON_DEMAND}, {})


MAIN = naming.dns_label(naming.DEFAULT_GROUP)


def _sets(j: MLJob) -> list[tuple[str, int, int | None]]:
    return [(p["name"], p["count"], p.get("minCount")) for p in build_workload(j, POOLS, CFG, "team-a")["spec"]["podSets"]]


def test_the_workload_lets_kueue_admit_down_to_min_instances_on_one_pod_set() -> None:
    """Kueue's partial admission: a pod set's minCount (at least 1, at most its count, on one pod set only:
    Kueue's Workload type and webhook). The job may start with any prefix of at least minInstances instances, so
    the minCount goes on the last pod set and covers only the instances past minInstances that it holds."""
    assert _sets(queued(targetInstances=3, minInstances=2)) == [(MAIN, 3, 2)]
    assert _sets(queued(targetInstances=3, minInstances=1)) == [(MAIN, 3, 1)]
    assert _sets(queued(targetInstances=3)) == [(MAIN, 3, None)]  # minInstances defaults to the target: whole
    assert _sets(queued(targetInstances=3, minInstances=3)) == [(MAIN, 3, None)]
    assert _sets(queued(instanceGroups=GROUPS)) == [("trainers", 2, None), ("data-loaders", 3, None)]
    assert _sets(queued(instanceGroups=GROUPS, minInstances=4)) == [("trainers", 2, None), ("data-loaders", 3, 2)]
    # Below the last group's own instances, Kueue can still only cut that group, and never to none of it.
    assert _sets(queued(instanceGroups=GROUPS, minInstances=1)) == [("trainers", 2, None), ("data-loaders", 3, 1)]
    single_last = [GROUPS[1], {**GROUPS[0], "instanceCount": 1}]
    assert _sets(queued(instanceGroups=single_last, minInstances=2)) == [("data-loaders", 3, None), ("trainers", 1, None)]


def _annotated(j: MLJob, placed: dict[str, Any]) -> MLJob:
    return j.model_copy(update={"metadata": {**j.metadata, "annotations": {
        podsettings.ANNOTATION_KUEUE_PLACEMENT: json.dumps(placed)}}})


def test_a_partial_admission_runs_the_job_with_the_admitted_instances_never_more() -> None:
    """Kueue admitted 2 of 3 (podSetAssignments[].count, down to minCount 2): the count travels in the job's
    placement annotation (written with the resume) and the job runs as if it counted 2: its layout, pods,
    contract target, status and its claim on the pool, which grants no more than 2 though the pool has room
    for 3. Fewer than minCount is refused."""
    from kubepool.controller import admission
    from kubepool.controller.builders.common import placement_of
    from kubepool.controller.builders.jobcontract import build_job_contract
    from kubepool.controller.jobstatus import Observed, compute_job_status
    from kubepool.controller.view import claim_of

    j = queued(targetInstances=3, minInstances=2)
    wl = _admitted(j, [{"name": MAIN, "count": 2, "flavors": {"cpu": "on-demand"}}])
    placed = kueue.placement(wl, {"on-demand": {"spec": {}}}, {MAIN: {}})
    assert placed == {MAIN: {"count": 2}}
    assert kueue.partial_admission(wl, placed) == (
        f"Kueue admitted 2 of the 3 instances of group {MAIN} (partial admission, down to its Workload's minCount): "
        "the job runs with 2 instances")
    run = kueue.as_admitted(_annotated(queued(suspend=False, targetInstances=3, minInstances=2), placed))
    assert (run.spec.resolved_target(), run.spec.resolved_min()) == (2, 2)
    assert [p.instance_id for p in placement_of(run)] == [0, 1]
    assert len(build_instance_pods(run, POOLS, granted=3, attempt=0, cfg=CFG)) == 2
    assert build_job_contract(run, POOLS).target_instances == 2
    claim = claim_of(run, "ns", "train")
    assert admission.decide(claim, [], {"cpu": 3}) == admission.Decision(True, granted=2)
    st = compute_job_status(run, Observed(pods=[], now=T0, decision=admission.Decision(True, granted=2)))
    assert (st.target_instances, len(st.instances)) == (2, 2)
    # A resize past the admission (scale_cluster) still runs no more than Kueue admitted.
    grown = run.model_copy(update={"spec": run.spec.model_copy(update={"target_instances": 3})})
    assert kueue.as_admitted(_annotated(grown, placed)).spec.resolved_target() == 2
    # Below minCount: refused (the job stays suspended, KueueAdmissionRefused).
    short = _admitted(j, [{"name": MAIN, "count": 1}])
    with pytest.raises(ValueError, match=f"admitted 1 of the 3 instances of group {MAIN}: fewer than the pod set's minCount 2"):
        kueue.placement(short, {}, {MAIN: {}})


def test_a_readmission_runs_with_its_own_count_and_only_a_queued_job_is_cut() -> None:
    """The count goes with the suspend (the annotation is removed): readmitted whole, the job runs whole; the
    annotation on a job no LocalQueue names cuts nothing; a grouped job's admitted group is cut, the others not."""
    j = queued(suspend=False, targetInstances=3, minInstances=2)
    whole = kueue.placement(_admitted(j, [{"name": MAIN, "count": 3}]), {}, {MAIN: {}})
    assert whole == {} and kueue.partial_admission(_admitted(j, []), whole) == ""
    assert kueue.as_admitted(j) is j and kueue.as_admitted(_annotated(j, whole)).spec.resolved_target() == 3
    unqueued = job(targetInstances=3, minInstances=2)
    assert kueue.as_admitted(_annotated(unqueued, {MAIN: {"count": 2}})).spec.resolved_target() == 3
    grouped = _annotated(queued(instanceGroups=GROUPS, minInstances=4), {"data-loaders": {"count": 2}})
    cut = kueue.as_admitted(grouped)
    assert [(g.name, g.instance_count) for g in cut.spec.instance_groups or []] == [("trainers", 2), ("data_loaders", 2)]
    assert cut.spec.resolved_min() == 4


def test_a_queued_workload_of_another_min_count_is_replaced() -> None:
    """minInstances may change while the job waits: its Workload (no quota yet) is replaced, as for another count."""
    old = workload(queued(targetInstances=3, minInstances=2))
    raised = queued(targetInstances=3, minInstances=3)
    assert kueue.decide(raised, [old], build_workload(raised, POOLS, CFG, "team-a"), T0).delete == (old["metadata"]["name"],)


def test_the_sdks_queue_and_labels_name_the_localqueue_with_spec_overrides_too() -> None:
    from kubepool.api import Entrypoint
    from kubepool.jobs.spec import build_mljob

    made = build_mljob(name="train", namespace="ns", entrypoint=Entrypoint(file="main.py"), compute_pool="cpu",
                       labels={"team": "a", naming.LABEL_KUEUE_QUEUE: "other"}, queue="team-a",
                       spec_overrides={"instancesTimeoutSeconds": 60})
    assert made.metadata["labels"][naming.LABEL_KUEUE_QUEUE] == "team-a" and made.metadata["labels"]["team"] == "a"
    assert made.spec.instances_timeout_seconds == 60 and kueue.queue_of(made) == "team-a"
    assert made.spec.suspend is True  # created suspended, as Kueue's jobs are: its admission resumes it
    plain = build_mljob(name="train", namespace="ns", entrypoint=Entrypoint(file="main.py"), compute_pool="cpu")
    assert kueue.queue_of(plain) == ""
