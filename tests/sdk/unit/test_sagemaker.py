"""SageMaker argument rules, the instance-type table and the heterogeneous MLJob (no cluster)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fakes import FakeKube, pool

from kubepool.api import InstanceFamily
from kubepool.sagemaker import Estimator, InstanceGroup, TrainingInput
from kubepool.sagemaker.estimator import distribution_groups, encode_hyperparameters
from kubepool.sagemaker.instance_types import family_for

G1, G2 = InstanceGroup("instance_group_1", "ml.c5.18xlarge", 2), InstanceGroup("instance_group_2", "ml.p3dn.24xlarge", 1)
TORCH = {"torch_distributed": {"enabled": True}}


@pytest.fixture
def entry(tmp_path: Path) -> str:
    (tmp_path / "train.py").write_text("print('train')\n")
    return str(tmp_path / "train.py")


def test_instance_arguments_are_mutually_exclusive(entry: str) -> None:
    with pytest.raises(ValueError, match="instance_count and instance_type cannot be set when instance_groups is set"):
        Estimator(entry, instance_type="cpu", instance_groups=[G1])
    with pytest.raises(ValueError, match="instance_count and instance_type must be set if instance_groups is not set"):
        Estimator(entry, instance_type="cpu")
    with pytest.raises(ValueError, match="at most 5"):
        Estimator(entry, instance_groups=[InstanceGroup(f"g{i}", "cpu", 1) for i in range(6)])


def test_distribution_rules() -> None:
    with pytest.raises(ValueError, match="Instance groups not specified in the estimator !"):
        distribution_groups({**TORCH, "instance_groups": ["a"]}, [])
    with pytest.raises(ValueError, match="oversubscribed"):
        distribution_groups({**TORCH, "instance_groups": ["a", "b"]}, [G1])
    with pytest.raises(ValueError, match="Distribution should only contain one instance group name !"):
        distribution_groups(TORCH, [G1, G2])
    with pytest.raises(ValueError, match="no distribution strategies enabled"):
        distribution_groups({"instance_groups": [G2]}, [G1, G2])
    assert distribution_groups({**TORCH, "instance_groups": [G2]}, [G1, G2]) == ["instance_group_2"]
    assert distribution_groups(TORCH, [G1]) == ["instance_group_1"]
    assert distribution_groups(TORCH, []) == [] and distribution_groups(None, [G1]) == []


@pytest.mark.parametrize(("itype", "family"), [
    ("ml.c5.18xlarge", "CPU_X64_L"), ("ml.m5.large", "CPU_X64_XS"), ("ml.m5.xlarge", "CPU_X64_S"),
    ("ml.c5.4xlarge", "CPU_X64_M"), ("ml.r5.2xlarge", "HIGHMEM_X64_S"), ("ml.r5.24xlarge", "HIGHMEM_X64_L"),
    ("ml.g5.xlarge", "GPU_NV_S"), ("ml.g5.12xlarge", "GPU_NV_M"), ("ml.p3dn.24xlarge", "GPU_NV_L"),
    ("ml.p4d.24xlarge", "GPU_NV_L"),
])
def test_instance_type_table(itype: str, family: str) -> None:
    assert family_for(itype) == InstanceFamily(family)


def test_unknown_instance_type() -> None:
    with pytest.raises(ValueError, match="pass a ComputePool name"):
        family_for("ml.inf2.xlarge")


def test_training_input_sources() -> None:
    assert TrainingInput("s3://bucket-1/train").to_channel("train").wire()["source"] == {"s3": {"uri": "s3://bucket-1/train"}}
    assert TrainingInput("pvc://data/a/b").to_channel("t").wire()["source"] == {
        "persistentVolumeClaim": {"claimName": "data", "subPath": "a/b"}}
    assert TrainingInput("configmap://cfg").to_channel("t").wire()["source"] == {"configMap": {"name": "cfg"}}
    for bad in ("file:///tmp/x", "/tmp/x"):
        with pytest.raises(ValueError, match="unsupported channel source"):
            TrainingInput(bad)
    with pytest.raises(ValueError, match="Pipe"):
        TrainingInput("s3://bucket-1/x", input_mode="Pipe")
    with pytest.raises(ValueError, match="ShardedByS3Key"):
        TrainingInput("s3://bucket-1/x", distribution="Sharded")


def test_hyperparameters_are_strings() -> None:
    assert encode_hyperparameters({"lr": 0.1, "name": "x", "flag": True, "layers": [1, 2]}) == {
        "lr": "0.1", "name": "x", "flag": "true", "layers": "[1, 2]"}


def test_heterogeneous_job(fake_kube: FakeKube, entry: str) -> None:
    fake_kube.pools = {"big-cpu": pool("big-cpu", 4, "CPU_X64_L"), "a-gpu": pool("a-gpu", 2, "GPU_NV_L"),
                       "z-gpu": pool("z-gpu", 2, "GPU_NV_L")}
    est = Estimator(entry, instance_groups=[G1, G2], hyperparameters={"epochs": 2},
                    distribution={**TORCH, "instance_groups": ["instance_group_2"]})
    with pytest.raises(ValueError, match=r"Some channels have assigned instance groups: \['train'\] while others not: \['x'\]"):
        est.fit({"train": TrainingInput("s3://bucket-1/a", instance_groups=["instance_group_1"]), "x": "s3://bucket-1/b"},
                wait=False)
    job = est.fit({"training": TrainingInput("s3://bucket-1/a", instance_groups=["instance_group_1"]),
                   "dummy-input-channel": TrainingInput("s3://bucket-1/b", instance_groups=["instance_group_2"])},
                  wait=False)
    assert est.latest_training_job is job
    spec = fake_kube.jobs[("team", job.name)].wire()["spec"]
    assert spec["mode"] == "sagemaker"
    keys = ("name", "computePool", "instanceCount", "instanceType")
    assert [{k: g[k] for k in keys} for g in spec["instanceGroups"]] == [
        {"name": "instance_group_1", "computePool": "big-cpu", "instanceCount": 2, "instanceType": "ml.c5.18xlarge"},
        {"name": "instance_group_2", "computePool": "a-gpu", "instanceCount": 1, "instanceType": "ml.p3dn.24xlarge"},
    ]  # the SageMaker types the script will read (SM_CURRENT_INSTANCE_TYPE), each on the pool of its family
    assert spec["distributionInstanceGroups"] == ["instance_group_2"]
    assert [c["instanceGroups"] for c in spec["channels"]] == [["instance_group_1"], ["instance_group_2"]]
    hp = spec["hyperParameters"]
    assert hp["epochs"] == "2" and hp["sagemaker_torch_distributed_enabled"] == "true"
    assert json.loads(hp["sagemaker_distribution_instance_groups"]) == ["instance_group_2"]
    assert [c.split()[0] for c in fake_kube.calls][-3:] == ["get_pool", "create_job", "create_configmap"]


def test_homogeneous_job_with_pool_name_and_source_dir(fake_kube: FakeKube, tmp_path: Path) -> None:
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text("")
    job = Estimator("train.py", source_dir=str(tmp_path / "code"), instance_type="cpu", instance_count=2,
                    max_run=600).fit("s3://bucket-1/data", wait=False)
    spec = fake_kube.jobs[("team", job.name)].wire()["spec"]
    assert (spec["computePool"], spec["targetInstances"], spec["activeDeadlineSeconds"]) == ("cpu", 2, 600)
    assert spec["channels"][0]["name"] == "training"


def test_missing_family_pool(fake_kube: FakeKube, entry: str) -> None:
    with pytest.raises(ValueError, match="no ComputePool of instance family GPU_NV_L"):
        Estimator(entry, instance_type="ml.p4d.24xlarge", instance_count=1).fit(wait=False)


def test_input_mode_reaches_the_channel() -> None:
    from kubepool.sagemaker import TrainingInput

    assert TrainingInput("s3://bucket-1/p", input_mode="FastFile").to_channel("train").input_mode == "FastFile"
    assert TrainingInput("s3://bucket-1/p").to_channel("train").input_mode == "File"
    with pytest.raises(ValueError, match="Pipe"):
        TrainingInput("s3://bucket-1/p", input_mode="Pipe")


def test_retries_and_checkpoints_reach_the_spec(fake_kube: FakeKube, entry: str) -> None:
    fake_kube.pools = {"cpu": pool("cpu", 4, "CPU_X64_S")}
    est = Estimator(entry, instance_type="cpu", instance_count=1, max_retry_attempts=2,
                    checkpoint_s3_uri="s3://bucket-1/ckpt", s3_credentials_secret="keys")
    spec = fake_kube.jobs[("team", est.fit(wait=False).name)].wire()["spec"]
    assert spec["backoffLimit"] == 2
    assert spec["checkpoint"] == {"s3": {"uri": "s3://bucket-1/ckpt", "credentialsSecret": "keys"}}
    with pytest.raises(ValueError, match="checkpoint_local_path"):
        Estimator(entry, instance_type="cpu", instance_count=1, checkpoint_local_path="/data/ckpt")
    with pytest.raises(ValueError, match="max_retry_attempts must be between 0 and 10"):
        Estimator(entry, instance_type="cpu", instance_count=1, max_retry_attempts=11)


def test_role_is_the_service_account_and_environment_the_env(fake_kube: FakeKube, entry: str) -> None:
    job = Estimator(entry, instance_type="cpu", instance_count=1, role="trainer",
                    environment={"MODE": "fast"}).fit(wait=False)
    spec = fake_kube.jobs[("team", job.name)].wire()["spec"]
    assert spec["serviceAccountName"] == "trainer" and spec["env"] == [{"name": "MODE", "value": "fast"}]
    with pytest.raises(ValueError, match="name a ServiceAccount .*eks.amazonaws.com/role-arn"):
        Estimator(entry, instance_type="cpu", instance_count=1, role="arn:aws:iam::123456789012:role/train")


# The framework estimators, against the SageMaker Python SDK v2's own code (support.sagemaker_sdk).
_REFUSED_FRAMEWORK_ARGS = {"compiler_config", "training_recipe", "recipe_overrides"}
_VERSIONS = [None, "1.9", "1.10", "1.10.0", "1.11", "2.1.1", "2.2", "2.16"]
_PYS = [None, "py2", "py3", "py311"]


def _outcome(fn: object, *args: object) -> tuple[str, str] | None:
    try:
        fn(*args)  # type: ignore[operator]
    except (ValueError, AttributeError) as e:
        return type(e).__name__, str(e).split(". ")[0]
    return None


def test_framework_estimators_live_where_the_sdk_has_them_with_its_parameters() -> None:
    import inspect

    from kubepool.sagemaker.instance_group import InstanceGroup as Group
    from kubepool.sagemaker.pytorch import PyTorch
    from kubepool.sagemaker.tensorflow import TensorFlow
    from support import sagemaker_sdk

    def ours(cls: type) -> list[str]:
        return [p.name for p in inspect.signature(cls).parameters.values() if p.kind is not p.VAR_KEYWORD]

    assert ours(PyTorch) == [p for p in sagemaker_sdk.params("pytorch/estimator", "PyTorch")
                             if p not in _REFUSED_FRAMEWORK_ARGS]
    assert ours(TensorFlow) == [p for p in sagemaker_sdk.params("tensorflow/estimator", "TensorFlow")
                                if p not in _REFUSED_FRAMEWORK_ARGS]
    assert ours(Group) == sagemaker_sdk.params("instance_group", "InstanceGroup")


def test_version_checks_are_the_sdks() -> None:
    import logging

    from packaging import version  # the SDK's own dependency, for its code only

    from kubepool.sagemaker import frameworks, tensorflow
    from support import sagemaker_sdk

    sdk_validate = sagemaker_sdk.function("fw_utils", "validate_version_or_image_args")
    tf = "tensorflow/estimator"
    legacy = sagemaker_sdk.constant(tf, "_HIGHEST_LEGACY_MODE_ONLY_VERSION", "TensorFlow")
    py2 = sagemaker_sdk.constant(tf, "_HIGHEST_PYTHON_2_VERSION", "TensorFlow")
    latest_py2 = sagemaker_sdk.constant("tensorflow/defaults", "LATEST_PY2_VERSION")
    assert (tensorflow.LATEST_PY2_VERSION, frameworks.Version(latest_py2)) == (latest_py2, tensorflow.HIGHEST_PYTHON_2_VERSION)
    assert frameworks.Version(legacy) == tensorflow.HIGHEST_LEGACY_MODE_ONLY_VERSION
    assert __import__("kubepool.sagemaker.pytorch").sagemaker.pytorch.LATEST_PY2_VERSION == sagemaker_sdk.constant(
        "pytorch/defaults", "LATEST_PY2_VERSION")

    class Session:
        boto_region_name = "us-east-1"

    names = {"version": version, "defaults": type("D", (), {"LATEST_PY2_VERSION": latest_py2}),
             "image_uris": type("U", (), {"retrieve": staticmethod(lambda *a, **k: "legacy-image")}),
             "logging": logging}
    sdk_tf = type("TF", (), {
        "_HIGHEST_LEGACY_MODE_ONLY_VERSION": version.Version(legacy), "_HIGHEST_PYTHON_2_VERSION": version.Version(py2),
        **{m: sagemaker_sdk.function(tf, m, names, cls="TensorFlow")
           for m in ("_validate_args", "_only_legacy_mode_supported", "_only_python_3_supported")}})

    def sdk_tensorflow(fv: str | None, py: str | None, image: str | None) -> None:
        sdk_validate(fv, py, image)
        obj = sdk_tf()
        obj.framework_version, obj.py_version, obj.image_uri, obj.instance_type = fv, py, image, "ml.c5.xlarge"
        obj.sagemaker_session = Session()
        obj._validate_args(py_version=py)

    def our_tensorflow(fv: str | None, py: str | None, image: str | None) -> None:
        frameworks.validate_version_or_image_args(fv, py, image)
        tensorflow.validate_args(fv, py, image)

    seen = set()
    for fv in _VERSIONS:
        for py in _PYS:
            for image in (None, "my-image"):
                want = _outcome(sdk_validate, fv, py, image)
                assert _outcome(frameworks.validate_version_or_image_args, fv, py, image) == want, (fv, py, image)
                want_tf = _outcome(sdk_tensorflow, fv, py, image)
                assert _outcome(our_tensorflow, fv, py, image) == want_tf, (fv, py, image)
                seen.add(want_tf and want_tf[0])
    assert seen == {None, "ValueError", "AttributeError"}  # the grid reaches every outcome


def test_framework_versions_reach_every_instance_as_the_check_it_makes(fake_kube: FakeKube, entry: str) -> None:
    from kubepool.contract import ENV_FRAMEWORK
    from kubepool.sagemaker.pytorch import PyTorch
    from kubepool.sagemaker.tensorflow import TensorFlow

    job = PyTorch(entry, framework_version="2.5", py_version="py311", instance_type="cpu", instance_count=1,
                  environment={"MODE": "fast"}).fit(wait=False)
    env = {e["name"]: e["value"] for e in fake_kube.jobs[("team", job.name)].wire()["spec"]["env"]}
    assert env["MODE"] == "fast"
    assert json.loads(env[ENV_FRAMEWORK]) == {"package": "torch", "framework_version": "2.5", "py_version": "py311"}
    tf = TensorFlow(entry_point=entry, framework_version="2.16", py_version="py311", instance_type="cpu",
                    instance_count=1, hyperparameters={"epochs": 1}).fit(wait=False)
    spec = fake_kube.jobs[("team", tf.name)].wire()["spec"]
    assert spec["hyperParameters"]["model_dir"] == "/opt/ml/model" and spec["hyperParameters"]["epochs"] == "1"
    assert json.loads({e["name"]: e["value"] for e in spec["env"]}[ENV_FRAMEWORK])["package"] == "tensorflow"
    with pytest.raises(ValueError, match="Training Compiler"):
        PyTorch(entry, framework_version="2.5", py_version="py311", instance_type="cpu", instance_count=1,
                compiler_config=object())
    with pytest.raises(ValueError, match="py_version 'python3'"):
        PyTorch(entry, framework_version="2.5", py_version="python3", instance_type="cpu", instance_count=1)
