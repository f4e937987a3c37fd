"""Fixtures every suite that runs the operator shares (operator, faults, SDK): the CRDs applied once, the
operator subprocess for the test's namespace (see operator_cluster), and `apply` for manifests. Conftests
import them by name, which registers them."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from operator_cluster import ROOT, Operator


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
