"""SDK test fixtures: `fake_kube` (every SDK entry point talks to an in-memory cluster), Snowflake's `wheel` and,
for the end-to-end tests, the operator and ComputePools (support.operator_fixtures, registered by tests/conftest.py)."""

from __future__ import annotations

import zipfile
from collections.abc import Iterator

import pytest
from fakes import FakeKube

from support import snowflake_wheel


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


@pytest.fixture(scope="module")
def wheel() -> zipfile.ZipFile:
    """snowflake-ml-python 2.6.0's wheel (downloaded once into ~/.cache/kubepool/wheels): the published code the
    SDK's names and results are checked against."""
    return zipfile.ZipFile(snowflake_wheel.wheel_path())
