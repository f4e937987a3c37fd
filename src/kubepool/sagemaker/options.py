"""What each keyword argument of the SageMaker Python SDK's estimators means on kubepool: honoured
(`take_sagemaker_options`), or refused saying why; never accepted and ignored. An argument the SDK does not
have either is a TypeError, as Python raises for an unexpected keyword."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

ANNOTATION_TAGS = "kubepool.dev/sagemaker-tags"  # `tags`: the job's SageMaker tags, JSON {key: value}
SDK_VOLUME_SIZE = 30  # EstimatorBase's volume_size default (GB)
INPUT_MODES = ("File", "FastFile")  # FastFile streams on SageMaker; here it is downloaded first

_NO_AWS = "an AWS resource that a Kubernetes cluster does not have"
# Estimator arguments with no meaning on kubepool: refused when set to anything but their unset value
# (None, False, empty, or the SDK's default), never dropped.
REFUSED_ESTIMATOR: dict[str, str] = {
    "keep_alive_period_in_seconds": "SageMaker warm pools: kubepool's instances are pods of the ComputePool, "
                                    "which its autoscaler keeps or releases",
    "volume_size": f"the instances' disk is the pool's nodes' (ephemeral storage); only the SDK's default "
                   f"{SDK_VOLUME_SIZE} is accepted",
    "volume_kms_key": f"a KMS key is {_NO_AWS}; volume encryption is the cluster's storage class",
    "output_kms_key": f"a KMS key is {_NO_AWS}; encrypt the bucket of output_path instead",
    "subnets": f"VPC subnets are {_NO_AWS}; the pods run in the cluster's network",
    "security_group_ids": f"VPC security groups are {_NO_AWS}; use NetworkPolicies of the namespace",
    "metric_definitions": "kubepool does not scrape metrics from the training log",
    "encrypt_inter_container_traffic": "the instances talk over the cluster's pod network; encrypt it with the "
                                       "cluster's CNI or a service mesh",
    "use_spot_instances": "spot capacity is the ComputePool's nodes' (choose a pool of spot nodes)",
    "max_wait": "max_wait only applies to spot training, which kubepool does not offer",
    "rules": "SageMaker Debugger rules are not available on kubepool",
    "debugger_hook_config": "SageMaker Debugger is not available on kubepool (False is accepted)",
    "tensorboard_output_config": "SageMaker Debugger's TensorBoard upload is not available; write TensorBoard "
                                 "files to /opt/ml/output or the checkpoints instead",
    "enable_sagemaker_metrics": "SageMaker's metrics service is not available on kubepool",
    "enable_network_isolation": "network isolation is the namespace's NetworkPolicies, set by an administrator",
    "profiler_config": "SageMaker Profiler is not available on kubepool",
    "git_config": "kubepool ships source_dir from this machine; clone the repository first",
    "code_location": "the code travels with the job (a payload), not through S3",
    "dependencies": "put the dependencies in source_dir (they are shipped with it)",
    "training_repository_access_mode": "a private Docker registry is reached with the namespace's "
                                       "imagePullSecrets, not a VPC",
    "training_repository_credentials_provider_arn": "a Lambda ARN is AWS's; use the namespace's imagePullSecrets",
    "enable_infra_check": "SageMaker's infrastructure health check is not available on kubepool",
    "container_entry_point": "kubepool runs entry_point in SageMaker script mode; a container's own entry point "
                             "is not supported",
    "container_arguments": "kubepool runs entry_point in SageMaker script mode; pass hyperparameters instead",
    "disable_output_compression": "the outputs are always kept as model.tar.gz and output.tar.gz",
    "enable_remote_debug": "SageMaker remote debugging is not available; use kubectl exec on the instance's pod",
    "enable_session_tag_chaining": "session tags are AWS STS's; the job's rights are its ServiceAccount's",
    "training_plan": "SageMaker training plans (reserved capacity) are AWS's; capacity is the ComputePool's",
    "instance_placement_config": "placement is the ComputePool's (its node selector and the scheduler)",
}
# Estimator arguments honoured here (the named parameters of `Estimator` are the rest).
TAKEN_ESTIMATOR = frozenset({"tags", "input_mode", "model_uri", "model_channel_name", "container_log_level"})
# Accepted with no effect, because what they ask for is what kubepool always does (the one such exception).
NO_EFFECT = {"disable_profiler": "kubepool never profiles (profiler_config, which turns SageMaker Profiler on, "
                                 "is refused), so either value asks for what happens"}
REFUSED_FIT = {"experiment_config": "SageMaker Experiments is not available on kubepool"}


def unset(value: Any, default: Any = None) -> bool:
    return value is None or value is False or value == default or (
        isinstance(value, (list, tuple, set, dict, str)) and not value)


def tag_map(tags: Any) -> dict[str, str]:
    """SageMaker's tags (`[{"Key": k, "Value": v}, ...]` or `{k: v}`) as one mapping.

    Raises:
        ValueError: A tag of another form.
    """
    if isinstance(tags, Mapping):
        return {str(k): str(v) for k, v in tags.items()}
    out: dict[str, str] = {}
    for tag in tags or ():
        if not isinstance(tag, Mapping) or "Key" not in tag:
            raise ValueError(f"tags: each tag is {{'Key': ..., 'Value': ...}}, not {tag!r}")
        out[str(tag["Key"])] = str(tag.get("Value", ""))
    return out


@dataclass
class SageMakerOptions:
    """What SageMaker's keyword arguments mean for one estimator."""

    annotations: dict[str, str] = field(default_factory=dict)  # `tags`
    input_mode: str | None = None  # the channels' default input mode
    model_uri: str | None = None  # an extra input channel with the model to start from
    model_channel_name: str = "model"
    hyperparameters: dict[str, str] = field(default_factory=dict)  # container_log_level, as SageMaker passes it


