"""What SageMaker's framework estimators (`sagemaker.pytorch.PyTorch`, `sagemaker.tensorflow.TensorFlow`) add to
`Estimator`: `framework_version` and `py_version`, checked as the SageMaker Python SDK v2 checks them
(`fw_utils.validate_version_or_image_args`, TensorFlow's `_validate_args`), and honoured: where SageMaker picks
the framework's container by them, here the job's image must have them; every instance checks that before the
script starts and fails saying what the image has (kubepool.runtime.sagemaker.framework_problem)."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from typing import Any

from kubepool.contract import ENV_FRAMEWORK

log = logging.getLogger(__name__)
PY_VERSION = re.compile(r"^py(\d)(\d*)$")  # py3, py38, py311: the SDK's image tags


def Version(text: str) -> tuple[int, ...]:  # noqa: N802 - stands for packaging's Version, which is not a dependency
    """A release version's numbers for comparison (1.10 == 1.10.0 < 1.10.1); ValueError when not one."""
    parts = [int(p) for p in text.split("+")[0].split(".")]
    while len(parts) > 1 and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


def validate_version_or_image_args(framework_version: str | None, py_version: str | None, image_uri: str | None) -> None:
    """The SDK's rule: without an image, both versions are needed.

    Raises:
        ValueError: With the SDK's message.
    """
    if (framework_version is None or py_version is None) and image_uri is None:
        raise ValueError(
            "framework_version or py_version was None, yet image_uri was also None. "
            "Either specify both framework_version and py_version, or specify image_uri."
        )


def framework_env(package: str, framework_version: str | None, py_version: str | None) -> dict[str, str]:
    """The variable that has every instance check its image (empty when neither version is given).

    Raises:
        ValueError: `py_version` is not of the SDK's form (py3, py38, py311, ...).
    """
    if py_version is not None and not PY_VERSION.match(py_version):
        raise ValueError(f"py_version {py_version!r}: expected the form py3, py38, py311 (Python 3.11), ...")
    if framework_version is None and py_version is None:
        return {}
    doc = {"package": package, "framework_version": framework_version, "py_version": py_version}
    return {ENV_FRAMEWORK: json.dumps({k: v for k, v in doc.items() if v is not None}, sort_keys=True)}


def with_framework(environment: Mapping[str, str] | None, package: str, framework_version: str | None,
                   py_version: str | None) -> dict[str, str]:
    return {**dict(environment or {}), **framework_env(package, framework_version, py_version)}


def python_deprecation_warning(framework: str, latest_supported_version: str) -> str:
    """The SDK's warning for py2 (fw_utils.python_deprecation_warning)."""
    return (f"{latest_supported_version} is the latest version of {framework} that supports Python 2. Newer "
            "versions of {framework} will only be available for Python 3.Please set the argument "
            "\"py_version='py3'\" to use the Python 3 {framework} image.").replace("{framework}", framework)


def pop_framework_kwargs(kwargs: dict[str, Any]) -> None:
    """SageMaker arguments of the framework estimators that kubepool refuses rather than ignores."""
    for name in ("compiler_config", "training_recipe", "recipe_overrides"):
        if kwargs.pop(name, None) is not None:
            raise ValueError(f"{name}: SageMaker Training Compiler and training recipes are not available on kubepool")
