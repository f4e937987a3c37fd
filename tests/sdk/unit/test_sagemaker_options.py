"""Every argument of the SageMaker Python SDK's estimators, `fit` and `TrainingInput` (read from the SDK's own code,
support.sagemaker_sdk) is honoured by kubepool.sagemaker with an effect, or refused with a ValueError naming it;
never accepted and ignored. One listed exception: `disable_profiler` (kubepool never profiles)."""

from __future__ import annotations

import ast
import inspect
import json
import logging
from pathlib import Path
from typing import Any

import pytest
from fakes import FakeKube

from kubepool.sagemaker import Estimator, TrainingInput
from kubepool.sagemaker.inputs import REFUSED_INPUT
from kubepool.sagemaker.options import (
    ANNOTATION_TAGS,
    NO_EFFECT,
    REFUSED_ESTIMATOR,
    REFUSED_FIT,
    TAKEN_ESTIMATOR,
)
from kubepool.sagemaker.pytorch import PyTorch
from kubepool.sagemaker.tensorflow import TensorFlow
from support import sagemaker_sdk

SET = 7  # a value that is neither unset nor any SDK default: what a refused argument must be refused with
BASE: dict[str, Any] = {"instance_type": "cpu", "instance_count": 1}


def _sdk_defaults(mod: str, cls: str, fn: str = "__init__") -> dict[str, Any]:
    """The SDK's literal defaults of a method's parameters (non-literal ones, like logging.INFO, left out)."""
    node = next(n for c in ast.walk(sagemaker_sdk.module(mod)) if isinstance(c, ast.ClassDef) and c.name == cls
                for n in c.body if isinstance(n, ast.FunctionDef) and n.name == fn)
    a = node.args
    pos = a.posonlyargs + a.args
    pairs = list(zip(pos[len(pos) - len(a.defaults):], a.defaults, strict=True)) + [
        (k, d) for k, d in zip(a.kwonlyargs, a.kw_defaults, strict=True) if d is not None]
    out = {}
    for arg, default in pairs:
        try:
            out[arg.arg] = ast.literal_eval(default)
        except ValueError:
            pass
    return out


def _sdk_estimator_params() -> list[str]:
    names = [*sagemaker_sdk.params("estimator", "EstimatorBase"), *sagemaker_sdk.params("estimator", "Estimator"),
             *sagemaker_sdk.params("estimator", "Framework")]
    return list(dict.fromkeys(names))


def _named(fn: Any) -> set[str]:
    return {p.name for p in inspect.signature(fn).parameters.values() if p.kind is not p.VAR_KEYWORD} - {"self"}


@pytest.fixture
def entry(tmp_path: Path) -> str:
    (tmp_path / "train.py").write_text("print('train')\n")
    return str(tmp_path / "train.py")


def test_every_sdk_estimator_argument_is_taken_or_refused_with_one_listed_exception() -> None:
    sdk = _sdk_estimator_params()
    named = _named(Estimator.__init__)
    by_options = set(sdk) - named
    assert by_options == set(REFUSED_ESTIMATOR) | TAKEN_ESTIMATOR | set(NO_EFFECT)
    assert not set(REFUSED_ESTIMATOR) & (TAKEN_ESTIMATOR | set(NO_EFFECT)) and not TAKEN_ESTIMATOR & set(NO_EFFECT)
    assert set(NO_EFFECT) == {"disable_profiler"}  # the one argument accepted without an effect (see its reason)
    assert "role" in named  # the ServiceAccount (tests/sdk/unit/test_sagemaker.py::test_role_is_the_service_account...)


@pytest.mark.parametrize("name", sorted(REFUSED_ESTIMATOR))
def test_arguments_without_a_kubernetes_meaning_are_refused_naming_them(entry: str, name: str,
                                                                        caplog: pytest.LogCaptureFixture) -> None:
    for cls, extra in ((Estimator, {}), (PyTorch, {"image_uri": "img"}), (TensorFlow, {"image_uri": "img"})):
        with pytest.raises(ValueError, match=rf"^{name}=7 is not supported: "):
            cls(entry_point=entry, **BASE, **extra, **{name: SET})  # type: ignore[arg-type]
    default = _sdk_defaults("estimator", "Estimator").get(name)
    with caplog.at_level(logging.WARNING):
        Estimator(entry, **BASE, **{name: default})  # the SDK's default (or unset) passes
        Estimator(entry, **BASE, **{name: None})
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_sdk_defaults_of_every_argument_pass_without_a_warning(entry: str, caplog: pytest.LogCaptureFixture) -> None:
    sdk = _sdk_defaults("estimator", "Estimator")
    defaults = {k: v for k, v in sdk.items() if k not in _named(Estimator.__init__) and k != "role"}
    assert {"volume_size", "input_mode", "use_spot_instances", "disable_profiler"} <= set(defaults)
    with caplog.at_level(logging.WARNING):
        Estimator(entry, **BASE, **defaults)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_an_argument_the_sdk_lacks_is_a_type_error_as_pythons(entry: str) -> None:
    with pytest.raises(TypeError, match=r"^Estimator.__init__\(\) got an unexpected keyword argument 'instance_cont'$"):
        Estimator(entry, **BASE, instance_cont=2)
    with pytest.raises(TypeError, match=r"^PyTorch.__init__\(\) got an unexpected keyword argument 'framework'$"):
        PyTorch(entry, image_uri="img", **BASE, framework="torch")
    with pytest.raises(TypeError, match="'framework_version'"):  # the framework estimators' only
        Estimator(entry, **BASE, framework_version="2.1")


