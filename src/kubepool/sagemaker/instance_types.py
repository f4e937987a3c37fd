"""Which compute pool a SageMaker `instance_type` runs on.

An `instance_type` without the `ml.` prefix is taken as a ComputePool name. A SageMaker type
(`ml.<family>.<size>`) maps to a kubepool instance family, and the job runs on the ComputePool of that family
(`spec.instanceFamily`; the first by name when there are several):

| SageMaker type                                            | instance family |
|-----------------------------------------------------------|-----------------|
| c*, m*, t* with ≤ 2 vCPU (`large` and smaller)             | CPU_X64_XS      |
| c*, m*, t* with 4 vCPU (`xlarge`)                          | CPU_X64_S       |
| c*, m*, t* with 8–16 vCPU (`2xlarge`, `4xlarge`)           | CPU_X64_M       |
| c*, m*, t* with more (`8xlarge` and larger, `metal`)       | CPU_X64_L       |
| r*, x*, z* with ≤ 8 vCPU                                   | HIGHMEM_X64_S   |
| r*, x*, z* with 16–32 vCPU                                 | HIGHMEM_X64_M   |
| r*, x*, z* with more                                       | HIGHMEM_X64_L   |
| 1 GPU: g4dn/g5/g6/g6e other sizes, p3.2xlarge              | GPU_NV_S        |
| 4 GPUs: g4dn/g5/g6/g6e .12xlarge/.24xlarge, p3.8xlarge     | GPU_NV_M        |
| 8 GPUs: g5/g6/g6e.48xlarge, p3.16xlarge, p3dn, p4d, p4de, p5 | GPU_NV_L      |

(vCPU of a size: `large` = 2, `xlarge` = 4, `<n>xlarge` = 4n.) Any other type is refused with a message
that says to pass a pool name instead.
"""

from __future__ import annotations

import re

from kubepool.api import InstanceFamily
from kubepool.kube.sync import Kube

_TYPE = re.compile(r"^ml\.(?P<family>[a-z0-9-]+)\.(?P<size>[a-z0-9]+)$")
_SMALL_SIZES = {"nano": 2, "micro": 2, "small": 2, "medium": 2, "large": 2, "xlarge": 4, "metal": 96}
_ONE_GPU_FAMILIES = frozenset({"g4dn", "g5", "g6", "g6e"})
_GPU_TYPES: dict[str, InstanceFamily] = {
    "ml.p3.2xlarge": InstanceFamily.GPU_NV_S,
    "ml.p3.8xlarge": InstanceFamily.GPU_NV_M,
    "ml.p3.16xlarge": InstanceFamily.GPU_NV_L,
    "ml.p3dn.24xlarge": InstanceFamily.GPU_NV_L,
    "ml.p4d.24xlarge": InstanceFamily.GPU_NV_L,
    "ml.p4de.24xlarge": InstanceFamily.GPU_NV_L,
    "ml.p5.48xlarge": InstanceFamily.GPU_NV_L,
    **{f"ml.{f}.{s}": InstanceFamily.GPU_NV_M for f in _ONE_GPU_FAMILIES for s in ("12xlarge", "24xlarge")},
    **{f"ml.{f}.48xlarge": InstanceFamily.GPU_NV_L for f in _ONE_GPU_FAMILIES},
}


def _vcpus(size: str) -> int | None:
    if size in _SMALL_SIZES:
        return _SMALL_SIZES[size]
    m = re.fullmatch(r"(\d+)xlarge", size)
    return 4 * int(m.group(1)) if m else None


def is_sagemaker_type(instance_type: str) -> bool:
    return instance_type.startswith("ml.")


def family_for(instance_type: str) -> InstanceFamily:
    """The kubepool instance family of a SageMaker instance type (see the module's table).

    Raises:
        ValueError: The type is not in the table.
    """
    if instance_type in _GPU_TYPES:
        return _GPU_TYPES[instance_type]
    m = _TYPE.match(instance_type)
    vcpus = _vcpus(m.group("size")) if m else None
    family = m.group("family") if m else ""
    if m and vcpus is not None:
        if family in _ONE_GPU_FAMILIES:
            return InstanceFamily.GPU_NV_S
        if family[0] in "cmt":
            if vcpus <= 2:
                return InstanceFamily.CPU_X64_XS
            if vcpus <= 4:
                return InstanceFamily.CPU_X64_S
            return InstanceFamily.CPU_X64_M if vcpus <= 16 else InstanceFamily.CPU_X64_L
        if family[0] in "rxz":
            if vcpus <= 8:
                return InstanceFamily.HIGHMEM_X64_S
            return InstanceFamily.HIGHMEM_X64_M if vcpus <= 32 else InstanceFamily.HIGHMEM_X64_L
    raise ValueError(f"instance type {instance_type!r} has no kubepool equivalent; pass a ComputePool name as "
                     "instance_type instead")


def resolve_pool(kube: Kube, instance_type: str) -> str:
    """The ComputePool an `instance_type` runs on: itself when it is a pool name, else the pool of its family.

    Raises:
        ValueError: No pool of the type's family exists, or the type is unknown.
    """
    if not is_sagemaker_type(instance_type):
        return instance_type
    family = family_for(instance_type)
    pools = sorted((p for p in kube.list_pools() if p.spec.instance_family == family),
                   key=lambda p: str(p.metadata.get("name", "")))
    if not pools:
        raise ValueError(f"no ComputePool of instance family {family} for {instance_type}: create one "
                         f"(spec.instanceFamily: {family}) or pass a pool name as instance_type")
    return str(pools[0].metadata["name"])
