"""`Estimator` and `InstanceGroup` with SageMaker's argument rules: `fit()` creates an MLJob in SageMaker
script mode (every instance runs `entry_point` with SageMaker's files and SM_* variables), homogeneous or
heterogeneous (`instance_groups`)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubepool import api
from kubepool.api import Entrypoint
from kubepool.api.mljob import MAX_GROUPS
from kubepool.contract import CHECKPOINT_DIR, RunMode
from kubepool.jobs.job import MLJob
from kubepool.jobs.locations import checkpoint_location, output_location
from kubepool.jobs.payload import PayloadFile, directory_payload, file_payload
from kubepool.jobs.spec import build_mljob, check_name, generate_name
from kubepool.jobs.submission import annotate, connect, submit
from kubepool.kube.sync import Kube
from kubepool.sagemaker.inputs import TrainingInput
from kubepool.sagemaker.instance_types import is_sagemaker_type, resolve_pool
from kubepool.sagemaker.options import REFUSED_FIT, take_sagemaker_options

# distribution key → the hyperparameter SageMaker's framework estimators set when it is enabled.
_STRATEGY_FLAGS = {
    "torch_distributed": "sagemaker_torch_distributed_enabled",
    "pytorchddp": "sagemaker_pytorch_ddp_enabled",
    "mpi": "sagemaker_mpi_enabled",
    "parameter_server": "sagemaker_parameter_server_enabled",
    "multi_worker_mirrored_strategy": "sagemaker_multi_worker_mirrored_strategy_enabled",
}


class UnexpectedStatusException(ValueError):
    """The training job ended in a status other than DONE (SageMaker's name for it)."""


@dataclass
class InstanceGroup:
    """One instance group of a heterogeneous cluster (SageMaker's `sagemaker.instance_group.InstanceGroup`).

    Args:
        instance_group_name: Group name (e.g. `instance_group_1`), unique in the job.
        instance_type: A ComputePool name, or a SageMaker type mapped to a pool (see `instance_types`).
        instance_count: Instances in the group.
    """

    instance_group_name: str
    instance_type: str
    instance_count: int


def _enabled(value: Any) -> bool:
    return bool(value.get("enabled")) if isinstance(value, Mapping) else bool(value)


def strategy_hyperparameters(distribution: Mapping[str, Any] | None) -> dict[str, str]:
    """SageMaker's `sagemaker_*` hyperparameters for the enabled distribution strategies."""
    out: dict[str, str] = {}
    for key, flag in _STRATEGY_FLAGS.items():
        if distribution and key in distribution and _enabled(distribution[key]):
            out[flag] = "true"
    mpi = (distribution or {}).get("mpi")
    if isinstance(mpi, Mapping) and _enabled(mpi) and "processes_per_host" in mpi:
        out["sagemaker_mpi_num_of_processes_per_host"] = str(int(mpi["processes_per_host"]))
    smd = (distribution or {}).get("smdistributed")
    if isinstance(smd, Mapping) and _enabled(smd.get("dataparallel", {})):
        out["sagemaker_distributed_dataparallel_enabled"] = "true"
    return out


def distribution_groups(distribution: Mapping[str, Any] | None, groups: Sequence[InstanceGroup]) -> list[str]:
    """The instance groups that run distributed training, with SageMaker's `validate_distribution` rules.

    Raises:
        ValueError: With SageMaker's messages.
    """
    if not distribution:
        return []
    named = distribution.get("instance_groups")
    names = [g.instance_group_name if isinstance(g, InstanceGroup) else str(g) for g in named or ()]
    if named is not None and not groups:
        raise ValueError("Instance groups not specified in the estimator !")
    if not groups:
        return []
    if len(names) > len(groups):
        raise ValueError("Train instance groups oversubscribed ! More instance groups in distribution than in the estimator.")
    strategies = strategy_hyperparameters(distribution)
    if names and not strategies:
        raise ValueError("Don't set training instance groups while no distribution strategies enabled!")
    if not strategies:
        return []
    if not names and len(groups) == 1:
        names = [groups[0].instance_group_name]
    if len(names) != 1:
        raise ValueError("Distribution should only contain one instance group name !")
    known = {g.instance_group_name for g in groups}
    if names[0] not in known:
        raise ValueError(f"Distribution instance group {names[0]!r} is not one of the estimator's: {sorted(known)}")
    return names


def encode_hyperparameters(hyperparameters: Mapping[str, Any] | None) -> dict[str, str]:
    """Strings as they are; anything else JSON-encoded (`0.1` → `"0.1"`, `True` → `"true"`)."""
    return {str(k): v if isinstance(v, str) else json.dumps(v) for k, v in (hyperparameters or {}).items()}


def build_channels(inputs: str | TrainingInput | Mapping[str, str | TrainingInput] | None,
                   groups: Sequence[InstanceGroup], input_mode: str | None = None) -> list[api.Channel]:
    """MLJob channels from `fit(inputs=...)`, with SageMaker's all-or-nothing rule on channel groups;
    `input_mode` (the estimator's) is the mode of the channels that name none.

    Raises:
        ValueError: Some channels name instance groups and others do not, or a channel names an unknown group.
    """
    if inputs is None:
        return []
    named = {"training": inputs} if isinstance(inputs, (str, TrainingInput)) else dict(inputs)
    items = {n: v if isinstance(v, TrainingInput) else TrainingInput(v) for n, v in named.items()}
    assigned = sorted(n for n, v in items.items() if v.instance_groups)
    if assigned and len(assigned) != len(items):
        others = sorted(set(items) - set(assigned))
        raise ValueError(f"Some channels have assigned instance groups: {assigned} while others not: {others}")
    known = {g.instance_group_name for g in groups}
    for n, v in items.items():
        unknown = sorted(set(v.instance_groups or ()) - known)
        if unknown:
            raise ValueError(f"channel {n!r} names instance groups {unknown} that the estimator does not have")
    return [v.to_channel(n, input_mode) for n, v in items.items()]


class Estimator:
    """A training job definition with SageMaker's constructor (`sagemaker.estimator.Estimator`).

    Args:
        entry_point: The training script (relative to `source_dir` when it is given).
        source_dir: Directory shipped with the job; default only `entry_point` is shipped.
        role: The ServiceAccount the instances run as (spec.serviceAccountName), where SageMaker takes an IAM
            role: on EKS, a ServiceAccount annotated `eks.amazonaws.com/role-arn: <the role's ARN>` gives the
            job that role (IRSA). An ARN itself is refused, saying so. Default: the operator's runtime account.
        instance_type: A ComputePool name or SageMaker type (homogeneous cluster).
        instance_count: Instances of the homogeneous cluster.
        instance_groups: Heterogeneous groups (excludes `instance_type` and `instance_count`); at most 5.
        hyperparameters: Written to hyperparameters.json and SM_HP_* (see `encode_hyperparameters`).
        distribution: SageMaker's distribution dict (`{"torch_distributed": {"enabled": True},
            "instance_groups": [...]}`); its group becomes `spec.distributionInstanceGroups`.
        image_uri: Runtime image; default the operator's.
        base_job_name: Stem of generated job names; default the entry point's stem.
        environment: Environment variables of every instance.
        max_run: Seconds the job may run before it fails.
        namespace: Namespace; default the kubeconfig context's.
        output_path: Where model.tar.gz and output.tar.gz are kept (s3://bucket/prefix or pvc://claim[/path]);
            `model_data` names the model's archive after `fit`. Without it the outputs vanish with the pods.
        checkpoint_s3_uri: Where /opt/ml/checkpoints is kept (s3://bucket/prefix or pvc://claim[/path]): restored
            into every instance before the script starts, so a retry resumes (SageMaker's checkpoint_s3_uri).
        checkpoint_local_path: Only SageMaker's default, /opt/ml/checkpoints.
        max_retry_attempts: Times a failed job is retried from scratch (spec.backoffLimit, at most 10); with
            checkpoint_s3_uri a retry resumes from the checkpoints.
        s3_endpoint_url: S3-compatible endpoint of `output_path` and `checkpoint_s3_uri` (SageMaker's S3 needs none).
        s3_credentials_secret: Secret with the AWS keys for them (labelled kubepool.dev/credentials=true).
        sagemaker_session: The cluster connection (`kubepool.jobs.connect(context=...)`, where SageMaker takes
            its Session); default from the kubeconfig.
        **kwargs: SageMaker's other arguments, each honoured or refused (kubepool.sagemaker.options): `tags`
            (the job's annotation kubepool.dev/sagemaker-tags), `input_mode` (the channels' default),
            `model_uri`/`model_channel_name` (one more input channel), `container_log_level` (the toolkit's);
            framework_version and py_version are the framework estimators' (kubepool.sagemaker.pytorch.PyTorch,
            .tensorflow.TensorFlow).

    Raises:
        ValueError: The instance arguments break SageMaker's rules, or a SageMaker argument kubepool cannot honour.
        TypeError: An argument the SageMaker SDK does not have either.
    """

    def __init__(
        self,
        entry_point: str,
        source_dir: str | None = None,
        role: str | None = None,
        instance_type: str | None = None,
        instance_count: int | None = None,
        instance_groups: Sequence[InstanceGroup] | None = None,
        hyperparameters: Mapping[str, Any] | None = None,
        distribution: Mapping[str, Any] | None = None,
        image_uri: str | None = None,
        base_job_name: str | None = None,
        environment: Mapping[str, str] | None = None,
        max_run: int | None = None,
        namespace: str | None = None,
        output_path: str | None = None,
        checkpoint_s3_uri: str | None = None,
        checkpoint_local_path: str | None = None,
        max_retry_attempts: int | None = None,
        s3_endpoint_url: str | None = None,
        s3_credentials_secret: str | None = None,
        sagemaker_session: Any = None,
        **kwargs: Any,
    ) -> None:
        self.options = take_sagemaker_options(kwargs, f"{type(self).__name__}.__init__")
        if instance_groups:
            if instance_type is not None or instance_count is not None:
                raise ValueError("instance_count and instance_type cannot be set when instance_groups is set")
            if len(instance_groups) > MAX_GROUPS:
                raise ValueError(f"instance_groups: at most {MAX_GROUPS} instance groups are allowed")
        elif instance_type is None or instance_count is None:
            raise ValueError("instance_count and instance_type must be set if instance_groups is not set")
        self.entry_point = entry_point
        self.source_dir = source_dir
        if role is not None and not isinstance(role, str):
            raise ValueError(f"role: a ServiceAccount name, not {role!r}")
        if role is not None and role.startswith("arn:"):
            raise ValueError(f"role {role!r}: name a ServiceAccount (on EKS, one annotated eks.amazonaws.com/role-arn: "
                             f"{role}), not an IAM role ARN")
        self.role = role
        self.instance_type = instance_type
        self.instance_count = instance_count
        self.instance_groups = list(instance_groups or ())
        self.hyperparameters = dict(hyperparameters or {})
        self.distribution = dict(distribution or {})
        self.distribution_instance_groups = distribution_groups(self.distribution, self.instance_groups)
        self.image_uri = image_uri
        self.base_job_name = base_job_name
        self.environment = dict(environment or {})
        self.max_run = max_run
        self.namespace = namespace
        self.sagemaker_session = sagemaker_session
        self.output = output_location(output_path, s3_endpoint_url, s3_credentials_secret) if output_path else None
        if checkpoint_local_path not in (None, CHECKPOINT_DIR):
            raise ValueError(f"checkpoint_local_path: only {CHECKPOINT_DIR} (SageMaker's default) is supported")
        if max_retry_attempts is not None and not 0 <= max_retry_attempts <= 10:
            raise ValueError(f"max_retry_attempts must be between 0 and 10 (the MLJob's backoffLimit), not {max_retry_attempts}")
        self.max_retry_attempts = max_retry_attempts
        self.checkpoint = (checkpoint_location(checkpoint_s3_uri, s3_endpoint_url, s3_credentials_secret)
                           if checkpoint_s3_uri else None)
        self.latest_training_job: MLJob | None = None

    def _payload_and_entrypoint(self) -> tuple[list[PayloadFile], Entrypoint]:
        if self.source_dir:
            files = directory_payload(Path(self.source_dir))
            if self.entry_point not in {f.path for f in files}:
                raise ValueError(f"entry_point {self.entry_point!r} is not a file of source_dir {self.source_dir}")
            return files, Entrypoint(file=self.entry_point)
        path = Path(self.entry_point)
        return file_payload(path), Entrypoint(file=path.name)

    def build_job(self, kube: Kube, inputs: Any = None,
                  job_name: str | None = None) -> tuple[api.MLJob, list[PayloadFile]]:
        """The MLJob that `fit` creates (pools resolved through `kube`) and its payload."""
        name = check_name(job_name) if job_name else generate_name(self.base_job_name or Path(self.entry_point).stem)
        files, entrypoint = self._payload_and_entrypoint()
        hp = {**encode_hyperparameters(self.hyperparameters), **strategy_hyperparameters(self.distribution),
              **self.options.hyperparameters}
        if self.distribution_instance_groups:
            hp["sagemaker_distribution_instance_groups"] = json.dumps(self.distribution_instance_groups)
        groups = [api.InstanceGroup(name=g.instance_group_name, compute_pool=resolve_pool(kube, g.instance_type),
                                    instance_count=g.instance_count,
                                    instance_type=g.instance_type if is_sagemaker_type(g.instance_type) else None)
                  for g in self.instance_groups]
        job = build_mljob(
            name=name, namespace=self.namespace or kube.namespace, entrypoint=entrypoint,
            compute_pool=resolve_pool(kube, self.instance_type) if self.instance_type else None,
            instance_groups=groups or None, target_instances=self.instance_count,
            env_vars=self.environment, image=self.image_uri, mode=RunMode.SAGEMAKER,
            channels=self._channels(inputs), hyper_parameters=hp,
            distribution_instance_groups=self.distribution_instance_groups or None,
            active_deadline_seconds=self.max_run, output=self.output, checkpoint=self.checkpoint,
            backoff_limit=self.max_retry_attempts or 0,
            spec_overrides={"serviceAccountName": self.role} if self.role else None,
            instance_type=self.instance_type if self.instance_type and is_sagemaker_type(self.instance_type) else None,
        )
        annotate(job, self.options.annotations)
        return job, files

    def _channels(self, inputs: Any) -> list[api.Channel]:
        channels = build_channels(inputs, self.instance_groups, self.options.input_mode)
        if self.options.model_uri:
            name = self.options.model_channel_name
            if name in {c.name for c in channels}:
                raise ValueError(f"model_channel_name {name!r} is also a channel of fit(inputs=...)")
            model = TrainingInput(self.options.model_uri, content_type="application/x-sagemaker-model",
                                  input_mode="File")
            channels.append(model.to_channel(name))
        return channels

    @property
    def model_data(self) -> str | None:
        """Where the last finished job's model.tar.gz is (SageMaker's `model_data`); None before a job is DONE
        or without `output_path`."""
        job = self.latest_training_job
        if job is None:
            return None
        st = job.refresh().status
        return st.outputs.model_artifacts if st is not None and st.outputs is not None else None

    def fit(self, inputs: str | TrainingInput | Mapping[str, str | TrainingInput] | None = None,
            wait: bool = True, logs: bool = True, job_name: str | None = None, experiment_config: Any = None) -> MLJob:
        """Start a training job.

        Args:
            inputs: Channels: a mapping of channel name to `TrainingInput` (or source string), or one input for
                the channel `training`.
            wait: Block until the job ends.
            logs: While waiting, print the head's log (instance 0, `algo-1`).
            job_name: Job name; default `<base_job_name or entry point stem>-<8 hex>`.
            experiment_config: Refused when set (SageMaker Experiments).

        Returns:
            The job's handle (also `self.latest_training_job`).

        Raises:
            UnexpectedStatusException: `wait` is set and the job ended FAILED or CANCELLED.
            ValueError: Invalid channels, no pool for an instance type, or experiment_config set.
        """
        if experiment_config:
            raise ValueError(f"experiment_config={experiment_config!r} is not supported: {REFUSED_FIT['experiment_config']}")
        kube = connect(self.namespace, session=self.sagemaker_session)
        job_obj, files = self.build_job(kube, inputs, job_name)
        job = self.latest_training_job = submit(kube, job_obj, files)
        if wait:
            if logs:
                for line in job.follow_logs():
                    print(line)
            status = job.wait()
            if status != "DONE":
                raise UnexpectedStatusException(f"Error for training job {job.id}: {status}. Reason: {job.message}")
        return job
