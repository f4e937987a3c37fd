"""SDK test fixtures: `fake_kube` (every SDK entry point talks to an in-memory cluster) and, for the
end-to-end tests, the operator and ComputePools (support.operator_fixtures)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fakes import FakeKube

from support.operator_fixtures import apply, compute_pool, crds, operator  # noqa: F401 - shared, registered here


@pytest.fixture
def fake_kube(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeKube]:
    kube = FakeKube()

    def connect(namespace: str | None = None, *, session: object = None, **_: object) -> FakeKube:
        if isinstance(session, FakeKube):  # a session made from it (`submit --dry-run`'s)
            return session
        if namespace:
            kube.namespace = namespace
        return kube

    for module in ("kubepool.jobs.manager", "kubepool.jobs.decorators", "kubepool.jobs.bundles", "kubepool.jobs.definitions",
                   "kubepool.sagemaker.estimator"):
        monkeypatch.setattr(f"{module}.connect", connect)
    yield kube
