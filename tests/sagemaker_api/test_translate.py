"""CreateTrainingJob → MLJob as pure functions: every field honoured (the MLJob says how) or refused (a
ValidationException naming it). Requests are the shapes botocore's model defines (checked with its validator)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from kubepool.api import ComputePool, MLJob
from kubepool.sagemaker_api import translate
from kubepool.sagemaker_api.errors import AwsError
from kubepool.sagemaker_api.handlers import check_shape

POOLS = [ComputePool.model_validate({"metadata": {"name": n}, "spec": {"instanceFamily": f}})
         for n, f in (("cpu-s", "CPU_X64_S"), ("a-cpu-s", "CPU_X64_S"), ("gpu", "GPU_NV_S"))]
DATA = translate.DataConfig("http://s3.example:9000", "s3-keys")
REQUEST: dict[str, Any] = {
    "TrainingJobName": "hetero-1",
    "RoleArn": "arn:aws:iam::111122223333:role/service-role/Trainer",
    "AlgorithmSpecification": {"TrainingImage": "example.com/train:1", "TrainingInputMode": "FastFile",
                               "ContainerEntrypoint": ["python3", "train.py"], "ContainerArguments": ["--x", "1"]},
    "HyperParameters": {"epochs": "3", "sagemaker_program": '"train.py"'},
    "ResourceConfig": {"VolumeSizeInGB": 30, "InstanceGroups": [
        {"InstanceGroupName": "data", "InstanceType": "ml.c5.xlarge", "InstanceCount": 1},
        {"InstanceGroupName": "train", "InstanceType": "gpu", "InstanceCount": 2}]},
    "InputDataConfig": [
        {"ChannelName": "train", "DataSource": {"S3DataSource": {
            "S3DataType": "S3Prefix", "S3Uri": "s3://data/train/", "S3DataDistributionType": "ShardedByS3Key",
            "InstanceGroupNames": ["train"]}}, "ContentType": "text/csv"},
        {"ChannelName": "cfg", "DataSource": {"S3DataSource": {
            "S3DataType": "S3Prefix", "S3Uri": "s3://data/cfg", "InstanceGroupNames": ["data", "train"]}},
         "InputMode": "File"}],
    "OutputDataConfig": {"S3OutputPath": "s3://models/runs"},
    "CheckpointConfig": {"S3Uri": "s3://models/ckpt", "LocalPath": "/opt/ml/checkpoints"},
    "StoppingCondition": {"MaxRuntimeInSeconds": 600, "MaxPendingTimeInSeconds": 1800},
    "RetryStrategy": {"MaximumRetryAttempts": 2},
    "Environment": {"MODE": "fast"},
    "Tags": [{"Key": "team", "Value": "ml"}],
}


def _job(req: dict[str, Any], sa: str = "trainer") -> dict[str, Any]:
    check_shape("CreateTrainingJob", req)
    return translate.to_mljob(req, "team-a", sa, POOLS, DATA)


def _refused(req: dict[str, Any], sa: str = "trainer", code: str = "ValidationException") -> str:
    with pytest.raises(AwsError) as e:
        _job(req, sa)
    assert e.value.code == code
    return e.value.message


def test_the_request_botocore_sends_is_a_valid_mljob():
    body = _job(REQUEST)
    job = MLJob.model_validate(body)
    s = job.spec
    assert body["metadata"]["namespace"] == "team-a"
    assert body["metadata"]["labels"][translate.LABEL_SAGEMAKER] == "true"
    assert [(g.name, g.compute_pool, g.instance_count, g.instance_type) for g in s.instance_groups or []] == [
        ("data", "a-cpu-s", 1, "ml.c5.xlarge"), ("train", "gpu", 2, None)]  # the first pool by name of the family
    assert s.entrypoint.command == ["python3", "train.py"] and s.args == ["--x", "1"]
    assert s.image == "example.com/train:1" and s.mode == "sagemaker"
    train, cfg = s.channels or []
    assert (train.distribution, train.instance_groups, train.input_mode, train.content_type) == (
        "ShardedByS3Key", ["train"], "FastFile", "text/csv")
    assert cfg.input_mode == "File" and cfg.source.s3.endpoint_url == DATA.s3_endpoint_url  # type: ignore[union-attr]
    assert train.source.s3.credentials_secret == "s3-keys"  # type: ignore[union-attr]
    assert s.output.s3.uri == "s3://models/runs" and s.checkpoint.s3.uri == "s3://models/ckpt"  # type: ignore[union-attr]
    assert (s.active_deadline_seconds, s.instances_timeout_seconds, s.backoff_limit) == (600, 1800, 2)
    assert s.hyper_parameters == REQUEST["HyperParameters"]
    assert [(e.name, e.value) for e in s.env] == [("MODE", "fast")]
    assert s.service_account_name == "trainer"
    annotations = body["metadata"]["annotations"]
    assert json.loads(annotations["kubepool.dev/sagemaker-tags"]) == {"team": "ml"}
    assert json.loads(annotations[translate.ANNOTATION_REQUEST]) == {k: v for k, v in REQUEST.items() if k != "Tags"}


def test_single_group_form_and_script_mode():
    req = copy.deepcopy(REQUEST)
    req["ResourceConfig"] = {"InstanceType": "ml.m5.xlarge", "InstanceCount": 3, "VolumeSizeInGB": 30}
    req["AlgorithmSpecification"] = {"TrainingImage": "img", "TrainingInputMode": "File"}
    for ch in req["InputDataConfig"]:
        ch["DataSource"]["S3DataSource"].pop("InstanceGroupNames")
    s = MLJob.model_validate(_job(req)).spec
    assert (s.compute_pool, s.target_instances, s.instance_type, s.instance_groups) == ("a-cpu-s", 3, "ml.m5.xlarge", None)
    assert s.entrypoint.file == "train.py" and s.code is None  # the runtime fetches sagemaker_submit_directory


@pytest.mark.parametrize("change,words", [
    (lambda r: r["ResourceConfig"]["InstanceGroups"][0].update(InstanceType="ml.inf1.xlarge"), "ml.inf1.xlarge"),
    (lambda r: r["ResourceConfig"]["InstanceGroups"][0].update(InstanceType="ml.r5.large"), "HIGHMEM_X64_S"),
    (lambda r: r["ResourceConfig"]["InstanceGroups"][1].update(InstanceType="nopool"), "nopool"),
    (lambda r: r["InputDataConfig"][0]["DataSource"]["S3DataSource"].update(S3Uri="s3://data/a/../../b"), ".."),
    (lambda r: r["OutputDataConfig"].update(S3OutputPath="s3://models/../other"), ".."),
    (lambda r: r["CheckpointConfig"].update(S3Uri="s3://models/x/.."), ".."),
    (lambda r: r["CheckpointConfig"].update(LocalPath="/tmp/ckpt"), "LocalPath"),
    (lambda r: r.update(TrainingJobName="Upper-Case"), "Upper-Case"),
    (lambda r: r.update(EnableManagedSpotTraining=True), "EnableManagedSpotTraining"),
    (lambda r: r.update(VpcConfig={"SecurityGroupIds": ["sg-1"], "Subnets": ["s-1"]}), "VpcConfig"),
    (lambda r: r.update(DebugHookConfig={"S3OutputPath": "s3://x/y", "CollectionConfigurations": [
        {"CollectionName": "weights"}]}), "DebugHookConfig"),
    (lambda r: r.update(DebugHookConfig={"S3OutputPath": "s3://x/y", "HookParameters": {"save_interval": "1"}}),
     "DebugHookConfig"),
    (lambda r: r.update(ProfilerConfig={"S3OutputPath": "s3://x/y", "ProfilingIntervalInMilliseconds": 100}),
     "ProfilerConfig"),
    (lambda r: r["AlgorithmSpecification"].update(TrainingInputMode="Pipe"), "Pipe"),
    (lambda r: r["AlgorithmSpecification"].update(MetricDefinitions=[{"Name": "a", "Regex": "b"}]), "MetricDefinitions"),
    (lambda r: r["InputDataConfig"][0].update(CompressionType="Gzip"), "CompressionType"),
    (lambda r: r["InputDataConfig"][0]["DataSource"]["S3DataSource"].update(S3DataType="ManifestFile"), "ManifestFile"),
    (lambda r: r["InputDataConfig"][1]["DataSource"]["S3DataSource"].pop("InstanceGroupNames"), "assigned"),
    (lambda r: r["InputDataConfig"][0]["DataSource"]["S3DataSource"].update(InstanceGroupNames=["x"]), "'x'"),
    (lambda r: r["ResourceConfig"].update(InstanceType="ml.c5.xlarge", InstanceCount=1), "InstanceGroups"),
    (lambda r: r["ResourceConfig"].update(KeepAlivePeriodInSeconds=60), "KeepAlivePeriodInSeconds"),
    (lambda r: r["StoppingCondition"].update(MaxWaitTimeInSeconds=60), "MaxWaitTimeInSeconds"),
    (lambda r: r["RetryStrategy"].update(MaximumRetryAttempts=20), "MaximumRetryAttempts"),
    (lambda r: r["OutputDataConfig"].update(KmsKeyId="k"), "KmsKeyId"),
    (lambda r: r["AlgorithmSpecification"].pop("ContainerEntrypoint"), "ContainerEntrypoint"),
    (lambda r: r.update(RoleArn="not-an-arn-at-all"), "RoleArn"),
])
def test_refused_with_the_field_named(change, words):
    req = copy.deepcopy(REQUEST)
    change(req)
    assert words in _refused(req)


def test_no_image_entrypoint_without_script_mode():
    req = copy.deepcopy(REQUEST)
    req["AlgorithmSpecification"] = {"TrainingImage": "img", "TrainingInputMode": "File"}
    req["HyperParameters"] = {}
    assert "sagemaker_program" in _refused(req)


def test_role_maps_to_the_keys_service_account_only():
    assert "trainer" in _refused(REQUEST, sa="default", code="AccessDeniedException")
    req = copy.deepcopy(REQUEST)
    req["RoleArn"] = "arn:aws:iam::111122223333:role/default"
    assert MLJob.model_validate(_job(req, sa="default")).spec.service_account_name == "default"


@pytest.mark.parametrize("debugger,profiler", [
    # What sagemaker 2.257.7's Estimator sends when its user set nothing (EstimatorBase._validate_and_set_debugger_
    # configs, _prepare_profiler_for_training; PyTorch also EnableSageMakerMetricsTimeSeries: true), and with
    # debugger_hook_config=False, disable_profiler=True.
    ({"S3OutputPath": "s3://models/runs", "CollectionConfigurations": []},
     {"S3OutputPath": "s3://models/runs", "DisableProfiler": False}),
    (None, {"DisableProfiler": True}),
])
def test_the_sdks_defaults_are_accepted(debugger, profiler):
    req = copy.deepcopy(REQUEST)
    req["ProfilerConfig"] = profiler
    if debugger:
        req["DebugHookConfig"] = debugger
    req["AlgorithmSpecification"]["EnableSageMakerMetricsTimeSeries"] = debugger is not None
    assert _job(req)["spec"]["mode"] == "sagemaker"


def test_check_s3_uri():
    assert translate.check_s3_uri("s3://b/a..b/c", "f") == "s3://b/a..b/c"  # '..' inside a name is a name
    for bad in ("s3://b/../c", "s3://b/x/..", "http://b/c", None):
        with pytest.raises(AwsError):
            translate.check_s3_uri(bad, "f")
