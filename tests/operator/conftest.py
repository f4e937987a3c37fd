"""Fixtures of the operator's cluster tests: the CRDs applied once, the operator (see operator_cluster), and
ComputePools created and removed per test."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml
from operator_fixtures import apply, crds, operator  # noqa: F401 - shared fixtures, registered here


@pytest.fixture
def compute_pool(kubectl: Any, crds: None) -> Iterator[Callable[..., str]]:
    """Creates cluster-scoped ComputePools with unique names; deletes them after the test."""
    made: list[str] = []

    def _make(kind: str = "cpu", max_nodes: int = 3, **spec: Any) -> str:
        name = f"op-{kind}-{uuid.uuid4().hex[:6]}"
        body: dict[str, Any] = {"instanceFamily": "CPU_X64_S" if kind == "cpu" else "GPU_NV_S", "minNodes": 0,
                                "maxNodes": max_nodes, "nodeSelector": {"kubepool.dev/node-pool": kind}}
        if kind == "gpu":
            body["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
        obj = {"apiVersion": "kubepool.dev/v1alpha1", "kind": "ComputePool", "metadata": {"name": name},
               "spec": {**body, **spec}}
        kubectl("apply", "-f", "-", input=yaml.safe_dump(obj), check=True)
        made.append(name)
        return name

    yield _make
    for name in made:
        kubectl("delete", "computepool", name, "--wait=false")


