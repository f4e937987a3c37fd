"""KubeRay fixtures shared by every suite that runs the KubeRay backend (tests/kuberay, tests/examples), all
per module (a Ray cluster costs minutes on this machine): KubeRay's CRDs applied server-side, a namespace
(`kuberay_namespace`; a suite may override it), the real ray-operator (built by hack/kuberay/build.sh) running
as a local process for that namespace, and kubepool's operator. Skips with the reason when the build fails.
tests/conftest.py registers them (`pytest_plugins`)."""

from __future__ import annotations

import os
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.operator_cluster import ROOT, Operator  # the operator tests' subprocess harness

RAY_OPERATOR_START_S = 60.0
# kubepool's runtime waits for the head itself, and local nodes resolve only pod hostnames (no Service DNS), so
# KubeRay's `wait-gcs-ready` init container (polling `<cluster>-head-svc`) would never finish here.
# RayMultiHostIndexing labels worker pods with their replica index, which kubepool's instance ids derive from.
RAY_OPERATOR_ENV = {"ENABLE_INIT_CONTAINER_INJECTION": "false"}
RAY_OPERATOR_FLAGS = ["--enable-leader-election=false", "--feature-gates=RayMultiHostIndexing=true"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def kuberay_dir() -> Path:
    try:
        out = subprocess.run([str(ROOT / "hack/kuberay/build.sh")], capture_output=True, text=True, timeout=1800)
    except (OSError, subprocess.TimeoutExpired) as e:
        pytest.fail(f"hack/kuberay/build.sh could not run: {e}")
    if out.returncode != 0:
        pytest.fail(f"hack/kuberay/build.sh failed, no KubeRay operator to test against: {out.stderr.strip()[-400:]}")
    return Path(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def kuberay_crds(kubectl: Any, kuberay_dir: Path) -> None:
    # Server-side: the CRDs are too large for client-side apply's last-applied annotation.
    kubectl("apply", "--server-side", "--force-conflicts", "-f", str(kuberay_dir / "crds"), check=True)
    kubectl.wait_established("rayclusters.ray.io")
    kubectl("apply", "--server-side", "--force-conflicts", "-f", str(ROOT / "crds"), check=True)
    kubectl.wait_established("mljobs.kubepool.dev")


@pytest.fixture(scope="module")
def kuberay_namespace(kubectl: Any) -> Iterator[str]:
    with kubectl.fresh_namespace(f"t-kuberay-{uuid.uuid4().hex[:6]}") as name:
        yield name


@pytest.fixture(scope="module")
def ray_operator(cluster: Any, kuberay_crds: None, kuberay_dir: Path, kuberay_namespace: str,
                 tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """KubeRay's operator watching the module's namespace; yields its log file."""
    log_path = tmp_path_factory.mktemp("ray-operator") / "ray-operator.log"
    args = [str(kuberay_dir / "bin/ray-operator"), *RAY_OPERATOR_FLAGS, f"--watch-namespace={kuberay_namespace}",
            f"--metrics-addr=127.0.0.1:{_free_port()}", f"--health-probe-bind-address=127.0.0.1:{_free_port()}"]
    with log_path.open("ab") as log:
        proc = subprocess.Popen(args, env={**os.environ, "KUBECONFIG": str(cluster.kubeconfig), **RAY_OPERATOR_ENV},
                                stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + RAY_OPERATOR_START_S
        while "Starting workers" not in log_path.read_text(errors="replace"):
            assert proc.poll() is None, f"ray-operator exited:\n{log_path.read_text(errors='replace')[-3000:]}"
            assert time.monotonic() < deadline, f"ray-operator did not start:\n{log_path.read_text(errors='replace')[-3000:]}"
            time.sleep(0.3)
        yield log_path
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def kubepool_operator(cluster: Any, kuberay_crds: None, kuberay_namespace: str,
                      tmp_path_factory: pytest.TempPathFactory) -> Iterator[Operator]:
    op = Operator(cluster.kubeconfig, kuberay_namespace, tmp_path_factory.mktemp("operator") / "operator.log")
    op.start()
    try:
        yield op
    finally:
        op.stop()
