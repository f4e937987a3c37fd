"""CreateTrainingJob's request → an MLJob, as pure functions (the handler only fetches the pools first).

Every field of the request is honoured or refused with a ValidationException naming it; the request itself is
kept on the job (ANNOTATION_REQUEST) so DescribeTrainingJob echoes it back as given. The translation of
channels and outputs is kubepool's own SageMaker SDK's (kubepool.sagemaker's TrainingInput and build_channels,
kubepool.jobs.locations), so both front doors make the same MLJob of the same arguments.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kubepool import api, naming
from kubepool.api import ComputePool, Entrypoint
from kubepool.contract import CHECKPOINT_DIR, RunMode
from kubepool.jobs.locations import checkpoint_location, output_location
from kubepool.jobs.spec import build_mljob, check_name
from kubepool.sagemaker.estimator import InstanceGroup, build_channels
from kubepool.sagemaker.inputs import TrainingInput
from kubepool.sagemaker.instance_types import family_for, is_sagemaker_type
from kubepool.sagemaker.options import ANNOTATION_TAGS, tag_map
from kubepool.sagemaker_api.errors import AwsError, access_denied, validation

ANNOTATION_REQUEST = f"{naming.GROUP}/sagemaker-request"  # the CreateTrainingJob request, JSON, minus Tags
LABEL_SAGEMAKER = f"{naming.GROUP}/sagemaker-api"  # jobs made by this server: ListTrainingJobs lists only them
SINGLE_GROUP = "homogeneousCluster"  # SageMaker's name of the group of InstanceType/InstanceCount
_ROLE = re.compile(r"^arn:aws[a-z-]*:iam::\d{12}:role/(?:[^/]+/)*(?P<name>[\w+=,.@-]{1,64})$")

# Request fields with no meaning on Kubernetes: refused when set to anything but their unset value.
REFUSED: dict[str, str] = {
    "VpcConfig": "VPC subnets and security groups are AWS's; the pods run in the cluster's network",
    "EnableNetworkIsolation": "network isolation is the namespace's NetworkPolicies",
    "EnableInterContainerTrafficEncryption": "encrypt the pod network with the cluster's CNI or a service mesh",
    "EnableManagedSpotTraining": "spot capacity is the ComputePool's nodes'",
    "DebugRuleConfigurations": "SageMaker Debugger is not available on kubepool",
    "TensorBoardOutputConfig": "SageMaker Debugger's TensorBoard upload is not available",
    "ExperimentConfig": "SageMaker Experiments is not available on kubepool",
    "ProfilerRuleConfigurations": "SageMaker Profiler is not available on kubepool",
    "RemoteDebugConfig": "use kubectl exec on the instance's pod",
    "InfraCheckConfig": "SageMaker's infrastructure health check is not available on kubepool",
    "SessionChainingConfig": "session tags are AWS STS's; the job's rights are its ServiceAccount's",
    "ServerlessJobConfig": "serverless training is AWS's",
    "MlflowConfig": "SageMaker's managed MLflow is AWS's",
    "ModelPackageConfig": "SageMaker's model registry is AWS's",
}
# What the SageMaker Python SDK sends when its user set nothing, accepted so unchanged code runs: Debugger's default
# hook (an S3 path, no collections, no parameters, no rules) and Profiler's default system monitoring (an S3 path),
# SageMaker services kubepool does not have, which record nothing here; anything set beyond them is refused.
_SDK_DEFAULT_HOOK = {"S3OutputPath", "CollectionConfigurations", "HookParameters"}
_SDK_DEFAULT_PROFILER = {"S3OutputPath", "DisableProfiler"}


def sdk_default_debugger(hook: Mapping[str, Any]) -> bool:
    return set(hook) <= _SDK_DEFAULT_HOOK and not hook.get("CollectionConfigurations") and not hook.get("HookParameters")


def sdk_default_profiler(profiler: Mapping[str, Any]) -> bool:
    return set(profiler) <= _SDK_DEFAULT_PROFILER


@dataclass(frozen=True)
class DataConfig:
    """Where the namespace's jobs read and write S3 (the platform team's setting, the server's flags)."""

    s3_endpoint_url: str | None = None
    s3_credentials_secret: str | None = None


