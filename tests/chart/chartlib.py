"""Helpers shared by the chart tests (paths, running helm); the fixtures are in conftest.py."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "kubepool"
EXAMPLES = REPO / "examples"
# `helm template` has no cluster to ask; the chart's kubeVersion needs one that satisfies it.
KUBE_VERSION = "1.36.0"
RELEASE, NAMESPACE = "kp", "kubepool-system"


def run_helm(helm: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([helm, *args], capture_output=True, text=True, timeout=timeout)


def by_kind(objs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objs if o["kind"] == kind]
