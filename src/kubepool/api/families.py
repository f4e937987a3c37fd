"""The instance-family catalog, modelled on Snowflake's compute pool families: what one instance of a
family gets (one instance takes one node of its family). Pure data."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class InstanceFamily(StrEnum):
    CPU_X64_XS = "CPU_X64_XS"
    CPU_X64_S = "CPU_X64_S"
    CPU_X64_M = "CPU_X64_M"
    CPU_X64_L = "CPU_X64_L"
    HIGHMEM_X64_S = "HIGHMEM_X64_S"
    HIGHMEM_X64_M = "HIGHMEM_X64_M"
    HIGHMEM_X64_L = "HIGHMEM_X64_L"
    GPU_NV_S = "GPU_NV_S"
    GPU_NV_M = "GPU_NV_M"
    GPU_NV_L = "GPU_NV_L"


@dataclass(frozen=True)
class FamilySize:
    cpu: str
    memory: str
    gpus: int = 0
    gpu_type: str = ""


# Resources available to one instance (what Snowflake gives the job's container on one node).
FAMILIES: dict[InstanceFamily, FamilySize] = {
    InstanceFamily.CPU_X64_XS: FamilySize("1", "6Gi"),
    InstanceFamily.CPU_X64_S: FamilySize("3", "13Gi"),
    InstanceFamily.CPU_X64_M: FamilySize("6", "28Gi"),
    InstanceFamily.CPU_X64_L: FamilySize("28", "116Gi"),
    InstanceFamily.HIGHMEM_X64_S: FamilySize("6", "58Gi"),
    InstanceFamily.HIGHMEM_X64_M: FamilySize("28", "240Gi"),
    InstanceFamily.HIGHMEM_X64_L: FamilySize("124", "984Gi"),
    InstanceFamily.GPU_NV_S: FamilySize("6", "27Gi", 1, "A10G"),
    InstanceFamily.GPU_NV_M: FamilySize("44", "178Gi", 4, "A10G"),
    InstanceFamily.GPU_NV_L: FamilySize("92", "1112Gi", 8, "A100"),
}

GPU_RESOURCE = "nvidia.com/gpu"
