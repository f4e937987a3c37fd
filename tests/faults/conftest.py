"""Fixtures of the fault suite: the CRDs, the operator subprocess (kill it, restart it), a small-footprint
ComputePool factory (tiny resources so many instances share the three local CPU nodes) and a Recorder that
watches the namespace's MLJobs and pods for the whole test. Reuses tests/operator/operator_cluster."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "operator"))

from faultkit import Recorder  # noqa: E402
from operator_cluster import ROOT, Operator  # noqa: E402


@pytest.fixture(scope="session")
def crds(kubectl: Any) -> None:
    kubectl("apply", "--server-side", "--force-conflicts", "-f", str(ROOT / "crds"), check=True)
    for name in ("mljobs.kubepool.dev", "computepools.kubepool.dev"):
        kubectl.wait_established(f"{name}")


@pytest.fixture
def operator(cluster: Any, crds: None, namespace: str, tmp_path: Path) -> Iterator[Operator]:
    op = Operator(cluster.kubeconfig, namespace, tmp_path / "operator.log")
    op.start()
    try:
        yield op
    finally:
        op.stop()


@pytest.fixture
def apply(kubectl: Any, namespace: str) -> Callable[[dict[str, Any]], None]:
    def _apply(obj: dict[str, Any]) -> None:
        kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(obj), check=True)

    return _apply


@pytest.fixture
def small_pool(kubectl: Any, crds: None) -> Iterator[Callable[..., str]]:
    """Cluster-scoped ComputePools of tiny instances on the CPU nodes (one instance of a pool per node)."""
    made: list[str] = []

    def _make(max_nodes: int = 3, **spec: Any) -> str:
        name = f"fault-{uuid.uuid4().hex[:6]}"
        body = {"resources": {"cpu": "50m", "memory": "64Mi"}, "minNodes": 0, "maxNodes": max_nodes,
                "nodeSelector": {"kubepool.dev/node-pool": "cpu"}, **spec}
        obj = {"apiVersion": "kubepool.dev/v1alpha1", "kind": "ComputePool", "metadata": {"name": name}, "spec": body}
        kubectl("apply", "-f", "-", input=yaml.safe_dump(obj), check=True)
        made.append(name)
        return name

    yield _make
    for name in made:
        kubectl("delete", "computepool", name, "--wait=false")


@pytest.fixture
def recorder(kubectl: Any, namespace: str) -> Iterator[Recorder]:
    rec = Recorder(kubectl, namespace).start()
    try:
        yield rec
    finally:
        rec.stop()
