"""MLJob: one logical job of N instances (instance 0 is the head), on one compute pool or on several
SageMaker-style instance groups with input channels. Pure pydantic: the CRD is generated from it, and each model's
cross-field rules (`cel_rules`; the spec's in mljob_rules.py) become CEL `x-kubernetes-validations` so `kubectl apply`
refuses bad specs."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

from pydantic import Field
from pydantic.config import JsonDict

from kubepool import naming
from kubepool.api import mljob_rules
from kubepool.api.common import (
    DNS_LABEL_PATTERN,
    LONG_STR,
    MAX_INSTANCES,
    NAME_MAX,
    SHORT_STR,
    Condition,
    Model,
)
from kubepool.api.podsettings import PodSettings
from kubepool.contract import Distribution, InputMode, RunMode

MAX_GROUPS = 5
# SageMaker names such as instance_group_1. Separators only between letters or digits: a group's pods and labels use
# its name lowercased with '_' as '-' (naming.dns_label), and `a_` or `a__b` would collide there with `a` or `a-b`.
GROUP_NAME_PATTERN = r"^[A-Za-z0-9]+([_-][A-Za-z0-9]+)*$"
CHANNEL_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
REL_PATH_RULE: JsonDict = {"rule": "!self.startsWith('/') && !self.split('/').exists(p, p == '..')", "message": "must be a relative path without '..'"}
# A key becomes the variable SM_HP_<KEY> of every instance: no '=' (or the runtime cannot start the payload).
HP_KEY_RULE: JsonDict = {"rule": "self.all(k, size(k) >= 1 && size(k) <= 256 && !k.contains('='))",
                         "message": "hyperParameters keys must be 1 to 256 characters without '='"}
NO_DOTDOT_RULE: JsonDict = {"rule": "!self.split('/').exists(p, p == '..')", "message": "must not contain '..'"}


SAGEMAKER_TYPE_PATTERN = r"^ml\.[a-z0-9-]+\.[a-z0-9]+$"


class InstanceGroup(PodSettings):
    """A SageMaker-style instance group: `count` instances on one compute pool, with its own pod settings merged
    over the job's (env, envFrom, volumes, volumeMounts, serviceAccountName, podLabels, podAnnotations, affinity,
    tolerations, priorityClassName)."""

    name: str = Field(pattern=GROUP_NAME_PATTERN, max_length=40, description="Group name, unique in the job (e.g. instance_group_1); '_' or '-' only between letters or digits.")
    compute_pool: str = Field(pattern=DNS_LABEL_PATTERN, max_length=NAME_MAX, description="ComputePool the group's instances run on.")
    instance_count: int = Field(ge=1, le=MAX_INSTANCES, description="Instances in the group.")
    instance_type: str | None = Field(None, pattern=SAGEMAKER_TYPE_PATTERN, max_length=64, description="SageMaker instance type the group stands for (ml.c5.xlarge), written into resourceconfig.json and SM_CURRENT_INSTANCE_TYPE; default the pool's instance family.")


class S3Source(Model):
    """Objects under an S3 (or S3-compatible) prefix, fetched at start with boto3."""

    uri: str = Field(pattern=r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/.*)?$", max_length=1024, description="s3://bucket/prefix of the channel's objects.")
    endpoint_url: str | None = Field(None, max_length=SHORT_STR, pattern=r"^https?://", description="S3-compatible endpoint (default: the runtime's AWS config).")
    credentials_secret: str | None = Field(None, pattern=DNS_LABEL_PATTERN, max_length=NAME_MAX, description="Secret with AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY; it must carry the label kubepool.dev/credentials=true (else the job FAILS: CredentialsNotAllowed).")


class PvcSource(Model):
    """Files in a PersistentVolumeClaim, mounted read-only."""

    claim_name: str = Field(pattern=DNS_LABEL_PATTERN, max_length=NAME_MAX, description="PersistentVolumeClaim holding the channel's files.")
    sub_path: str | None = Field(None, max_length=SHORT_STR, json_schema_extra={"x-kubernetes-validations": [REL_PATH_RULE]}, description="Directory inside the claim.")


class ConfigMapSource(Model):
    """Small files kept in a ConfigMap, mounted read-only."""

    name: str = Field(pattern=DNS_LABEL_PATTERN, max_length=NAME_MAX, description="ConfigMap whose keys are the channel's files.")


class ChannelSource(Model):
    """Where a channel's objects come from: exactly one of s3, persistentVolumeClaim, configMap."""

    s3: S3Source | None = None
    persistent_volume_claim: PvcSource | None = None
    config_map: ConfigMapSource | None = None

    cel_rules = [
        {"rule": "(has(self.s3) ? 1 : 0) + (has(self.persistentVolumeClaim) ? 1 : 0) + (has(self.configMap) ? 1 : 0) == 1",
         "message": "set exactly one of s3, persistentVolumeClaim or configMap"},
    ]


