"""Builds the KubeRay RayCluster of a job attempt (`spec.backend: kuberay`). Pure.

The head group is instance 0; each instance group gets one worker group holding its instances other than the
head (the first group's workers start at instance 1). Replicas are the granted instances, min the instances
inside the job's minInstances, max the group's full count. Pod templates are the pod backend's instance pods,
so the runtime contract, pool selector, tolerations, anti-affinity, resources, security and the job's pod settings
(env, volumes, ServiceAccount, labels, annotations, affinity, tolerations, priority class: per group, since each
group has its own worker group) are identical, and
every container runs kubepool's runtime (`python -m kubepool.runtime`), not KubeRay's generated
`ray start --block` (annotation `ray.io/overwrite-container-cmd`): the runtime starts Ray itself, runs the gate
and the payload on the head, and releases the workers, exactly as with the pod backend.

KubeRay names worker pods itself, so a worker template carries its group's first instance id and Ray port
offset; the pod's `ray.io/worker-group-replica-index` label (downward API) shifts both at start
(`contract.resolve_replica_index`), to the index-th of the group's ids where the template lists them (a resized
job's group, whose new instances took new ids). The operator maps pods to instances the same way
(`observed.PodView`).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence

from kubepool import contract, naming
from kubepool.api import ComputePool, MLJob
from kubepool.api.kuberay import (
    ANNOTATION_OVERWRITE_CMD,
    LABEL_REPLICA_INDEX,
    HeadGroupSpec,
    RayCluster,
    RayClusterSpec,
    ScaleStrategy,
    WorkerGroupSpec,
)
from kubepool.controller.builders.common import (
    JobRef,
    Obj,
    Placement,
    laid_out,
    local_port_shift,
    pool_named,
)
from kubepool.controller.builders.pods import build_instance_pod, joined_check
from kubepool.controller.config import OperatorConfig

# A pod is Ready once its Ray node is up (the runtime's ready marker under Ray's --temp-dir). Our own probes
# also keep KubeRay from injecting its probes on fixed ports that local nodes shift.
_PROBE_PERIOD_SECONDS = 5
_LIVENESS_FAILURES = 6
_STARTUP_FAILURES = 86400 // _PROBE_PERIOD_SECONDS  # a day to join


def raycluster_name(job: str) -> str:
    """The RayCluster is named after the job (KubeRay derives `<name>-head-svc` and pod names from it)."""
    return job


def worker_group_name(group: str) -> str:
    return naming.dns_label(group)


def _probes(container: Obj, job: MLJob, group: str) -> None:
    # Ready = joined, as on the pod backend (pods.joined_check); parallel and sagemaker modes start no Ray node:
    # a running container is a ready instance.
    check = joined_check(job, group) or ["true"]
    ready = {"exec": {"command": check}, "periodSeconds": _PROBE_PERIOD_SECONDS, "timeoutSeconds": 2}
    container["readinessProbe"] = ready
    # Liveness only once the node has joined (the startup probe holds it back): the instances timeout counts from
    # the launcher's wait, after pip install and downloads of any length, so no fixed delay fits. A node that never
    # joins is the head's gate's to fail. After that, a lost node restarts nothing (restartPolicy Never) but tells
    # KubeRay the pod is gone.
    container["startupProbe"] = {**ready, "failureThreshold": _STARTUP_FAILURES}
    container["livenessProbe"] = {**ready, "failureThreshold": _LIVENESS_FAILURES}


def _template(job: MLJob, pool: ComputePool, inst: Placement, *, attempt: int, cfg: OperatorConfig,
              head: bool, ids: list[int] | None = None) -> Obj:
    pod = build_instance_pod(job, pool, inst, attempt=attempt, cfg=cfg)
    meta, spec = pod["metadata"], copy.deepcopy(pod["spec"])
    labels = dict(meta["labels"])
    container = spec["containers"][0]
    _probes(container, job, inst.group)
    if not head:
        # One template for all replicas: no per-pod hostname; the replica index picks the instance.
        spec.pop("hostname", None)
        labels.pop(naming.LABEL_INSTANCE, None)
        labels[naming.LABEL_INSTANCE_BASE] = str(inst.instance_id)
        container["env"].append({"name": contract.ENV_REPLICA_INDEX, "valueFrom": {"fieldRef": {
            "fieldPath": f"metadata.labels['{LABEL_REPLICA_INDEX}']"}}})
        if cfg.ray_port_stride:
            container["env"].append({"name": contract.ENV_RAY_PORT_STRIDE, "value": str(cfg.ray_port_stride)})
        if ids and ids != list(range(ids[0], ids[0] + len(ids))):
            # A resized group's ids have gaps: the replica index picks its id from the list. A grow appends to
            # it and a shrink drops its tail, so a pod made from an older template still reads its own id.
            listed = ",".join(map(str, ids))
            container["env"].append({"name": contract.ENV_INSTANCE_IDS, "value": listed})
            meta = {**meta, "annotations": {**(meta.get("annotations") or {}), naming.ANNOTATION_INSTANCE_IDS: listed}}
    # KubeRay owns its pods (owner reference to the RayCluster) and names them; the finalizer keeps a terminated
    # pod (and its exit) until the operator has seen it.
    # The job's pod annotations go with the labels (the pod settings in the spec came with the pod).
    annotations = {"annotations": dict(meta["annotations"])} if meta.get("annotations") else {}
    return {"metadata": {"labels": labels, **annotations, "finalizers": [naming.POD_FINALIZER]}, "spec": spec}


def build_raycluster(job: MLJob, pools: dict[str, ComputePool], *, granted: int, attempt: int,
                     cfg: OperatorConfig, workers_to_delete: Mapping[str, list[str]] | None = None,
                     layout: Sequence[Placement] | None = None) -> Obj:
    """The job's RayCluster for `granted` instances (a prefix that contains the head). `workers_to_delete`:
    per worker group name, its pods beyond the grant (a shrink), which KubeRay deletes instead of random ones."""
    doomed = workers_to_delete or {}
    ref = JobRef.of(job)
    placement = laid_out(job, layout)
    head = placement[0]
    granted_ids = {p.instance_id for p in placement[:granted]}
    minimum_ids = {p.instance_id for p in placement[:job.spec.resolved_min()]}
    groups: list[WorkerGroupSpec] = []
    for name in dict.fromkeys(p.group for p in placement):
        workers = sorted((p for p in placement if p.group == name and p.instance_id != 0), key=lambda p: p.rank)
        if not workers:
            continue  # a one-instance first group is just the head
        first = workers[0]
        # The grant is a prefix in id order; inside a group, id order is rank order (new ids are always higher),
        # so the granted workers are replica indexes 0..replicas-1, the ones KubeRay fills first.
        replicas = sum(1 for p in workers if p.instance_id in granted_ids)
        group = worker_group_name(name)
        groups.append(WorkerGroupSpec(
            group_name=group, replicas=replicas,
            min_replicas=min(replicas, sum(1 for p in workers if p.instance_id in minimum_ids)), max_replicas=len(workers),
            template=_template(job, pool_named(pools, first.pool), first, attempt=attempt, cfg=cfg, head=False,
                               ids=[p.instance_id for p in workers]),
            scale_strategy=ScaleStrategy(workers_to_delete=sorted(doomed[group])) if doomed.get(group) else None,
        ))
    # KubeRay's worker init container waits on the head's GCS at `port`, and sets RAY_ADDRESS from it.
    gcs_port = naming.RAY_GCS_PORT + local_port_shift(ref.uid, cfg.ray_port_stride)  # as in the job's contract
    spec = RayClusterSpec(
        head_group_spec=HeadGroupSpec(
            ray_start_params={"port": str(gcs_port)},
            template=_template(job, pool_named(pools, head.pool), head, attempt=attempt, cfg=cfg, head=True)),
        worker_group_specs=groups,
    )
    meta = ref.metadata(raycluster_name(ref.name))
    meta["annotations"] = {ANNOTATION_OVERWRITE_CMD: "true"}
    return RayCluster(metadata=meta, spec=spec).wire()

