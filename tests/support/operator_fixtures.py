"""Fixtures every suite that runs the operator shares (operator, faults, SDK): the CRDs applied once, the
operator subprocess for the test's namespace (see operator_cluster), `apply` for manifests and
`compute_pool`, cluster-scoped ComputePools made and removed per test. tests/conftest.py registers them
(`pytest_plugins`)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubetest import cluster_turn
from support.operator_cluster import ROOT, Operator

# One instance of a test's cpu pool: half a local cpu node (4 CPUs, 16Gi), not its family's whole node. The suite's
# two workers run jobs side by side on the three cpu nodes, and a pool's instances go one per node: with whole-node
# instances, two tests' jobs each held some of the nodes and waited for the rest, a deadlock that only a gate's
# timeout ended (by failing one). Two instances of different pools now share a node; a pool still has one per node.
TEST_INSTANCE = {"cpu": "2", "memory": "6Gi"}


@pytest.fixture(scope="session")
def crds(cluster: Any, kubectl: Any) -> None:
    with cluster_turn(cluster.state_dir, exclusive=False):  # set up before any test's turn (support.chart_account)
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
def compute_pool(kubectl: Any, crds: None) -> Iterator[Callable[..., str]]:
    """Creates cluster-scoped ComputePools with unique names; deletes them after the test."""
    made: list[str] = []

    def _make(kind: str = "cpu", max_nodes: int = 3, whole_nodes: bool = False, **spec: Any) -> str:
        """`whole_nodes`: the family's own size, an instance per node (warm nodes, placeholders, preemption:
        tests of a node's occupancy, run alone)."""
        name = f"op-{kind}-{uuid.uuid4().hex[:6]}"
        body: dict[str, Any] = {"instanceFamily": "CPU_X64_S" if kind == "cpu" else "GPU_NV_S", "minNodes": 0,
                                "maxNodes": max_nodes, "nodeSelector": {"kubepool.dev/node-pool": kind}}
        if kind == "cpu" and not whole_nodes:
            body["resources"] = dict(TEST_INSTANCE)
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
