"""Typed models of the parts of a KubeRay `ray.io/v1` RayCluster that kubepool writes (spec) and reads
(status). Field names come from KubeRay v1.6.1's CRD schema (`crds/ray.io_rayclusters.yaml`; a unit test
checks every field here exists there). Pod templates stay plain dicts: they are core PodTemplateSpecs that
the pod builders already produce. Pure pydantic, no client."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field

from kubepool import naming
from kubepool.api.common import Model
from kubepool.contract import replica_instance_id

RAY_GROUP = "ray.io"
RAY_VERSION = "v1"
RAY_API_VERSION = f"{RAY_GROUP}/{RAY_VERSION}"
RAYCLUSTER_KIND = "RayCluster"
RAYCLUSTER_PLURAL = "rayclusters"
RAYCLUSTER_CRD = f"{RAYCLUSTER_PLURAL}.{RAY_GROUP}"

# Labels KubeRay puts on every pod it creates (ray-operator/controllers/ray/utils/constant.go).
LABEL_CLUSTER = "ray.io/cluster"
LABEL_NODE_TYPE = "ray.io/node-type"  # head | worker
LABEL_GROUP = "ray.io/group"  # the worker group's name; "headgroup" on the head
# Set on worker pods when the operator runs with the RayMultiHostIndexing feature gate (alpha in v1.5.0, on by
# default from v1.6.0): 0..replicas-1, the lowest free index first. kubepool's instance ids derive from it.
LABEL_REPLICA_INDEX = "ray.io/worker-group-replica-index"
# On the RayCluster: KubeRay keeps our container command instead of generating `ray start ... --block`.
ANNOTATION_OVERWRITE_CMD = "ray.io/overwrite-container-cmd"


def kuberay_instance_id(labels: Mapping[str, str], annotations: Mapping[str, str] | None = None) -> int | None:
    """A KubeRay worker pod's instance id: KubeRay names worker pods itself from one template per group, so it is
    the template's first instance id (naming.LABEL_INSTANCE_BASE) moved by the pod's replica index (0.., lowest
    free first): the index-th of the template's ids where it lists them (naming.ANNOTATION_INSTANCE_IDS, a
    resized job), else base + index (contract.replica_instance_id, as the runtime reads it). None for any other pod."""
    base, index = labels.get(naming.LABEL_INSTANCE_BASE, ""), labels.get(LABEL_REPLICA_INDEX, "")
    if not (base.isdigit() and index.isdigit()):
        return None
    return replica_instance_id(int(base), int(index), (annotations or {}).get(naming.ANNOTATION_INSTANCE_IDS))


class HeadGroupSpec(Model):
    ray_start_params: dict[str, str] = Field(default_factory=dict)
    template: dict[str, Any]


class ScaleStrategy(Model):
    workers_to_delete: list[str] = Field(default_factory=list)


class WorkerGroupSpec(Model):
    group_name: str
    replicas: int
    min_replicas: int
    max_replicas: int
    ray_start_params: dict[str, str] = Field(default_factory=dict)
    template: dict[str, Any]
    # Without in-tree autoscaling KubeRay removes arbitrary pods when replicas drop; kubepool names the ones to go.
    scale_strategy: ScaleStrategy | None = None


class RayClusterSpec(Model):
    ray_version: str | None = None
    enable_in_tree_autoscaling: bool = False  # kubepool's admission and scale_cluster size the groups
    head_group_spec: HeadGroupSpec
    worker_group_specs: list[WorkerGroupSpec] = Field(default_factory=list)
    suspend: bool | None = None


class HeadInfo(Model):
    pod_name: str | None = None
    pod_ip: str | None = Field(None, alias="podIP")  # not to_camel's podIp
    service_name: str | None = None


class RayClusterStatus(Model):
    """What KubeRay reports; kubepool reads it for `kubectl describe`-level detail only, the job's status comes
    from the pods (the same code path as the pod backend)."""

    state: str | None = None
    ready_worker_replicas: int | None = None
    desired_worker_replicas: int | None = None
    head: HeadInfo | None = None


class RayCluster(Model):
    api_version: str = RAY_API_VERSION
    kind: str = RAYCLUSTER_KIND
    metadata: dict[str, Any]
    spec: RayClusterSpec
    status: RayClusterStatus | None = None
