"""The operator as Kueue's controller of MLJobs: the Workload it writes and the steps it takes, as pure functions.
The whole protocol against Kueue's own controller: tests/operator/test_operator_kueue.py."""

from __future__ import annotations

from typing import Any

from kubepool import naming
from kubepool.api import MLJob
from kubepool.controller import kueue
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
    assert kueue.decide(queued(suspend=False), [admitted], wanted, T0).empty
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
