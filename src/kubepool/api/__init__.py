"""The kubepool.dev/v1alpha1 API: pydantic models that are the single source of the CRDs."""

from kubepool.api.common import Condition, ConditionStatus, Toleration
from kubepool.api.computepool import (
    ComputePool,
    ComputePoolSpec,
    ComputePoolStatus,
    InstanceResources,
    PoolPhase,
)
from kubepool.api.families import FAMILIES, FamilySize, InstanceFamily
from kubepool.api.mljob import (
    Backend,
    Channel,
    ChannelSource,
    CodeSource,
    Entrypoint,
    GroupInstanceIds,
    InstanceGroup,
    InstanceLayout,
    InstanceStatus,
    JobPhase,
    MLJob,
    MLJobSpec,
    MLJobStatus,
)
from kubepool.api.podsettings import EnvVar, PodSettings

__all__ = [
    "FAMILIES", "Backend", "Channel", "ChannelSource", "CodeSource", "ComputePool", "ComputePoolSpec",
    "ComputePoolStatus", "Condition", "ConditionStatus", "Entrypoint", "EnvVar", "FamilySize", "GroupInstanceIds",
    "InstanceFamily", "InstanceGroup", "InstanceLayout", "InstanceResources", "InstanceStatus", "JobPhase", "MLJob", "MLJobSpec", "MLJobStatus",
    "PodSettings", "PoolPhase", "Toleration",
]
