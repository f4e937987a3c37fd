"""What the examples' suite and its conftest share (a plain module, so the test file imports it by name)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "operator"))
from operator_cluster import ROOT, Operator  # noqa: E402

EXAMPLES = ROOT / "examples"
BACKENDS = ["pods", "kuberay"]


@dataclass(frozen=True)
class Env:
    """Where a backend's cases run: the namespace kubepool's operator (and for kuberay the ray-operator) watches."""

    backend: str
    namespace: str
    operator: Operator
