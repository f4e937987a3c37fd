"""Fixtures of the examples' end-to-end suite: the example ComputePools applied from examples/computepools.yaml,
and per backend (a module-scoped parameter, so pytest runs every pods case, then every kuberay case) a
namespace and kubepool's operator watching it; for kuberay also the real ray-operator (tests/kuberay's shared
fixtures, which fail when KubeRay cannot be built: `make test` builds it first)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from kubepool import naming
from support.examplekit import BACKENDS, EXAMPLES, Env
from support.operator_cluster import Operator, get_json, wait_for


@pytest.fixture(scope="module")
def example_pools(kubectl: Any, crds: None) -> Iterator[list[str]]:
    """`kubectl apply -f examples/computepools.yaml`, as the examples' README says; the pools are deleted
    afterwards only if they did not exist before (a developer's `make demo` uses them too)."""
    names = ["cpu-pool", "gpu-pool"]
    existed = {n for n in names if kubectl("get", "computepool", n).returncode == 0}
    kubectl("apply", "-f", str(EXAMPLES / "computepools.yaml"), check=True)
    yield names
    for name in set(names) - existed:
        kubectl("delete", "computepool", name, "--wait=false")


@pytest.fixture(scope="module", params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _delete_jobs(kubectl: Any, ns: str) -> None:
    # While the operators still run: KubeRay's pods carry kubepool's finalizer, which only the operator removes.
    kubectl("delete", "mljobs", "--all", "-n", ns, "--wait=true")

    def left() -> list[str]:  # the pool's warm placeholders (no job label) may stay
        pods = get_json(kubectl, ns, "pods", "-l", naming.LABEL_JOB)["items"]
        return [f"{p['metadata']['name']} ({p['status'].get('phase')})" for p in pods]

    try:
        wait_for(lambda: not left(), 120, f"no job pods left in {ns}")
    except AssertionError as e:
        raise AssertionError(f"{e}: {left()}") from None


@pytest.fixture(scope="module")
def env(request: pytest.FixtureRequest, backend: str, cluster: Any, kubectl: Any, example_pools: list[str],
        tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    if backend == "kuberay":
        request.getfixturevalue("ray_operator")
        ns = request.getfixturevalue("kuberay_namespace")
        yield Env(backend, ns, request.getfixturevalue("kubepool_operator"))
        _delete_jobs(kubectl, ns)
        return
    with kubectl.fresh_namespace(f"t-examples-{uuid.uuid4().hex[:6]}") as ns:
        op = Operator(cluster.kubeconfig, ns, tmp_path_factory.mktemp("operator") / "operator.log")
        op.start()
        try:
            yield Env(backend, ns, op)
            _delete_jobs(kubectl, ns)
        finally:
            op.stop()
