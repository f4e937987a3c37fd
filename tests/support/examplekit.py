"""What the examples' suite and its conftest share (a plain module, so the test file imports it by name)."""

from __future__ import annotations

from dataclasses import dataclass

from support.operator_cluster import ROOT, Operator

EXAMPLES = ROOT / "examples"
BACKENDS = ["pods", "kuberay"]


@dataclass(frozen=True)
class Env:
    """Where a backend's cases run: the namespace kubepool's operator (and for kuberay the ray-operator) watches."""

    backend: str
    namespace: str
    operator: Operator