def _unset(v: Any) -> bool:
    return v is None or v is False or (isinstance(v, (dict, list, str)) and not v)


def check_s3_uri(uri: Any, field: str) -> str:
    """An s3:// URI without '..' segments (the runtime would write outside the prefix it was given)."""
    if not isinstance(uri, str) or not uri.startswith("s3://"):
        raise validation(f"{field}: an s3://bucket/prefix URI, not {uri!r}")
    if ".." in uri[5:].split("/"):
        raise validation(f"{field}: {uri!r} must not contain '..'")
    return uri


def pool_for(instance_type: str, pools: Sequence[ComputePool]) -> str:
    """The ComputePool an instance type runs on (kubepool.sagemaker.instance_types' rule: a pool name as is, an
    ml.* type the first pool by name of its family)."""
    if not is_sagemaker_type(instance_type):
        if instance_type not in {p.metadata.get("name") for p in pools}:
            raise validation(f"InstanceType {instance_type!r}: neither an ml.* type nor a ComputePool")
        return instance_type
    try:
        family = family_for(instance_type)
    except ValueError as err:
        raise validation(f"InstanceType {instance_type!r} is not supported: {err}") from None
    named = sorted(str(p.metadata.get("name", "")) for p in pools if p.spec.instance_family == family)
    if not named:
        raise validation(f"InstanceType {instance_type!r}: no ComputePool of instance family {family} serves it")
    return named[0]


def role_service_account(role_arn: Any, key_service_account: str) -> str:
    """RoleArn's role name, as a DNS label, is the ServiceAccount the instances run as: it must be the access
    key's (a key never gives a job more rights than its own)."""
    m = _ROLE.match(role_arn) if isinstance(role_arn, str) else None
    if not m:
        raise validation(f"RoleArn {role_arn!r}: an IAM role ARN (arn:aws:iam::<account>:role/<name>)")
    account = naming.dns_label(m.group("name"))
    if account != key_service_account:
        raise access_denied(f"RoleArn {role_arn}: role {m.group('name')!r} is ServiceAccount {account!r}, and this "
                            f"access key acts as ServiceAccount {key_service_account!r}")
    return account


def _groups(rc: Mapping[str, Any], pools: Sequence[ComputePool]) -> tuple[list[InstanceGroup], list[api.InstanceGroup]]:
    groups = rc.get("InstanceGroups") or []
    if groups and (rc.get("InstanceType") or rc.get("InstanceCount")):
        raise validation("ResourceConfig: InstanceType and InstanceCount cannot be set with InstanceGroups")
    if not groups:
        if not rc.get("InstanceType") or not rc.get("InstanceCount"):
            raise validation("ResourceConfig: InstanceType and InstanceCount, or InstanceGroups, are required")
        groups = [{"InstanceGroupName": SINGLE_GROUP, "InstanceType": rc["InstanceType"],
                   "InstanceCount": rc["InstanceCount"]}]
    sdk = [InstanceGroup(g["InstanceGroupName"], g["InstanceType"], int(g["InstanceCount"])) for g in groups]
    kube = [api.InstanceGroup(name=g.instance_group_name, compute_pool=pool_for(g.instance_type, pools),
                              instance_count=g.instance_count,
                              instance_type=g.instance_type if is_sagemaker_type(g.instance_type) else None)
            for g in sdk]
    return sdk, kube