class OutputLocation(Model):
    """Where a job's outputs are kept after it ends, in SageMaker's layout: <location>/<job name>/output/
    model.tar.gz (/opt/ml/model) and output.tar.gz (/opt/ml/output/data). Exactly one of s3, persistentVolumeClaim."""

    s3: S3Source | None = None
    persistent_volume_claim: PvcSource | None = None

    cel_rules = [
        {"rule": "has(self.s3) != has(self.persistentVolumeClaim)", "message": "set exactly one of s3 or persistentVolumeClaim"},
    ]


class CheckpointLocation(Model):
    """Where /opt/ml/checkpoints lives beyond one attempt (SageMaker's checkpoint_s3_uri): an S3 prefix it is synced
    to while the job runs and restored from when an instance starts, or a PVC mounted there. Exactly one."""

    s3: S3Source | None = None
    persistent_volume_claim: PvcSource | None = None

    cel_rules = [
        {"rule": "has(self.s3) != has(self.persistentVolumeClaim)", "message": "set exactly one of s3 or persistentVolumeClaim"},
    ]


class JobOutputs(Model):
    """Where a finished job's outputs are (status.outputs)."""

    model_artifacts: str | None = Field(None, description="model.tar.gz of /opt/ml/model (SageMaker's ModelArtifacts).")
    output_data: str | None = Field(None, description="output.tar.gz of /opt/ml/output/data.")


class Wheelhouse(Model):
    """Wheels for air-gapped clusters: exactly one of persistentVolumeClaim, configMap (a key per .whl file)."""

    persistent_volume_claim: PvcSource | None = None
    config_map: ConfigMapSource | None = None

    cel_rules = [
        {"rule": "has(self.configMap) != has(self.persistentVolumeClaim)", "message": "set exactly one of configMap or persistentVolumeClaim"},
    ]


class PipOptions(Model):
    """Where an MLJob's pipRequirements come from."""

    index_url: str | None = Field(None, max_length=SHORT_STR, pattern=r"^https?://", description="Package index (pip's --index-url).")
    extra_index_urls: list[str] = Field(default_factory=list, max_length=8, json_schema_extra={"items": {"type": "string", "maxLength": SHORT_STR, "pattern": "^https?://"}},
                                        description="More package indexes (pip's --extra-index-url).")
    wheelhouse: Wheelhouse | None = Field(None, description="Wheels mounted on every instance (pip's --find-links); without indexUrl, the only source (--no-index).")


class Channel(Model):
    """An input channel, mounted at /opt/ml/input/data/<name> on the instances it is assigned to."""

    name: str = Field(pattern=CHANNEL_NAME_PATTERN, max_length=64, description="Channel name (SM_CHANNEL_<NAME>).")
    source: ChannelSource = Field(description="Where the data comes from.")
    distribution: Distribution = Field(Distribution.FULLY_REPLICATED, description="FullyReplicated: every instance gets all objects; ShardedByS3Key: each gets a disjoint share.")
    instance_groups: list[str] | None = Field(
        None, max_length=MAX_GROUPS, json_schema_extra={"items": {"type": "string", "maxLength": 40}},
        description="Groups that receive the channel (default all). If one channel names groups, all must.",
    )
    content_type: str | None = Field(None, max_length=SHORT_STR, description="MIME type recorded in inputdataconfig.json.")
    input_mode: InputMode = Field(InputMode.FILE, description="SageMaker's TrainingInputMode, recorded in inputdataconfig.json. "
                                  "File and FastFile both give the script the channel's files at its path before it starts "
                                  "(FastFile streams on SageMaker; here it is downloaded first). Pipe is not supported.")


