"""`make release` and the binaries' build refuse bad input before building anything, saying what they want."""

from __future__ import annotations

import os
import subprocess

import pytest

from kubepool.local.layout import REPO_ROOT

RELEASE = REPO_ROOT / "hack" / "release" / "release.sh"


def _release(**env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(RELEASE)], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "HELM": "/nonexistent/helm", **env})


@pytest.mark.parametrize("registry", ["", "ghcr.io", "https://ghcr.io/kubepool", "ghcr.io/Kubepool"])
def test_release_needs_a_registry_path(registry: str) -> None:
    proc = _release(REGISTRY=registry)
    assert proc.returncode == 2 and "REGISTRY=host[:port]/path is required" in proc.stderr, proc.stderr


def test_release_publishes_only_a_known_runtime_build() -> None:
    proc = _release(REGISTRY="127.0.0.1:5000/kubepool", RUNTIME_IMAGE="runtime-cuda")
    assert proc.returncode == 2 and "RUNTIME_IMAGE is runtime or runtime-lean" in proc.stderr, proc.stderr


def test_another_kubernetes_needs_its_wrapper_module() -> None:
    proc = subprocess.run(["bash", str(REPO_ROOT / "hack" / "k8s-bin" / "build.sh")], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "KUBEPOOL_KUBE_VERSION": "v1.29.0"})
    assert proc.returncode == 2 and "no wrapper module requires k8s.io/kubernetes v1.29.0" in proc.stderr, proc.stderr
