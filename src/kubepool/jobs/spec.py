"""Pure construction of MLJob objects from the SDK's arguments: job names, instance-count rules and the
spec. No I/O, so every rule here is unit-tested without a cluster."""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from kubepool import naming
from kubepool.api import Channel, CodeSource, Entrypoint, InstanceGroup, MLJob, MLJobSpec
from kubepool.api.mljob import CheckpointLocation, OutputLocation
from kubepool.contract import RunMode

# MLJob names prefix pod and Service names, so the CRD caps them below the 63 of a DNS label.
MAX_JOB_NAME = 40
_SUFFIX_LEN = 8
_NAME = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")  # a letter first: the CRD's rule (MLJob.cel_rules, api/mljob.py)


def generate_name(stem: str) -> str:
    """A fresh job name in Snowflake's style, `<stem>-<8 hex>` (Snowflake: `<stem>_<8 hex>`), as a DNS label
    of at most 40 characters, e.g. `train-3f9a1c2b` for `train.py`."""
    base = naming.dns_label(stem)[: MAX_JOB_NAME - _SUFFIX_LEN - 1].strip("-") or "job"
    if not base[0].isalpha():  # `2024_train.py`: job names start with a letter
        base = f"job-{base}"[: MAX_JOB_NAME - _SUFFIX_LEN - 1].strip("-")
    return f"{base}-{secrets.token_hex(_SUFFIX_LEN // 2)}"


def check_name(name: str) -> str:
    """Return `name` if it is a valid MLJob name, else raise ValueError saying what a valid one is."""
    if len(name) > MAX_JOB_NAME or not _NAME.match(name):
        raise ValueError(
            f"invalid job name {name!r}: use lowercase letters, digits and '-', starting with a letter and "
            f"ending with a letter or digit, at most {MAX_JOB_NAME} characters"
        )
    return name


def check_instances(target_instances: int, min_instances: int | None) -> tuple[int, int]:
    """Snowflake's rules: `target_instances >= 1` and `0 < min_instances <= target_instances`.

    Returns:
        (target, min), min defaulting to target.
    """
    if target_instances < 1:
        raise ValueError(f"target_instances must be at least 1 (got {target_instances})")
    resolved_min = target_instances if min_instances is None else min_instances
    if resolved_min < 1:
        raise ValueError(f"min_instances must be greater than 0 (got {resolved_min})")
    if resolved_min > target_instances:
        raise ValueError(
            f"min_instances ({resolved_min}) must be less than or equal to target_instances ({target_instances})"
        )
    return target_instances, resolved_min


def _readable(err: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in err.errors())


def build_mljob(
    *,
    name: str,
    namespace: str,
    entrypoint: Entrypoint,
    compute_pool: str | None = None,
    instance_groups: Sequence[InstanceGroup] | None = None,
    target_instances: int | None = None,
    min_instances: int | None = None,
    args: Sequence[Any] = (),
    env_vars: Mapping[str, Any] | None = None,
    pip_requirements: Sequence[str] | None = None,
    instances_timeout: int = naming.DEFAULT_INSTANCES_TIMEOUT_SECONDS,
    image: str | None = None,
    mode: RunMode = RunMode.HEAD,
    with_payload: bool = True,
    channels: Sequence[Channel] | None = None,
    hyper_parameters: Mapping[str, str] | None = None,
    distribution_instance_groups: Sequence[str] | None = None,
    active_deadline_seconds: int | None = None,
    output: OutputLocation | None = None,
    instance_type: str | None = None,
    checkpoint: CheckpointLocation | None = None,
    backoff_limit: int = 0,
    spec_overrides: Mapping[str, Any] | None = None,
    labels: Mapping[str, str] | None = None,
    queue: str | None = None,
) -> MLJob:
    """The MLJob object the SDK creates (validated the way the API server will validate it).

    Args:
        name: Job name (see `check_name`).
        namespace: Namespace of the job.
        entrypoint: What the head (or every instance) runs.
        compute_pool: Pool of every instance (single-pool form).
        instance_groups: SageMaker-style groups instead of `compute_pool`.
        target_instances: Instances to start (single-pool form).
        min_instances: Instances that must be ready before the payload starts.
        args: Arguments passed to the entrypoint (converted with `str`).
        env_vars: Environment of every instance (values converted with `str`).
        pip_requirements: Installed on every instance at start.
        instances_timeout: Seconds to wait for `min_instances`.
        image: Runtime image (default: the operator's).
        mode: head, parallel or sagemaker.
        with_payload: Whether the code comes from the job's payload ConfigMap.
        channels: Input channels.
        hyper_parameters: SageMaker hyperparameters.
        distribution_instance_groups: Groups that run distributed training.
        active_deadline_seconds: The job fails after this many seconds running.
        output: Where /opt/ml/model and /opt/ml/output/data are kept after the job.
        instance_type: The SageMaker instance type scripts read (single-pool form).
        checkpoint: Where /opt/ml/checkpoints is kept across attempts.
        backoff_limit: Times a failed job is retried from scratch.
        spec_overrides: MLJob spec fields (as in the CRD: `serviceAccountName`, `volumes`, `volumeMounts`,
            `env` with `valueFrom`, `podLabels`, `tolerations`, ...) set over the generated spec, field by field.
        labels: Labels of the MLJob (e.g. Kueue's `kueue.x-k8s.io/queue-name`).
        queue: Kueue's LocalQueue of the job (its `kueue.x-k8s.io/queue-name` label; wins over `labels`).

    Raises:
        ValueError: An argument breaks a rule of the MLJob API; the message names the field.
    """
    check_name(name)
    if compute_pool is not None:
        target, minimum = check_instances(target_instances or 1, min_instances)
    else:
        total = sum(g.instance_count for g in instance_groups or ())
        target, minimum = check_instances(total, min_instances)
    try:
        spec = MLJobSpec(
            compute_pool=compute_pool,
            target_instances=target if compute_pool is not None else None,
            min_instances=minimum,
            instances_timeout_seconds=instances_timeout,
            instance_groups=list(instance_groups) if instance_groups else None,
            channels=list(channels) if channels else None,
            image=image,
            entrypoint=entrypoint,
            args=[str(a) for a in args],
            env=[{"name": k, "value": str(v)} for k, v in (env_vars or {}).items()],  # dicts: MLJobSpec validates them, so errors name the field
            code=CodeSource(config_map=naming.payload_configmap_name(name)) if with_payload else None,
            pip_requirements=list(pip_requirements or ()),
            hyper_parameters=dict(hyper_parameters or {}),
            mode=mode,
            distribution_instance_groups=list(distribution_instance_groups) if distribution_instance_groups else None,
            active_deadline_seconds=active_deadline_seconds,
            output=output,
            instance_type=instance_type,
            checkpoint=checkpoint,
            backoff_limit=backoff_limit,
        )
        if spec_overrides:
            spec = MLJobSpec.model_validate({**spec.wire(), **spec_overrides})
    except ValidationError as err:
        raise ValueError(f"invalid job {name}: {_readable(err)}") from None
    all_labels = {**(labels or {}), **({naming.LABEL_KUEUE_QUEUE: queue} if queue else {}),
                  naming.LABEL_MANAGED_BY: naming.MANAGED_BY}
    if naming.LABEL_KUEUE_QUEUE in all_labels:
        # Kueue's contract: a queued job is created suspended and Kueue's admission resumes it, so no pod can
        # start before the admission's flavors are known (deploy/kueue's policy does the same for kubectl).
        spec = spec.model_copy(update={"suspend": True})
    return MLJob(metadata={"name": name, "namespace": namespace, "labels": all_labels}, spec=spec)
