"""Fixtures of the fault suite: the CRDs, the operator subprocess (kill it, restart it), a small-footprint
ComputePool factory (tiny resources so many instances share the three local CPU nodes) and a Recorder that
watches the namespace's MLJobs and pods for the whole test. Reuses tests/support/operator_cluster.

The suite's operators run as the chart's ServiceAccount with the chart's RBAC (`operator_kubeconfig`), never as
cluster-admin: a right the code needs and the chart lacks fails the faults it matters for."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from faultkit import Recorder

from support.chart_account import chart_account_kubeconfig
from support.operator_cluster import Operator


@pytest.fixture(scope="session")
def operator_kubeconfig(cluster: Any, kubectl: Any, crds: None, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A kubeconfig of the chart's operator ServiceAccount (kopf peering and the leader-election Lease granted:
    tests run two replicas)."""
    return chart_account_kubeconfig(cluster, kubectl, tmp_path_factory.mktemp("account") / "kubeconfig",
                                    "--set", "operator.peering=true", "--set", "operator.leaderElection=true")


@pytest.fixture
def operator(operator_kubeconfig: Path, namespace: str, tmp_path: Path) -> Iterator[Operator]:
    op = Operator(operator_kubeconfig, namespace, tmp_path / "operator.log")
    op.start()
    try:
        yield op
    finally:
        op.stop()


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
