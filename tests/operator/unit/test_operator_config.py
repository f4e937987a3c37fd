"""OperatorConfig is read from KUBEPOOL_OPERATOR_* and validated."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from kubepool.api import Backend
from kubepool.controller.config import OperatorConfig, RuntimeAccountPolicy


def test_from_env() -> None:
    cfg = OperatorConfig.from_env({"KUBEPOOL_OPERATOR_DEFAULT_IMAGE": "x:1", "KUBEPOOL_OPERATOR_NAMESPACES": "a, b",
                                   "KUBEPOOL_OPERATOR_DEFAULT_BACKEND": "kuberay",
                                   "KUBEPOOL_OPERATOR_RUNTIME_ACCOUNT": "none", "KUBEPOOL_OPERATOR_METRICS_PORT": "0"})
    assert (cfg.default_image, cfg.namespaces, cfg.default_backend, cfg.runtime_account, cfg.metrics_port) == (
        "x:1", ("a", "b"), Backend.KUBERAY, RuntimeAccountPolicy.NONE, 0)


def test_defaults_and_bad_values() -> None:
    assert OperatorConfig.from_env({}).runtime_account is RuntimeAccountPolicy.PER_NAMESPACE
    assert OperatorConfig.from_env({}).run_as_user == 1000
    assert OperatorConfig.from_env({"KUBEPOOL_OPERATOR_RUN_AS_USER": ""}).run_as_user is None
    with pytest.raises(ValidationError):
        OperatorConfig.from_env({"KUBEPOOL_OPERATOR_WORKER_GRACE_SECONDS": "-1"})
