"""ComputePool: a named, cluster-scoped pool of nodes of one instance family (Snowflake's
`CREATE COMPUTE POOL ... MIN_NODES MAX_NODES INSTANCE_FAMILY`). Pure pydantic: the CRD is generated from it."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import Field
from pydantic.config import JsonDict

from kubepool.api.common import (
    LABEL_VALUE_PATTERN,
    NAME_MAX,
    QUALIFIED_NAME_PATTERN,
    Condition,
    Model,
    Quantity,
    Toleration,
)
from kubepool.api.families import FAMILIES, FamilySize, InstanceFamily


class InstanceResources(Model):
    """Explicit resources of one instance, instead of (or overriding) the family's."""

    cpu: Quantity | None = Field(None, description="CPU of one instance, e.g. \"3\" or \"500m\".")
    memory: Quantity | None = Field(None, description="Memory of one instance, e.g. \"13Gi\".")
    gpu: int | None = Field(None, ge=0, le=16, description="GPUs of one instance (the operator's accelerator resource, nvidia.com/gpu by default).")

# nodeSelector keys are label keys: anything else makes the API server refuse every instance pod of the pool.
NODE_SELECTOR_KEY_RULE: JsonDict = {"rule": "self.all(k, size(k) <= 317 && k.matches(" + repr(QUALIFIED_NAME_PATTERN) + "))",
                          "message": "nodeSelector keys must be label keys ([prefix/]name)"}


class ComputePoolSpec(Model):
    """Desired state of a ComputePool."""

    instance_family: InstanceFamily | None = Field(
        None, description="Instance family (CPU_X64_XS … GPU_NV_L); sets each instance's cpu, memory and GPUs."
    )
    resources: InstanceResources | None = Field(
        None, description="Per-instance resources; overrides the family's values field by field."
    )
    min_nodes: int = Field(
        1, ge=0, le=1000,
        description="Nodes kept warm for the pool (MIN_NODES): while fewer instances are in use, the operator keeps "
                    "low-priority placeholder pods of one instance's size on that many more nodes; instances pre-empt them.",
    )
    max_nodes: int = Field(1, ge=1, le=1000, description="At most this many instances of the pool's jobs run at once (MAX_NODES).")
    node_selector: dict[str, str] = Field(
        default_factory=dict,
        json_schema_extra={"maxProperties": 32, "additionalProperties": {"type": "string", "maxLength": NAME_MAX, "pattern": LABEL_VALUE_PATTERN},
                           "x-kubernetes-validations": [NODE_SELECTOR_KEY_RULE]},
        description="Labels a node must have to run the pool's instances.",
    )
    tolerations: list[Toleration] = Field(
        default_factory=list, max_length=32, description="Tolerations copied onto every instance pod."
    )
    image: str | None = Field(
        None, max_length=512, pattern=r"^\S+$",
        description="Runtime image of the pool's instances (and of its warm placeholders, so nodes have it pulled) "
                    "unless a job sets spec.image; default the operator's image for the pool's hardware: its GPU "
                    "image (operator.gpuRuntimeImage) when an instance has GPUs, else its runtime image.",
    )
    auto_suspend_seconds: int | None = Field(
        None, ge=0, le=2592000,
        description="Suspend the pool after this many seconds without admitted or queued jobs (AUTO_SUSPEND_SECS): "
                    "status shows SUSPENDED and the warm nodes are released; a new job resumes it (AUTO_RESUME). "
                    "Unset or 0: never.",
    )
    suspend: bool = Field(False, description="Suspended pools admit no new jobs; running jobs finish.")

    cel_rules = [
        {"rule": "self.minNodes <= self.maxNodes", "message": "minNodes must not exceed maxNodes"},
        # `resources: {}` is set, but sizes nothing: without a family, an instance would silently get 1 CPU and 1Gi.
        {"rule": "has(self.instanceFamily) || (has(self.resources) && has(self.resources.cpu) && has(self.resources.memory))",
         "message": "set instanceFamily or resources (without instanceFamily, resources must set cpu and memory)",
         "fieldPath": ".resources"},
    ]

    def instance_size(self) -> FamilySize:
        """One instance's resources: the family's, overridden by `resources`."""
        base = FAMILIES[self.instance_family] if self.instance_family else FamilySize("1", "1Gi")
        r = self.resources or InstanceResources()
        return FamilySize(
            cpu=r.cpu or base.cpu,
            memory=r.memory or base.memory,
            gpus=base.gpus if r.gpu is None else r.gpu,
            gpu_type=base.gpu_type,
        )


class PoolPhase(StrEnum):
    IDLE = "IDLE"
    ACTIVE = "ACTIVE"
    SUSPENDED = "SUSPENDED"


class ComputePoolStatus(Model):
    """Observed state of a ComputePool."""

    phase: PoolPhase | None = Field(
        None, description="IDLE (no instances), ACTIVE (instances running) or SUSPENDED (spec.suspend, or idle for "
                          "autoSuspendSeconds).")
    ready_nodes: int = Field(0, description="Ready nodes matching the pool's selector and tolerations.")
    instances_in_use: int = Field(0, description="Instances of admitted jobs counted against maxNodes.")
    running_jobs: int = Field(0, description="Admitted jobs.")
    queued_jobs: int = Field(0, description="Jobs waiting for capacity.")
    warm_instances: int = Field(0, description="Placeholder pods Running: nodes held warm for the next instances (minNodes).")
    idle_since: datetime | None = Field(
        None, description="Since when the pool has had no admitted or queued jobs; unset while it has some. "
                          "autoSuspendSeconds counts from here, across operator restarts.")
    conditions: list[Condition] = Field(default_factory=list, max_length=16, description="Pool conditions.")
    observed_generation: int | None = Field(None, description="Spec generation this status reflects.")


class ComputePool(Model):
    """A pool of nodes that runs MLJob instances, one instance per node."""

    api_version: str = "kubepool.dev/v1alpha1"
    kind: str = "ComputePool"
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: ComputePoolSpec
    status: ComputePoolStatus | None = None

