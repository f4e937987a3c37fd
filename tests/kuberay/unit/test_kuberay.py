"""The KubeRay backend without a cluster: the RayCluster builder, pods → instance ids, the worker's replica
index, the plan's RayCluster decisions, and kubepool's RayCluster models against KubeRay's CRD schema."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from kubepool import contract, naming
from kubepool.api import Backend, ComputePool, JobPhase, MLJob, MLJobStatus
from kubepool.api.kuberay import LABEL_REPLICA_INDEX, RayCluster
from kubepool.controller.admission import Claim, Decision, regrant
from kubepool.controller.builders.raycluster import build_raycluster
from kubepool.controller.config import OperatorConfig
from kubepool.controller.jobstatus import Observed, compute_job_status
from kubepool.controller.observed import PodView, instance_id_of
from kubepool.controller.plan import plan_job
from kubepool.naming import LABEL_INSTANCE_BASE, POD_FINALIZER

ROOT = Path(__file__).resolve().parents[3]
CFG = OperatorConfig(default_image="img:1")
T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
GROUPS = [{"name": "instance_group_1", "computePool": "cpu", "instanceCount": 2},
          {"name": "gpu_group", "computePool": "gpu", "instanceCount": 3}]


def _pool(name: str, family: str, **spec: Any) -> ComputePool:
    return ComputePool.model_validate({"metadata": {"name": name}, "spec": {
        "instanceFamily": family, "maxNodes": 4, "minNodes": 0, **spec}})


POOLS = {"cpu": _pool("cpu", "CPU_X64_S"),
         "gpu": _pool("gpu", "GPU_NV_S", nodeSelector={"kubepool.dev/node-pool": "gpu"},
                      tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}])}


def _job(**spec: Any) -> MLJob:
    return MLJob.model_validate({
        "metadata": {"name": "train", "namespace": "ns", "uid": "uid-train"},
        "spec": {"entrypoint": {"file": "main.py"}, "backend": "kuberay",
                 **({} if "instanceGroups" in spec else {"computePool": "cpu"}), **spec}})


def _env(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in template["spec"]["containers"][0]["env"]}


# --- the builder -----------------------------------------------------------------------------------------
@pytest.mark.parametrize(("spec", "granted", "groups"), [
    ({"targetInstances": 3}, 3, [("homogeneouscluster", 2, 2, 2, 1)]),
    ({"targetInstances": 3, "minInstances": 2}, 3, [("homogeneouscluster", 2, 1, 2, 1)]),
    ({"targetInstances": 4, "minInstances": 2}, 2, [("homogeneouscluster", 1, 1, 3, 1)]),
    ({"targetInstances": 1}, 1, []),
    ({"instanceGroups": GROUPS}, 5, [("instance-group-1", 1, 1, 1, 1), ("gpu-group", 3, 3, 3, 2)]),
    ({"instanceGroups": GROUPS, "minInstances": 3}, 3, [("instance-group-1", 1, 1, 1, 1), ("gpu-group", 1, 1, 3, 2)]),
], ids=["three", "min-two", "granted-prefix", "head-only", "two-groups", "two-groups-partial"])
def test_worker_groups(spec: dict[str, Any], granted: int, groups: list[tuple[str, int, int, int, int]]) -> None:
    """(groupName, replicas, minReplicas, maxReplicas, first worker instance id) per worker group."""
    rc = build_raycluster(_job(**spec), POOLS, granted=granted, attempt=0, cfg=CFG)
    got = [(g["groupName"], g["replicas"], g["minReplicas"], g["maxReplicas"],
            int(g["template"]["metadata"]["labels"][LABEL_INSTANCE_BASE])) for g in rc["spec"]["workerGroupSpecs"]]
    assert got == groups
    for g in rc["spec"]["workerGroupSpecs"]:
        env = _env(g["template"])
        assert env[contract.ENV_INSTANCE_ID]["value"] == g["template"]["metadata"]["labels"][LABEL_INSTANCE_BASE]
        assert env[contract.ENV_REPLICA_INDEX]["valueFrom"]["fieldRef"]["fieldPath"] == \
            f"metadata.labels['{LABEL_REPLICA_INDEX}']"


def test_cluster_identity_head_and_placement() -> None:
    rc = build_raycluster(_job(instanceGroups=GROUPS), POOLS, granted=5, attempt=1, cfg=CFG)
    meta = rc["metadata"]
    assert (rc["apiVersion"], rc["kind"], meta["name"], meta["namespace"]) == ("ray.io/v1", "RayCluster", "train", "ns")
    assert meta["ownerReferences"][0]["kind"] == "MLJob" and meta["ownerReferences"][0]["uid"] == "uid-train"
    assert meta["annotations"] == {"ray.io/overwrite-container-cmd": "true"}
    head = rc["spec"]["headGroupSpec"]
    assert head["rayStartParams"] == {"port": str(naming.RAY_GCS_PORT)}
    hspec, hlabels = head["template"]["spec"], head["template"]["metadata"]["labels"]
    assert (hspec["hostname"], hlabels[naming.LABEL_INSTANCE], hlabels[naming.LABEL_ROLE]) == ("algo-1", "0", "head")
    assert hlabels[naming.LABEL_ATTEMPT] == "1" and hlabels[naming.LABEL_JOB_UID] == "uid-train"
    assert _env(head["template"])[contract.ENV_INSTANCE_ID]["value"] == "0"
    assert contract.ENV_REPLICA_INDEX not in _env(head["template"])
    gpu = rc["spec"]["workerGroupSpecs"][1]["template"]
    assert "hostname" not in gpu["spec"] and naming.LABEL_INSTANCE not in gpu["metadata"]["labels"]
    assert gpu["spec"]["nodeSelector"] == {"kubepool.dev/node-pool": "gpu"}
    assert gpu["spec"]["tolerations"][0]["key"] == "nvidia.com/gpu"
    assert gpu["metadata"]["labels"][naming.LABEL_POOL] == "gpu"
    c = gpu["spec"]["containers"][0]
    assert c["command"] == ["python", "-m", "kubepool.runtime"] and c["image"] == "img:1"
    assert "nvidia.com/gpu" in c["resources"]["limits"]
    assert {"readinessProbe", "livenessProbe"} <= set(c)  # ours, so KubeRay injects none on fixed ports
    for t in (head["template"], gpu):
        assert t["metadata"]["finalizers"] == [POD_FINALIZER]
        assert "ownerReferences" not in t["metadata"] and "name" not in t["metadata"]
        assert t["spec"]["restartPolicy"] == "Never"


def test_local_port_offsets_shift_per_replica() -> None:
    cfg = OperatorConfig(default_image="img:1", ray_port_stride=50)
    rc = build_raycluster(_job(targetInstances=3), POOLS, granted=3, attempt=0, cfg=cfg)
    head = _env(rc["spec"]["headGroupSpec"]["template"])
    worker = _env(rc["spec"]["workerGroupSpecs"][0]["template"])
    assert int(worker[contract.ENV_RAY_PORT_OFFSET]["value"]) - int(head[contract.ENV_RAY_PORT_OFFSET]["value"]) == 50
    assert worker[contract.ENV_RAY_PORT_STRIDE]["value"] == "50"
    port = int(rc["spec"]["headGroupSpec"]["rayStartParams"]["port"])
    assert port != naming.RAY_GCS_PORT  # the job's shifted GCS port, as in its contract


# --- pods → instance ids, on both sides --------------------------------------------------------------------
@pytest.mark.parametrize(("labels", "instance"), [
    ({naming.LABEL_INSTANCE: "0"}, 0),
    ({naming.LABEL_INSTANCE: "4"}, 4),
    ({LABEL_INSTANCE_BASE: "1", LABEL_REPLICA_INDEX: "0"}, 1),
    ({LABEL_INSTANCE_BASE: "2", LABEL_REPLICA_INDEX: "2"}, 4),
    ({LABEL_INSTANCE_BASE: "2"}, -1),
    ({}, -1),
], ids=["pod-head", "pod-worker", "kuberay-first", "kuberay-third-of-group-2", "no-index", "none"])
def test_instance_id_of(labels: dict[str, str], instance: int) -> None:
    assert instance_id_of(labels) == instance


@pytest.mark.parametrize(("env", "instance", "offset"), [
    ({contract.ENV_INSTANCE_ID: "3"}, "3", None),
    ({contract.ENV_INSTANCE_ID: "1", contract.ENV_REPLICA_INDEX: "2"}, "3", None),
    ({contract.ENV_INSTANCE_ID: "1", contract.ENV_REPLICA_INDEX: "2", contract.ENV_RAY_PORT_OFFSET: "150",
      contract.ENV_RAY_PORT_STRIDE: "50"}, "3", "250"),
], ids=["pod-backend", "replica", "replica-local-ports"])
def test_resolve_replica_index(env: dict[str, str], instance: str, offset: str | None) -> None:
    out = contract.resolve_replica_index(env)
    assert out[contract.ENV_INSTANCE_ID] == instance and out.get(contract.ENV_RAY_PORT_OFFSET) == offset


def test_resolve_replica_index_without_feature_gate() -> None:
    with pytest.raises(ValueError, match="RayMultiHostIndexing"):
        contract.resolve_replica_index({contract.ENV_INSTANCE_ID: "1", contract.ENV_REPLICA_INDEX: ""})


# --- the plan ------------------------------------------------------------------------------------------------
def _pod(instance_id: int, phase: str = "Running", attempt: int = 0, deleting: bool = False) -> PodView:
    return PodView(name=f"train-{instance_id}", instance_id=instance_id, attempt=attempt, job_uid="uid-train",
                   phase=phase, ready=phase == "Running", node="n", deleting=deleting, finalizers=(POD_FINALIZER,),
                   group=naming.dns_label(naming.DEFAULT_GROUP))


def _status(phase: JobPhase, granted: int = 3, attempt: int = 0) -> MLJobStatus:
    return MLJobStatus.model_validate({
        "phase": phase, "admittedAt": T0, "attempt": attempt, "completionTime": T0 if phase.finished else None,
        "instances": [{"instanceId": i, "group": naming.DEFAULT_GROUP, "rankInGroup": i, "host": "h", "pod": "p"} for i in range(granted)]})


def test_plan_running_applies_the_cluster_not_pods() -> None:
    j = _job(targetInstances=3)
    plan = plan_job(j, _status(JobPhase.RUNNING), [_pod(0), _pod(1)], POOLS, cfg=CFG, now=T0, backend=Backend.KUBERAY)
    assert plan.create_pods == [] and plan.apply_raycluster is not None and not plan.delete_raycluster
    assert plan.apply_raycluster["spec"]["workerGroupSpecs"][0]["replicas"] == 2


@pytest.mark.parametrize("phase", [JobPhase.DONE, JobPhase.FAILED, JobPhase.CANCELLED])
def test_plan_finished_deletes_the_cluster(phase: JobPhase) -> None:
    plan = plan_job(_job(targetInstances=3), _status(phase), [_pod(0, "Succeeded"), _pod(1)], POOLS, cfg=CFG,
                    now=T0, backend=Backend.KUBERAY)
    assert plan.delete_raycluster and plan.apply_raycluster is None and plan.delete_pods == []
    gone = plan_job(_job(targetInstances=3), _status(phase), [], POOLS, cfg=CFG, now=T0, backend=Backend.KUBERAY)
    assert not gone.delete_raycluster


@pytest.mark.parametrize(("phase", "pod", "released"), [
    (JobPhase.RUNNING, _pod(1, "Succeeded", deleting=True), False),  # a worker's release: the head decides next
    (JobPhase.RUNNING, _pod(0, "Succeeded", deleting=True), False),
    (JobPhase.RUNNING, _pod(1, "Failed", deleting=True), False),
    (JobPhase.RUNNING, _pod(1, "Running", deleting=True), True),  # deleted while running: nothing to keep
    (JobPhase.RUNNING, _pod(1, "Failed", attempt=0, deleting=True), False),
    (JobPhase.PENDING, _pod(1, "Failed", attempt=0, deleting=True), True),  # an earlier attempt's pod
    (JobPhase.DONE, _pod(0, "Succeeded", deleting=True), True),
    (JobPhase.RUNNING, _pod(1, "Succeeded"), False),  # not deleted: not held
], ids=["worker-released", "head-done", "worker-failed", "deleted-running", "failed-current", "old-attempt",
        "finished", "not-deleting"])
def test_plan_releases_held_pods(phase: JobPhase, pod: PodView, released: bool) -> None:
    attempt = 1 if phase is JobPhase.PENDING else 0
    plan = plan_job(_job(targetInstances=3), _status(phase, attempt=attempt), [pod], POOLS, cfg=CFG, now=T0,
                    backend=Backend.KUBERAY)
    assert (pod in plan.release_pods) is released


# --- models vs KubeRay's CRD schema ----------------------------------------------------------------------------
def _crd_schema() -> dict[str, Any]:
    try:
        out = subprocess.run([str(ROOT / "hack/kuberay/build.sh")], capture_output=True, text=True, timeout=1800)
    except OSError as e:
        pytest.skip(f"hack/kuberay/build.sh cannot run: {e}")
    if out.returncode != 0:
        pytest.skip(f"hack/kuberay/build.sh failed (KubeRay's CRDs are not available): {out.stderr.strip()[-300:]}")
    crd = yaml.safe_load((Path(out.stdout.strip().splitlines()[-1]) / "crds/ray.io_rayclusters.yaml").read_text())
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")
    return dict(version["schema"]["openAPIV3Schema"])


def _missing(model: type[BaseModel], schema: dict[str, Any], path: str) -> list[str]:
    props = schema.get("properties") or {}
    out = []
    for name, field in model.model_fields.items():
        wire = field.alias or name
        if wire not in props:
            out.append(f"{path}.{wire}")
            continue
        sub = props[wire]
        if sub.get("type") == "array":
            sub = sub.get("items") or {}
        inner = field.annotation
        for arg in (*getattr(inner, "__args__", ()), inner):
            target = getattr(arg, "__args__", (arg,))[0] if getattr(arg, "__origin__", None) is list else arg
            if isinstance(target, type) and issubclass(target, BaseModel):
                out += _missing(target, sub, f"{path}.{wire}")
    return out


def test_models_match_the_crd_schema() -> None:
    assert _missing(RayCluster, _crd_schema(), "RayCluster") == []


def test_built_cluster_uses_only_schema_fields() -> None:
    schema = _crd_schema()["properties"]["spec"]
    rc = build_raycluster(_job(instanceGroups=GROUPS), POOLS, granted=5, attempt=0, cfg=CFG)
    assert set(rc["spec"]) <= set(schema["properties"])
    assert set(rc["spec"]["workerGroupSpecs"][0]) <= set(schema["properties"]["workerGroupSpecs"]["items"]["properties"])
    assert set(rc["spec"]["headGroupSpec"]) <= set(schema["properties"]["headGroupSpec"]["properties"])
    tmeta = schema["properties"]["headGroupSpec"]["properties"]["template"]["properties"]["metadata"]["properties"]
    assert set(rc["spec"]["headGroupSpec"]["template"]["metadata"]) <= set(tmeta)  # finalizers survive pruning


# --- resizing (scale_cluster patches the spec; both backends follow the grant) ----------------------------------
def _claim(name: str, pools: tuple[str, ...], granted: int) -> Claim:
    return Claim(namespace="ns", name=name, created="", pools=pools, min_instances=1, granted=granted)


@pytest.mark.parametrize(("pools", "granted", "others", "capacity", "want"), [
    (("cpu",) * 2, 3, 0, 4, 2),  # shrink: at once
    (("cpu",) * 4, 2, 0, 4, 4),  # grow into free capacity
    (("cpu",) * 4, 2, 1, 4, 3),  # grow as far as the other job leaves room
    (("cpu",) * 4, 3, 0, 2, 3),  # maxNodes lowered under it: keeps what it holds
], ids=["shrink", "grow", "grow-partly", "keep"])
def test_regrant(pools: tuple[str, ...], granted: int, others: int, capacity: int, want: int) -> None:
    me = _claim("me", pools, granted)
    claims = [me, _claim("other", ("cpu",) * others, others)] if others else [me]
    assert regrant(me, claims, {"cpu": capacity}) == want


def test_shrink_lowers_replicas_and_deletes_the_last_instances() -> None:
    running = _job(targetInstances=2).model_copy(update={"status": _status(JobPhase.RUNNING, granted=3)})
    pods = [_pod(0), _pod(1), _pod(2)]
    st = compute_job_status(running, Observed(pods=pods, now=T0, decision=Decision(True, 2), backend=Backend.KUBERAY,
                                              kuberay_installed=True))
    assert [i.instance_id for i in st.instances] == [0, 1] and st.phase is JobPhase.RUNNING
    plan = plan_job(running, st, pods, POOLS, cfg=CFG, now=T0, backend=Backend.KUBERAY)
    group = plan.apply_raycluster["spec"]["workerGroupSpecs"][0] if plan.apply_raycluster else {}
    # KubeRay would delete an arbitrary worker when replicas drop: it is told which one, and deletes it itself.
    assert group["replicas"] == 1 and group["scaleStrategy"] == {"workersToDelete": ["train-2"]}
    assert plan.delete_pods == []
    pods_backend = plan_job(running, st, pods, POOLS, cfg=CFG, now=T0, backend=Backend.PODS)
    assert pods_backend.delete_pods == ["train-2"]


def test_grow_waits_for_the_new_instance_but_a_vanished_one_is_lost() -> None:
    seen = _status(JobPhase.RUNNING, granted=2)
    for i in seen.instances:
        i.phase, i.node = "Running", "n"
    running = _job(targetInstances=3).model_copy(update={"status": seen})
    obs = Observed(pods=[_pod(0), _pod(1)], now=T0, decision=Decision(True, 3), backend=Backend.KUBERAY,
                   kuberay_installed=True)
    grown = compute_job_status(running, obs)
    assert grown.phase is JobPhase.RUNNING and len(grown.instances) == 3  # instance 2 is joining
    lost = compute_job_status(running.model_copy(update={"status": grown}),
                              Observed(pods=[_pod(0)], now=T0, backend=Backend.KUBERAY, kuberay_installed=True))
    assert (lost.phase, lost.reason) == (JobPhase.FAILED, "InstancesLost")


def test_readiness_follows_the_ray_temp_dir() -> None:
    rc = build_raycluster(_job(targetInstances=2, env=[{"name": contract.ENV_RAY_TEMP_DIR, "value": "/scratch/ray"}]),
                          POOLS, granted=2, attempt=0, cfg=CFG)
    c = rc["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    for kind in ("readinessProbe", "startupProbe", "livenessProbe"):
        assert c[kind]["exec"]["command"] == ["test", "-e", "/scratch/ray/ray_current_cluster"]
    # #38 item 4: the instances timeout counts from the launcher's wait, after pip install of any length, so
    # liveness waits for the node to join (the startup probe), never a fixed delay that would kill a slow install.
    assert "initialDelaySeconds" not in c["livenessProbe"] and c["startupProbe"]["failureThreshold"] * c[
        "startupProbe"]["periodSeconds"] >= 86400


@pytest.mark.parametrize("mode", ["parallel", "sagemaker"])
def test_modes_without_ray_are_ready_while_running(mode: str) -> None:
    """No Ray node, so no Ray marker: a running container is ready (the pod backend has no probe at all there)."""
    rc = build_raycluster(_job(targetInstances=2, mode=mode), POOLS, granted=2, attempt=0, cfg=CFG)
    for template in (rc["spec"]["headGroupSpec"]["template"], rc["spec"]["workerGroupSpecs"][0]["template"]):
        container = template["spec"]["containers"][0]
        assert container["readinessProbe"]["exec"]["command"] == ["true"]
        assert container["livenessProbe"]["exec"]["command"] == ["true"]


def test_sagemaker_head_done_first_waits_for_its_peers() -> None:
    """KubeRay deletes the succeeded head at once (the finalizer holds it): in sagemaker mode that is no failed
    head; the job is DONE once every instance succeeded."""
    job = _job(targetInstances=3, mode="sagemaker")
    running = job.model_copy(update={"status": _status(JobPhase.RUNNING)})

    def status(*pods: PodView) -> MLJobStatus:
        return compute_job_status(running, Observed(pods=list(pods), now=T0, backend=Backend.KUBERAY,
                                                    kuberay_installed=True))

    st = status(_pod(0, "Succeeded", deleting=True), _pod(1), _pod(2))
    assert st.phase is JobPhase.RUNNING, st.message
    st = status(_pod(0, "Succeeded", deleting=True), _pod(1, "Succeeded", deleting=True), _pod(2, "Succeeded"))
    assert (st.phase, st.reason) == (JobPhase.DONE, "Completed")
    st = status(_pod(0, "Succeeded", deleting=True), _pod(1, "Failed"), _pod(2))
    assert (st.phase, st.reason) == (JobPhase.FAILED, "InstanceFailed")
