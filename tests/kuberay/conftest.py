"""Fixtures of the KubeRay backend's cluster tests: the shared KubeRay fixtures (support.kuberay_fixtures: CRDs, a
namespace, the real ray-operator and kubepool's operator, per module) and a ComputePool of the module."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from support.operator_fixtures import TEST_INSTANCE


@pytest.fixture(scope="module")
def cpu_pool(kubectl: Any, kuberay_crds: None) -> Iterator[str]:
    name = f"kr-cpu-{uuid.uuid4().hex[:6]}"
    obj = {"apiVersion": "kubepool.dev/v1alpha1", "kind": "ComputePool", "metadata": {"name": name},
           "spec": {"instanceFamily": "CPU_X64_S", "minNodes": 0, "maxNodes": 3, "resources": dict(TEST_INSTANCE),
                    "nodeSelector": {"kubepool.dev/node-pool": "cpu"}}}
    kubectl("apply", "-f", "-", input=yaml.safe_dump(obj), check=True)
    try:
        yield name
    finally:
        kubectl("delete", "computepool", name, "--wait=false")
