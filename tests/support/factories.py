"""Builders of test objects for the operator's pure unit tests (plain data, no cluster)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from kubepool import naming
from kubepool.api import ComputePool, MLJob, MLJobStatus
from kubepool.controller.observed import PodView

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def pool(name: str = "cpu", family: str = "CPU_X64_S", max_nodes: int = 3, **spec: Any) -> ComputePool:
    return ComputePool.model_validate({
        "metadata": {"name": name, "generation": 1},
        "spec": {"instanceFamily": family, "maxNodes": max_nodes, "minNodes": 0, **spec},
    })


def gpu_pool(name: str = "gpu", max_nodes: int = 2) -> ComputePool:
    return pool(name, "GPU_NV_S", max_nodes, nodeSelector={"kubepool.dev/node-pool": "gpu"},
                tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}])


def job(name: str = "train", status: dict[str, Any] | None = None, created: str = "2026-01-01T12:00:00Z",
        **spec: Any) -> MLJob:
    body: dict[str, Any] = {
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "generation": 1,
                     "creationTimestamp": created},
        "spec": {"entrypoint": {"file": "main.py"}, **({} if "instanceGroups" in spec else {"computePool": "cpu"}), **spec},
    }
    if status is not None:
        body["status"] = status
    return MLJob.model_validate(body)


def with_status(j: MLJob, st: MLJobStatus) -> MLJob:
    return j.model_copy(update={"status": st})


def pod(instance_id: int, phase: str = "Running", ready: bool = True, attempt: int = 0, job_name: str = "train",
        message: str | None = None, exit_code: int | None = None) -> PodView:
    group = naming.DEFAULT_GROUP
    return PodView(name=naming.pod_name(job_name, group, instance_id, attempt), instance_id=instance_id,
                   attempt=attempt, job_uid=f"uid-{job_name}", phase=phase, ready=ready, message=message,
                   exit_code=exit_code, node=None if phase == "Pending" else f"node-{instance_id}")
