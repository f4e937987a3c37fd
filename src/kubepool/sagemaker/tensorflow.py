"""`kubepool.sagemaker.tensorflow.TensorFlow`, as `sagemaker.tensorflow.TensorFlow` of the SageMaker Python SDK
v2: an `Estimator` whose `framework_version` and `py_version` the job's image must have
(kubepool.sagemaker.frameworks), with the SDK's TensorFlow rules (no Python 2 after 2.1.1, no legacy mode)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubepool.sagemaker.estimator import Estimator
from kubepool.sagemaker.frameworks import (
    Version,
    log,
    pop_framework_kwargs,
    python_deprecation_warning,
    validate_version_or_image_args,
    with_framework,
)

LATEST_PY2_VERSION = "2.1.1"  # sagemaker.tensorflow.defaults
HIGHEST_LEGACY_MODE_ONLY_VERSION = Version("1.10.0")  # TensorFlow._HIGHEST_LEGACY_MODE_ONLY_VERSION
HIGHEST_PYTHON_2_VERSION = Version("2.1.1")  # TensorFlow._HIGHEST_PYTHON_2_VERSION
MODEL_DIR = "/opt/ml/model"  # model_dir's default: SageMaker's for MPI and local code; an S3 prefix otherwise


def validate_args(framework_version: str | None, py_version: str | None, image_uri: str | None) -> None:
    """TensorFlow's `_validate_args`, less the legacy image's URI in the message (there is no legacy image).

    Raises:
        AttributeError: Python 2 with a version that has no Python 2 container (the SDK's exception type).
        ValueError: A version that supports only legacy mode, without an image.
    """
    if py_version == "py2" and framework_version and Version(framework_version) > HIGHEST_PYTHON_2_VERSION:
        raise AttributeError(f"Python 2 containers are only available with {LATEST_PY2_VERSION} and lower versions. "
                             "Please use a Python 3 container.")
    if image_uri is None and framework_version and Version(framework_version) <= HIGHEST_LEGACY_MODE_ONLY_VERSION:
        raise ValueError(f"TF {framework_version} supports only legacy mode. Please supply the image URI directly "
                         "with 'image_uri=...' and set 'model_dir=False'.")


class TensorFlow(Estimator):
    """SageMaker's TensorFlow estimator: `Estimator`'s arguments plus the framework's.

    Args:
        py_version: The Python of the image (`py311`): checked by every instance before the script starts.
        framework_version: The TensorFlow version the job runs with (`2.16` matches any 2.16.x), checked likewise.
        model_dir: Passed to the script as the `model_dir` hyperparameter, as SageMaker does; default
            /opt/ml/model (SageMaker's default is an S3 prefix the script writes to); False: not passed.
        image_uri: The image; with it, framework_version and py_version may be left out (as in SageMaker).
        distribution: See `Estimator`.
        **kwargs: `Estimator`'s other arguments (entry_point first among them).

    Raises:
        ValueError: SageMaker's rules on the versions, or an argument kubepool cannot honour.
        AttributeError: py2 with a version that has no Python 2 container (as SageMaker).
    """

    _framework_name = "tensorflow"

    def __init__(self, py_version: str | None = None, framework_version: str | None = None,
                 model_dir: str | bool | None = None, image_uri: str | None = None,
                 distribution: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        pop_framework_kwargs(kwargs)
        validate_version_or_image_args(framework_version, py_version, image_uri)
        if py_version == "py2":
            log.warning(python_deprecation_warning(self._framework_name, LATEST_PY2_VERSION))
        validate_args(framework_version, py_version, image_uri)
        if model_dir is True:
            raise ValueError("model_dir: a path, or False not to pass one")
        self.framework_version = framework_version
        self.py_version = py_version
        self.model_dir = model_dir
        hyperparameters = dict(kwargs.pop("hyperparameters", None) or {})
        if model_dir is not False:
            hyperparameters["model_dir"] = model_dir or MODEL_DIR
        environment = with_framework(kwargs.pop("environment", None), "tensorflow", framework_version, py_version)
        super().__init__(image_uri=image_uri, distribution=distribution, hyperparameters=hyperparameters,
                         environment=environment, **kwargs)
