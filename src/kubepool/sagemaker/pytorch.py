"""`kubepool.sagemaker.pytorch.PyTorch`, as `sagemaker.pytorch.PyTorch` of the SageMaker Python SDK v2: an
`Estimator` whose `framework_version` and `py_version` the job's image must have (kubepool.sagemaker.frameworks)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubepool.sagemaker.estimator import Estimator
from kubepool.sagemaker.frameworks import (
    log,
    pop_framework_kwargs,
    python_deprecation_warning,
    validate_version_or_image_args,
    with_framework,
)

LATEST_PY2_VERSION = "1.3.1"  # sagemaker.pytorch.defaults


class PyTorch(Estimator):
    """SageMaker's PyTorch estimator: `Estimator`'s arguments plus the framework's.

    Args:
        entry_point: The training script.
        framework_version: The PyTorch version the job runs with (`2.5` matches any 2.5.x): the image's torch
            must be it, or a pipRequirement must install it; checked by every instance before the script starts.
        py_version: The Python of the image (`py311`), checked likewise.
        source_dir: See `Estimator`.
        hyperparameters: See `Estimator`.
        image_uri: The image; with it, framework_version and py_version may be left out (as in SageMaker).
        distribution: See `Estimator` (`pytorchddp` is SageMaker's alias of smdistributed dataparallel).
        **kwargs: `Estimator`'s other arguments.

    Raises:
        ValueError: SageMaker's rules on the versions, or an argument kubepool cannot honour.
    """

    _framework_name = "pytorch"

    def __init__(self, entry_point: str, framework_version: str | None = None, py_version: str | None = None,
                 source_dir: str | None = None, hyperparameters: Mapping[str, Any] | None = None,
                 image_uri: str | None = None, distribution: Mapping[str, Any] | None = None,
                 **kwargs: Any) -> None:
        pop_framework_kwargs(kwargs)
        validate_version_or_image_args(framework_version, py_version, image_uri)
        if py_version == "py2":
            log.warning(python_deprecation_warning(self._framework_name, LATEST_PY2_VERSION))
        if distribution and "pytorchddp" in distribution and "smdistributed" in distribution:
            raise ValueError("Cannot use both pytorchddp and smdistributed distribution options together.")
        self.framework_version = framework_version
        self.py_version = py_version
        environment = with_framework(kwargs.pop("environment", None), "torch", framework_version, py_version)
        super().__init__(entry_point, source_dir=source_dir, hyperparameters=hyperparameters, image_uri=image_uri,
                         distribution=distribution, environment=environment, **kwargs)