def test_role_is_none_or_a_service_account_name(entry: str) -> None:
    with pytest.raises(ValueError, match="role: a ServiceAccount name"):
        Estimator(entry, **BASE, role=123)  # type: ignore[arg-type]


def test_disable_profiler_is_a_bool(entry: str) -> None:
    Estimator(entry, **BASE, disable_profiler=True)
    with pytest.raises(ValueError, match="disable_profiler must be True or False"):
        Estimator(entry, **BASE, disable_profiler="yes")


def _spec(fake_kube: FakeKube, est: Estimator, inputs: Any = None) -> dict[str, Any]:
    job = est.fit(inputs, wait=False)
    return fake_kube.jobs[("team", job.name)].wire()


def test_tags_are_the_jobs_annotation(fake_kube: FakeKube, entry: str) -> None:
    tags = [{"Key": "team", "Value": "ml"}, {"Key": "cost:center", "Value": "42"}]
    wire = _spec(fake_kube, Estimator(entry, **BASE, tags=tags))
    assert json.loads(wire["metadata"]["annotations"][ANNOTATION_TAGS]) == {"team": "ml", "cost:center": "42"}
    wire = _spec(fake_kube, Estimator(entry, **BASE, tags={"team": "ml"}))
    assert json.loads(wire["metadata"]["annotations"][ANNOTATION_TAGS]) == {"team": "ml"}
    assert ANNOTATION_TAGS not in (_spec(fake_kube, Estimator(entry, **BASE))["metadata"].get("annotations") or {})
    with pytest.raises(ValueError, match="tags: each tag is"):
        Estimator(entry, **BASE, tags=["team"])


def test_input_mode_is_the_channels_default(fake_kube: FakeKube, entry: str) -> None:
    est = Estimator(entry, **BASE, input_mode="FastFile")
    spec = _spec(fake_kube, est, {"a": "s3://bucket-1/a", "b": TrainingInput("s3://bucket-1/b", input_mode="File")})["spec"]
    assert [(c["name"], c["inputMode"]) for c in spec["channels"]] == [("a", "FastFile"), ("b", "File")]
    with pytest.raises(ValueError, match="input_mode 'Pipe' is not supported"):
        Estimator(entry, **BASE, input_mode="Pipe")


def test_model_uri_is_one_more_channel_as_the_sdk_makes_it(fake_kube: FakeKube, entry: str) -> None:
    spec = _spec(fake_kube, Estimator(entry, **BASE, model_uri="s3://bucket-1/m/model.tar.gz",
                                      model_channel_name="base"), {"train": "s3://bucket-1/t"})["spec"]
    model = spec["channels"][-1]
    sdk = ast.unparse(next(n for n in ast.walk(sagemaker_sdk.module("job")) if isinstance(n, ast.FunctionDef)
                           and n.name == "_format_model_uri_input"))
    assert model["name"] == "base" and f'content_type="{model["contentType"]}"'.replace('"', "'") in sdk
    assert f"input_mode='{model['inputMode']}'" in sdk and f"distribution='{model['distribution']}'" in sdk
    spec = _spec(fake_kube, Estimator(entry, **BASE, model_uri="s3://bucket-1/m"))["spec"]
    assert [c["name"] for c in spec["channels"]] == ["model"]  # the SDK's default model_channel_name
    with pytest.raises(ValueError, match="model_channel_name 'train' is also a channel"):
        _spec(fake_kube, Estimator(entry, **BASE, model_uri="s3://bucket-1/m", model_channel_name="train"),
              {"train": "s3://bucket-1/t"})


def test_container_log_level_is_the_toolkits_hyperparameter(fake_kube: FakeKube, entry: str) -> None:
    param = sagemaker_sdk.constant("model", "CONTAINER_LOG_LEVEL_PARAM_NAME")
    hp = _spec(fake_kube, Estimator(entry, **BASE, container_log_level=logging.DEBUG))["spec"]["hyperParameters"]
    assert hp[param] == json.dumps(logging.DEBUG)  # as the SDK's framework estimators json-encode it
    assert param not in (_spec(fake_kube, Estimator(entry, **BASE))["spec"].get("hyperParameters") or {})


def test_every_sdk_fit_argument_is_taken_or_refused(fake_kube: FakeKube, entry: str) -> None:
    sdk = sagemaker_sdk.params("estimator", "EstimatorBase", "fit")
    assert set(sdk) <= _named(Estimator.fit) and set(REFUSED_FIT) <= set(sdk)
    with pytest.raises(ValueError, match=r"^experiment_config=\{'ExperimentName': 'e'\} is not supported"):
        Estimator(entry, **BASE).fit(wait=False, experiment_config={"ExperimentName": "e"})
    Estimator(entry, **BASE).fit(wait=False, experiment_config=None)


def test_every_sdk_training_input_argument_is_taken_or_refused() -> None:
    sdk = sagemaker_sdk.params("inputs", "TrainingInput")
    ours = _named(TrainingInput)
    assert set(sdk) <= ours and set(REFUSED_INPUT) <= set(sdk)
    taken = set(sdk) - set(REFUSED_INPUT)  # each with its effect in tests/sdk/unit/test_sagemaker.py (channels)
    assert taken == {"s3_data", "distribution", "content_type", "s3_data_type", "instance_groups", "input_mode"}
    for name in REFUSED_INPUT:
        with pytest.raises(ValueError, match=rf"^{name}=7 is not supported: "):
            TrainingInput("s3://bucket-1/p", **{name: SET})  # type: ignore[arg-type]
        TrainingInput("s3://bucket-1/p", **{name: None})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="unexpected keyword argument 's3data'"):
        TrainingInput(s3data="s3://bucket-1/p")  # type: ignore[call-arg]