def take_sagemaker_options(kwargs: dict[str, Any], owner: str = "Estimator.__init__") -> SageMakerOptions:
    """Pop SageMaker's keyword arguments out of `kwargs` and give each its meaning: `tags` are kept as the job's
    annotation kubepool.dev/sagemaker-tags, `input_mode` is every channel's default, `model_uri` is the channel
    `model_channel_name`, `container_log_level` the `sagemaker_container_log_level` hyperparameter (the toolkit's
    log level); `disable_profiler` (NO_EFFECT) must be a bool.

    Raises:
        ValueError: An argument of REFUSED_ESTIMATOR set, `disable_profiler` not a bool, or an input mode other
            than File/FastFile.
        TypeError: An argument the SDK does not have either (a typo).
    """
    for key, why in REFUSED_ESTIMATOR.items():
        value = kwargs.pop(key, None)
        if not unset(value, SDK_VOLUME_SIZE if key == "volume_size" else None):
            raise ValueError(f"{key}={value!r} is not supported: {why}")
    out = SageMakerOptions()
    tags = tag_map(kwargs.pop("tags", None))
    if tags:
        out.annotations[ANNOTATION_TAGS] = json.dumps(tags, sort_keys=True)
    out.input_mode = kwargs.pop("input_mode", None)
    if out.input_mode not in (None, *INPUT_MODES):
        raise ValueError(f"input_mode {out.input_mode!r} is not supported; use 'File' or 'FastFile'")
    out.model_uri = kwargs.pop("model_uri", None)
    out.model_channel_name = kwargs.pop("model_channel_name", None) or "model"
    level = kwargs.pop("container_log_level", None)
    if level is not None:
        out.hyperparameters["sagemaker_container_log_level"] = str(int(level))
    if not isinstance(kwargs.pop("disable_profiler", False), bool):
        raise ValueError(f"disable_profiler must be True or False: {NO_EFFECT['disable_profiler']}")
    refuse_unknown(kwargs, owner)
    return out


def refuse_unknown(kwargs: Mapping[str, Any], owner: str) -> None:
    """Python's error for an unexpected keyword, for arguments the SDK does not take either.

    Raises:
        TypeError: `kwargs` is not empty.
    """
    if kwargs:
        raise TypeError(f"{owner}() got an unexpected keyword argument {next(iter(kwargs))!r}")