class Entrypoint(Model):
    """What the head (or every instance) runs: exactly one of file, module, command."""

    file: str | None = Field(None, max_length=SHORT_STR, json_schema_extra={"x-kubernetes-validations": [REL_PATH_RULE]}, description="Python file, relative to the payload directory.")
    module: str | None = Field(None, max_length=SHORT_STR, pattern=r"^[A-Za-z_][A-Za-z0-9_.]*$", description="Python module run as `python -m`.")
    command: list[str] | None = Field(None, min_length=1, max_length=64, json_schema_extra={"items": {"type": "string", "maxLength": LONG_STR}}, description="Any command.")
    function: str | None = Field(None, max_length=SHORT_STR, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", description="Function in `file` to call (@remote); its return value is the job's result.")

    cel_rules = [
        {"rule": "(has(self.file) ? 1 : 0) + (has(self.module) ? 1 : 0) + (has(self.command) ? 1 : 0) == 1", "message": "set exactly one of file, module or command"},
        {"rule": "!has(self.function) || has(self.file)", "message": "function needs file"},
    ]


class CodeSource(Model):
    """Where the payload's code comes from; without it the code is already in the image."""

    config_map: str | None = Field(None, pattern=DNS_LABEL_PATTERN, max_length=NAME_MAX, description="ConfigMap written by the SDK (owned by the job).")
    persistent_volume_claim: PvcSource | None = Field(None, description="A claim holding the code (for payloads too large for a ConfigMap).")

    cel_rules = [
        {"rule": "has(self.configMap) != has(self.persistentVolumeClaim)", "message": "set exactly one of configMap or persistentVolumeClaim"},
    ]


class Backend(StrEnum):
    PODS = "pods"
    KUBERAY = "kuberay"


class RaySpec(Model):
    """Ray settings of the job's cluster."""

    auth_mode: Literal["token", "disabled"] = Field("token", description="Ray token authentication; on by default (ShadowRay, CVE-2023-48022).")
    dashboard: bool = Field(True, description="Run Ray's dashboard on the head (get_ray_dashboard_url). Off, the head skips loading it: about 1.5 s sooner to the payload on a small node.")


class MLJobSpec(PodSettings):
    """Desired state of an MLJob. Its pod settings (env, envFrom, volumes, volumeMounts, serviceAccountName,
    podLabels, podAnnotations, affinity, tolerations, priorityClassName) apply to every instance; an instance
    group's merge over them."""

    compute_pool: str | None = Field(None, pattern=DNS_LABEL_PATTERN, max_length=NAME_MAX, description="ComputePool of every instance (single-pool form; excludes instanceGroups).")
    target_instances: int | None = Field(None, ge=1, le=MAX_INSTANCES, description="Instances to start (default 1; with instanceGroups: the sum of the counts).")
    min_instances: int | None = Field(None, ge=1, le=MAX_INSTANCES, description="Instances (head counted) that must be ready to start (default: targetInstances).")
    instances_timeout_seconds: int = Field(naming.DEFAULT_INSTANCES_TIMEOUT_SECONDS, ge=1, le=86400, description="Seconds to wait for minInstances before the job FAILS with InstancesUnavailable.")
    instance_groups: list[InstanceGroup] | None = Field(None, min_length=1, max_length=MAX_GROUPS, description="SageMaker-style instance groups (excludes computePool); the head is the first group's first instance.")
    channels: list[Channel] | None = Field(None, max_length=20, description="Input channels.")
    image: str | None = Field(None, max_length=512, pattern=r"^\S+$", description="Runtime image (default from the operator's configuration).")
    entrypoint: Entrypoint = Field(description="What to run.")
    args: list[str] = Field(default_factory=list, max_length=256, json_schema_extra={"items": {"type": "string", "maxLength": LONG_STR}}, description="Arguments passed to the entrypoint, never through a shell.")
    working_dir: str | None = Field(None, max_length=SHORT_STR, json_schema_extra={"x-kubernetes-validations": [NO_DOTDOT_RULE]}, description="Working directory (default: the payload directory).")
    code: CodeSource | None = Field(None, description="Where the payload comes from.")
    pip_requirements: list[str] = Field(default_factory=list, max_length=128, json_schema_extra={"items": {"type": "string", "maxLength": SHORT_STR, "pattern": "^[A-Za-z0-9]"}}, description="pip requirements (each a requirement, never a pip option: it starts with a letter or digit) every instance installs before anything starts, into a job-private location (never the image's environment); from pipOptions' index or wheelhouse, else the operator's. A failed install FAILS the job with reason PipInstallFailed.")
    instance_type: str | None = Field(None, pattern=SAGEMAKER_TYPE_PATTERN, max_length=64, description="SageMaker instance type of the computePool form (ml.c5.xlarge), written into resourceconfig.json and SM_CURRENT_INSTANCE_TYPE; default the pool's instance family. With instanceGroups, set it per group.")
    checkpoint: CheckpointLocation | None = Field(None, description="Keep /opt/ml/checkpoints across attempts (backoffLimit): restored into every instance before the payload starts, kept while it runs (S3: synced every few seconds and at the end; a PVC: mounted there).")
    output: OutputLocation | None = Field(None, description="Keep /opt/ml/model and /opt/ml/output/data after the job (SageMaker's OutputDataConfig): uploaded by every instance when its payload ends; status.outputs names them. Without it they vanish with the pods.")
    pip_options: PipOptions | None = Field(None, description="Where pipRequirements come from (default: the operator's configuration, else PyPI).")
    hyper_parameters: dict[str, str] = Field(default_factory=dict, json_schema_extra={"maxProperties": 128, "additionalProperties": {"type": "string", "maxLength": LONG_STR},
                                                                                   "x-kubernetes-validations": [HP_KEY_RULE]}, description="Hyperparameters (hyperparameters.json, SM_HP_*).")
    mode: RunMode = Field(RunMode.HEAD, description="head: run on the head of a Ray cluster; parallel: on every instance; sagemaker: SageMaker script mode on every instance.")
    distribution_instance_groups: list[str] | None = Field(None, max_length=MAX_GROUPS, json_schema_extra={"items": {"type": "string", "maxLength": 40}}, description="Groups that run the distributed training (SageMaker).")
    backend: Backend | None = Field(None, description="pods (built in) or kuberay (a KubeRay RayCluster); default from the operator's configuration.")
    ray: RaySpec = Field(default_factory=RaySpec, description="Ray settings.")
    active_deadline_seconds: int | None = Field(None, ge=1, le=31536000, description="The job FAILS (DeadlineExceeded) after this many seconds since it started.")
    backoff_limit: int = Field(0, ge=0, le=10, description="Times a failed job is retried from scratch before it FAILS.")
    ttl_seconds_after_finished: int | None = Field(None, ge=0, le=31536000, description="Delete the finished job (and its pods) after this many seconds.")
    suspend: bool = Field(False, description=(
        "Pause the job, as with Job, JobSet and RayJob: its pods are deleted and its pools' capacity released at "
        "once; it stays PENDING with reason Suspended and the condition Suspended. Set back to false, it joins the "
        "end of its pools' first-in-first-out queue and runs from scratch (a new attempt, which backoffLimit does "
        "not count). Created suspended, it starts nothing until resumed: the contract of a queue manager such as "
        "Kueue, whose admission sets it false (a job labelled kueue.x-k8s.io/queue-name is created suspended by "
        "Kueue's webhook or a MutatingAdmissionPolicy; docs/install.md)."))
    cancel: bool = Field(False, description=(
        "Cancel the job for good: its pods are deleted and it becomes CANCELLED (reason Cancelled). "
        "It cannot be set back to false (to pause a job instead, use suspend)."))

    cel_rules = mljob_rules.MLJOB_SPEC_RULES  # long, and the transitions generated: their own module

    def resolved_target(self) -> int:
        if self.instance_groups:
            return sum(g.instance_count for g in self.instance_groups)
        return self.target_instances or 1

    def resolved_min(self) -> int:
        return self.min_instances or self.resolved_target()


class JobPhase(StrEnum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    DONE = "DONE"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"

    @property
    def finished(self) -> bool:
        return self in (JobPhase.DONE, JobPhase.FAILED, JobPhase.CANCELLED)


JOB_CONDITION_TYPES = ("Admitted", "InstancesReady", "Complete", "Failed", "Suspended")  # what the operator writes, in order


class InstanceStatus(Model):
    instance_id: int = Field(description="Global instance id; 0 is the head.")
    group: str = Field(description="Instance group.")
    rank_in_group: int = Field(description="Rank inside the group.")
    host: str = Field(description="SageMaker host name (algo-N) and pod hostname.")
    pod: str = Field(description="Pod name.")
    pod_uid: str | None = Field(None, max_length=NAME_MAX, description="UID of the pod: the runtime's admission policy lets a pod's token change only the job that lists it.")
    node: str | None = Field(None, description="Node the pod runs on.")
    phase: str | None = Field(None, description="Pod phase.")
    ready: bool = Field(False, description="Pod is Ready.")
    exit_code: int | None = Field(None, description="Exit code of the instance's container once it terminated.")
    message: str | None = Field(None, max_length=LONG_STR, description="Termination message or waiting reason.")


class GroupInstanceIds(Model):
    group: str = Field(description="Instance group.")
    ids: list[int] = Field(description="Its instances' global ids, in rank order.")


class InstanceLayout(Model):
    """Which instance ids each group holds once the job was resized (absent while they are the consecutive ids in
    group order): a group that grows takes new ids past every id handed out, one that shrinks gives up its
    highest ranks, so no instance's id, host (algo-N) or rank ever changes or goes to another while the job runs."""

    groups: list[GroupInstanceIds] = Field(description="Every group's ids, in spec order.")
    next_id: int = Field(description="The next id to hand out: past every id used so far, live or removed.")


class MLJobStatus(Model):
    """Observed state of an MLJob, computed by a pure function and written only when it changes."""

    phase: JobPhase | None = Field(None, description="PENDING, RUNNING, DONE, FAILED or CANCELLED.")
    reason: str | None = Field(None, description="Why the job is in its phase (Queued, InstancesUnavailable, HeadFailed, ...).")
    message: str | None = Field(None, description="Human-readable summary.")
    conditions: list[Condition] = Field(default_factory=list, description="Conditions, always all of: "
                                        + ", ".join(JOB_CONDITION_TYPES) + " (each with observedGeneration).")
    observed_generation: int | None = Field(None, description="Spec generation this status reflects.")
    target_instances: int | None = Field(None, description="Resolved target.")
    min_instances: int | None = Field(None, description="Resolved minimum.")
    ready_instances: int = Field(0, description="Instances whose pods are Ready.")
    ready: str | None = Field(None, description="ready/target, for kubectl.")
    selector: str | None = Field(None, description="Label selector of the job's pods (the scale subresource's, "
                                 "for autoscalers).")
    pools: str | None = Field(None, description="Compute pools of the job, comma separated.")
    instances: list[InstanceStatus] = Field(default_factory=list, description="One entry per instance.")
    instance_layout: InstanceLayout | None = Field(None, description="Each group's instance ids after a resize "
                                                   "(scale_cluster); absent while they are consecutive in group order.")
    admitted_at: datetime | None = Field(None, description="When capacity was granted (the instances timeout counts from here).")
    start_time: datetime | None = Field(None, description="When the payload started (RUNNING).")
    completion_time: datetime | None = Field(None, description="When the job finished.")
    attempt: int = Field(0, description="Attempt: a retry (backoffLimit) or a resume after a suspension starts a new one.")
    suspended_attempts: int = Field(0, description="Attempts a suspension ended: backoffLimit does not count them.")
    queued_at: datetime | None = Field(None, description="When the job last joined its pools' first-in-first-out "
                                       "queue after a suspension (unset: its creation time is its place).")
    ray_dashboard: str | None = Field(None, description="Ray dashboard address inside the cluster.")
    outputs: JobOutputs | None = Field(None, description="Where the outputs are kept (spec.output), once the job is DONE.")


class MLJob(Model):
    """A multi-instance ML job."""

    api_version: str = "kubepool.dev/v1alpha1"
    kind: str = "MLJob"
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: MLJobSpec
    status: MLJobStatus | None = None

    cel_rules = [
        # A letter first: the job's Service is `<name>-svc` (naming.service_name, KubeRay's `<name>-head-svc`), and
        # Kubernetes before 1.34 refuses a Service whose name is not a DNS-1035 label (one starting with a digit).
        {"rule": "self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$') && size(self.metadata.name) <= 40",
         "message": "MLJob names must be DNS labels of at most 40 characters starting with a letter (they prefix pod "
                    "and Service names; a Service name starting with a digit is refused before Kubernetes 1.34)"},
    ]
