"""SDK test fixtures: `fake_kube` (every SDK entry point talks to an in-memory cluster) and, for the
end-to-end tests, the operator engineer's `operator` fixture when tests/operator/conftest.py provides one."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakes import FakeKube

_OPERATOR_CONFTEST = Path(__file__).resolve().parents[1] / "operator" / "conftest.py"


def _is_fixture(obj: Any) -> bool:
    return type(obj).__name__ == "FixtureFunctionDefinition" or hasattr(obj, "_pytestfixturefunction")


def _operator_fixtures() -> dict[str, Any]:
    if not _OPERATOR_CONFTEST.is_file():
        return {}
    spec = importlib.util.spec_from_file_location("kubepool_tests_operator_conftest", _OPERATOR_CONFTEST)
    assert spec is not None and spec.loader is not None
    if str(_OPERATOR_CONFTEST.parent) not in sys.path:  # its helpers sit next to it, as pytest would find them
        sys.path.append(str(_OPERATOR_CONFTEST.parent))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return {k: v for k, v in vars(module).items() if _is_fixture(v) and k not in {"cluster", "kubectl", "namespace"}}


globals().update(_operator_fixtures())

if "operator" not in globals():

    @pytest.fixture
    def operator() -> None:
        pytest.skip("needs the `operator` fixture from tests/operator/conftest.py (not written yet)")


@pytest.fixture
def fake_kube(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeKube]:
    kube = FakeKube()

    def connect(namespace: str | None) -> FakeKube:
        if namespace:
            kube.namespace = namespace
        return kube

    for module in ("kubepool.jobs.manager", "kubepool.jobs.decorators", "kubepool.sagemaker.estimator"):
        monkeypatch.setattr(f"{module}.connect", connect)
    yield kube