def _channel_input(ch: Mapping[str, Any], data: DataConfig) -> TrainingInput:
    name = ch.get("ChannelName", "")
    src = (ch.get("DataSource") or {})
    if src.get("FileSystemDataSource") or not src.get("S3DataSource"):
        raise validation(f"channel {name!r}: only S3DataSource is supported")
    s3 = src["S3DataSource"]
    for field in ("AttributeNames", "ModelAccessConfig", "HubAccessConfig"):
        if not _unset(s3.get(field)):
            raise validation(f"channel {name!r}: S3DataSource.{field} is not supported")
    for field, none in (("CompressionType", "None"), ("RecordWrapperType", "None")):
        if ch.get(field) not in (None, none):
            raise validation(f"channel {name!r}: {field} {ch[field]!r} is Pipe mode's, which kubepool does not offer")
    if not _unset(ch.get("ShuffleConfig")):
        raise validation(f"channel {name!r}: ShuffleConfig is Pipe mode's, which kubepool does not offer")
    return TrainingInput(check_s3_uri(s3.get("S3Uri"), f"channel {name!r} S3Uri"),
                         distribution=s3.get("S3DataDistributionType") or "FullyReplicated",
                         instance_groups=s3.get("InstanceGroupNames") or None, content_type=ch.get("ContentType"),
                         s3_data_type=s3.get("S3DataType") or "S3Prefix", input_mode=ch.get("InputMode"),
                         endpoint_url=data.s3_endpoint_url, credentials_secret=data.s3_credentials_secret)


def _entrypoint(algo: Mapping[str, Any], hp: Mapping[str, str]) -> tuple[Entrypoint, list[str]]:
    """ContainerEntrypoint (+ ContainerArguments) as a command; else script mode's sagemaker_program (the SDK
    JSON-encodes it), run from sagemaker_submit_directory by the runtime."""
    command = algo.get("ContainerEntrypoint")
    if command:
        return Entrypoint(command=list(command)), list(algo.get("ContainerArguments") or [])
    if algo.get("ContainerArguments"):
        raise validation("AlgorithmSpecification: ContainerArguments needs ContainerEntrypoint")
    program = hp.get("sagemaker_program")
    if program is None:
        raise validation("AlgorithmSpecification: a training image's own entry point is not supported: give "
                         "ContainerEntrypoint, or script mode's sagemaker_program hyperparameter")
    try:
        decoded = json.loads(program)
    except ValueError:
        decoded = program
    return Entrypoint(file=str(decoded)), []


def _check_refused(req: Mapping[str, Any]) -> None:
    for field, why in REFUSED.items():
        if not _unset(req.get(field)):
            raise validation(f"{field} is not supported: {why}")
    if not _unset(req.get("ProfilerConfig")) and not sdk_default_profiler(req["ProfilerConfig"]):
        raise validation("ProfilerConfig: only the SDK's default (S3OutputPath, DisableProfiler) is accepted: "
                         "SageMaker Profiler is not available on kubepool")
    if not _unset(req.get("DebugHookConfig")) and not sdk_default_debugger(req["DebugHookConfig"]):
        raise validation("DebugHookConfig: only the SDK's default hook (S3OutputPath alone) is accepted: SageMaker "
                         "Debugger is not available on kubepool")
    algo = req.get("AlgorithmSpecification") or {}
    # EnableSageMakerMetricsTimeSeries is taken either way (the SDK's PyTorch sets it true by default): it turns on the
    # time series of MetricDefinitions' metrics, which are refused, so there is nothing it could record.
    for field in ("AlgorithmName", "MetricDefinitions", "TrainingImageConfig"):
        if not _unset(algo.get(field)):
            raise validation(f"AlgorithmSpecification.{field} is not supported on kubepool")
    if algo.get("TrainingInputMode") == "Pipe":
        raise validation("TrainingInputMode Pipe is not supported; use File or FastFile")
    rc = req.get("ResourceConfig") or {}
    for field in ("VolumeKmsKeyId", "KeepAlivePeriodInSeconds", "InstancePlacementConfig", "TrainingPlanArn"):
        if not _unset(rc.get(field)):
            raise validation(f"ResourceConfig.{field} is not supported: the instances are the ComputePool's pods")
    out = req.get("OutputDataConfig") or {}
    if not _unset(out.get("KmsKeyId")):
        raise validation("OutputDataConfig.KmsKeyId is not supported: encrypt the bucket instead")
    if out.get("CompressionType") not in (None, "GZIP"):
        raise validation("OutputDataConfig.CompressionType: the outputs are always model.tar.gz (GZIP)")
    stop = req.get("StoppingCondition") or {}
    if not _unset(stop.get("MaxWaitTimeInSeconds")):
        raise validation("StoppingCondition.MaxWaitTimeInSeconds is spot training's, which kubepool does not offer")


