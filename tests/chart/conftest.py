"""Fixtures for the chart tests: the pinned helm binary and `render` (helm template, no cluster)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import yaml
from chartlib import CHART, KUBE_VERSION, NAMESPACE, RELEASE, is_sagemaker_api, run_helm

from kubepool.local import controlplane

Render = Callable[..., list[dict[str, Any]]]


@pytest.fixture(scope="session")
def helm() -> str:
    """The helm built by hack/k8s-bin/build.sh (a no-op when cached)."""
    return str(controlplane.ensure_binaries(say=lambda _: None) / "helm")


@pytest.fixture(scope="session")
def render(helm: str) -> Render:
    """`render(*helm_args)` → the rendered objects, without the `helm test` hooks (test_chart_smoke renders
    those) and, unless `sagemaker_api`, without the SageMaker API server's objects (the operator's alone: they
    have tests of their own, test_chart_sagemaker_api); fails the test if helm fails."""

    def _render(*args: str, sagemaker_api: bool = False) -> list[dict[str, Any]]:
        proc = run_helm(helm, "template", RELEASE, str(CHART), "--namespace", NAMESPACE, "--kube-version", KUBE_VERSION,
                        "--skip-tests", *args)
        assert proc.returncode == 0, proc.stderr
        objs = [d for d in yaml.safe_load_all(proc.stdout) if d]
        return objs if sagemaker_api else [o for o in objs if not is_sagemaker_api(o)]

    return _render