def to_mljob(req: Mapping[str, Any], namespace: str, key_service_account: str, pools: Sequence[ComputePool],
             data: DataConfig = DataConfig()) -> dict[str, Any]:
    """The MLJob (as the API server takes it) a CreateTrainingJob request makes in `namespace`.

    Raises:
        AwsError: ValidationException naming the field, or AccessDeniedException for a RoleArn the key may not use.
    """
    try:
        return _to_mljob(req, namespace, key_service_account, pools, data)
    except AwsError:
        raise
    except (ValueError, TypeError, KeyError) as err:
        raise validation(str(err)) from None


def _to_mljob(req: Mapping[str, Any], namespace: str, key_service_account: str, pools: Sequence[ComputePool],
              data: DataConfig) -> dict[str, Any]:
    name = req.get("TrainingJobName")
    if not isinstance(name, str):
        raise validation("TrainingJobName is required")
    check_name(name)
    _check_refused(req)
    account = role_service_account(req.get("RoleArn"), key_service_account)
    algo = req.get("AlgorithmSpecification") or {}
    hp = {str(k): str(v) for k, v in (req.get("HyperParameters") or {}).items()}
    entrypoint, args = _entrypoint(algo, hp)
    sdk_groups, groups = _groups(req.get("ResourceConfig") or {}, pools)
    single = sdk_groups[0].instance_group_name == SINGLE_GROUP
    inputs = {c.get("ChannelName", ""): _channel_input(c, data) for c in req.get("InputDataConfig") or []}
    channels = build_channels(inputs, sdk_groups, algo.get("TrainingInputMode"))
    out = req.get("OutputDataConfig") or {}
    ckpt = req.get("CheckpointConfig") or {}
    if ckpt.get("LocalPath") not in (None, CHECKPOINT_DIR):
        raise validation(f"CheckpointConfig.LocalPath: only {CHECKPOINT_DIR} (SageMaker's default) is supported")
    stop = req.get("StoppingCondition") or {}
    retries = (req.get("RetryStrategy") or {}).get("MaximumRetryAttempts")
    if retries is not None and not 0 <= int(retries) <= 10:
        raise validation(f"RetryStrategy.MaximumRetryAttempts must be between 0 and 10 here, not {retries}")
    pending = stop.get("MaxPendingTimeInSeconds")
    job = build_mljob(
        name=name, namespace=namespace, entrypoint=entrypoint, args=args,
        compute_pool=groups[0].compute_pool if single else None, instance_groups=None if single else groups,
        target_instances=groups[0].instance_count if single else None,
        instance_type=groups[0].instance_type if single else None,
        env_vars=req.get("Environment") or {}, image=algo.get("TrainingImage") or None, mode=RunMode.SAGEMAKER,
        with_payload=False, channels=channels, hyper_parameters=hp,
        active_deadline_seconds=stop.get("MaxRuntimeInSeconds"),
        instances_timeout=int(pending) if pending else naming.DEFAULT_INSTANCES_TIMEOUT_SECONDS,
        output=output_location(check_s3_uri(out["S3OutputPath"], "OutputDataConfig.S3OutputPath"),
                               data.s3_endpoint_url, data.s3_credentials_secret) if out.get("S3OutputPath") else None,
        checkpoint=checkpoint_location(check_s3_uri(ckpt["S3Uri"], "CheckpointConfig.S3Uri"), data.s3_endpoint_url,
                                       data.s3_credentials_secret) if ckpt.get("S3Uri") else None,
        backoff_limit=int(retries or 0), spec_overrides={"serviceAccountName": account},
        labels={LABEL_SAGEMAKER: "true"},
    )
    body: dict[str, Any] = job.model_dump(mode="json", by_alias=True, exclude_none=True)
    kept = {k: v for k, v in req.items() if k != "Tags"}
    body["metadata"].setdefault("annotations", {})[ANNOTATION_REQUEST] = json.dumps(kept, sort_keys=True)
    tags = tag_map(req.get("Tags"))
    if tags:
        body["metadata"]["annotations"][ANNOTATION_TAGS] = json.dumps(tags, sort_keys=True)
    return body
