"""The runtime contract: what the operator tells every instance of a job, and how the runtime reads it.

One JSON document per job (`JobContract`, mounted from the job's Secret at `CONTRACT_PATH`)
plus a few per-pod env vars (`ENV_INSTANCE_ID`, `ENV_POD_IP`, ...). The operator builds it as
`JobContract(...)` (the instances, head address and Service name derive from the rest); the runtime reads it with `load_contract` and `JobContract.identity`. Pure and typed:
pydantic only, no Kubernetes client, no Ray.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from kubepool import naming

# --- per-pod env (set by the operator on each pod) -------------------------------------------------
ENV_CONTRACT_FILE = "KUBEPOOL_CONTRACT_FILE"  # where the JSON document is mounted
ENV_INSTANCE_ID = "KUBEPOOL_INSTANCE_ID"  # global instance id; 0 is the head
ENV_POD_IP = "KUBEPOOL_POD_IP"  # downward API status.podIP; Ray binds it
ENV_POD_NAME = "KUBEPOOL_POD_NAME"
ENV_NAMESPACE = "KUBEPOOL_NAMESPACE"
ENV_BASE_DIR = "KUBEPOOL_BASE_DIR"  # SageMaker's /opt/ml, configurable for local runs
ENV_PAYLOAD_DIR = "KUBEPOOL_PAYLOAD_DIR"  # where the user's code is mounted
ENV_RESULT_DIR = "KUBEPOOL_RESULT_DIR"  # where the head writes the payload's result
ENV_RAY_AUTH_TOKEN = "RAY_AUTH_TOKEN"  # from the job's Secret
ENV_RAY_AUTH_MODE = "RAY_AUTH_MODE"  # "token" on every instance and in the driver, or "disabled"
ENV_TERMINATION_LOG = "KUBEPOOL_TERMINATION_LOG"  # overrides TERMINATION_MESSAGE_PATH for local runs
ENV_RAY_TEMP_DIR = "KUBEPOOL_RAY_TEMP_DIR"  # Ray's --temp-dir; one node per pod, so /tmp/ray by default
# Local runs only: several instances share one host, and raylets bind their fixed ports on all interfaces,
# so each instance shifts its fixed per-node Ray ports by this much and lets the OS pick the rest (the
# head's GCS/dashboard/client ports are the contract's and never shift). Unset in real pods.
ENV_RAY_PORT_OFFSET = "KUBEPOOL_RAY_PORT_OFFSET"
ENV_HEAD_LOST_TIMEOUT = "KUBEPOOL_HEAD_LOST_TIMEOUT"  # seconds a worker keeps going without its head
# KubeRay backend: one pod template per worker group carries the group's first instance id and port offset;
# the pod's replica index (downward API) and the port stride shift both (`resolve_replica_index`).
ENV_REPLICA_INDEX = "KUBEPOOL_REPLICA_INDEX"
ENV_RAY_PORT_STRIDE = "KUBEPOOL_RAY_PORT_STRIDE"
# A worker group whose instance ids are not consecutive (a resized job: new instances take new ids) lists them,
# replica index order, comma separated; the replica index picks its own (`replica_instance_id`).
ENV_INSTANCE_IDS = "KUBEPOOL_INSTANCE_IDS"
# What the runtime keeps out of its termination message (status and Events are built from it): the values of these
# variables (comma separated; those the pod takes from Secrets) and of the files under these mounts (colon separated).
ENV_SECRET_ENV = "KUBEPOOL_SECRET_ENV"
ENV_SECRET_DIRS = "KUBEPOOL_SECRET_DIRS"
ENV_FRAMEWORK = "KUBEPOOL_FRAMEWORK"  # a framework estimator's package, framework_version and py_version (JSON)

# Every variable the operator sets on an instance (pods, and KubeRay's templates): an MLJob's spec.env may not
# name one (the CRD refuses it), since the user's value would be dropped or the runtime would read a lie.
OPERATOR_ENV = (
    ENV_CONTRACT_FILE, ENV_INSTANCE_ID, ENV_POD_IP, ENV_POD_NAME, ENV_NAMESPACE, ENV_BASE_DIR, ENV_PAYLOAD_DIR,
    ENV_RESULT_DIR, ENV_RAY_AUTH_TOKEN, ENV_RAY_AUTH_MODE, ENV_RAY_PORT_OFFSET, ENV_REPLICA_INDEX, ENV_RAY_PORT_STRIDE,
    ENV_INSTANCE_IDS, ENV_SECRET_ENV, ENV_SECRET_DIRS,
)

CONTRACT_DIR = "/etc/kubepool"
CONTRACT_FILENAME = "contract.json"
CONTRACT_PATH = f"{CONTRACT_DIR}/{CONTRACT_FILENAME}"
PAYLOAD_DIR = "/opt/kubepool/payload"
RESULT_DIR = "/opt/kubepool/result"
DEFAULT_BASE_DIR = "/opt/ml"
# pipRequirements: a job-private pip prefix (an emptyDir) on every instance, and where an air-gapped
# wheelhouse is mounted; pip itself reads PIP_INDEX_URL, PIP_EXTRA_INDEX_URL, PIP_FIND_LINKS, PIP_NO_INDEX.
PIP_DIR = "/opt/kubepool/pip"
OUTPUT_MOUNT = "/opt/kubepool/output"  # a PVC output location, mounted read-write
CHECKPOINT_DIR = "/opt/ml/checkpoints"  # SageMaker's checkpoint_local_path default
WHEELHOUSE_DIR = "/opt/kubepool/wheelhouse"
# Failures the runtime names itself (in its termination message's `reason`); the operator reports them as the
# job's reason instead of HeadFailed/InstanceFailed.
PIP_INSTALL_FAILED = "PipInstallFailed"
# Too few instances: never placed or started (the operator's instances timeout), or running but never joined
# the head's Ray cluster (the head's gate, Snowflake's wait_for_instances): one verdict on both paths.
INSTANCES_UNAVAILABLE = "InstancesUnavailable"
RUNTIME_FAILURE_REASONS = frozenset({PIP_INSTALL_FAILED, INSTANCES_UNAVAILABLE})
RESULT_FILENAME = "result.json"  # written by the head: {"success", "value"|"error", "traceback"}
# The payload's outcome is kept where only the job's own pods can write it: an annotation of its MLJob
# (naming.result_annotation; the runtime admission policy lets a pod's token change only its own job), never a
# log line any process of the payload could print. The head keeps its return value or failure; another instance
# only its failure (distributed_result() names the failing instance's exception). Annotations of one object share
# 256 KiB: a larger head's value goes to the job's spec.output (result_object), its SHA-256 in the annotation;
# without spec.output to the operator's results store (JobContract.results_store), else it is not kept, and the SDK
# says why.
RESULT_MAX_BYTES = 160 * 1024
RESULT_WORKER_MAX_BYTES = 8 * 1024
RESULT_ENCODING = "cloudpickle+base64"
# The head takes the results store's credentialsSecret with this prefix (an optional envFrom: a namespace without
# the Secret still runs its jobs), so it never replaces the payload's own AWS_* variables.
RESULTS_STORE_ENV_PREFIX = "KUBEPOOL_RESULTS_"
# The runtime's own log lines start with these; the payload's output sits between the two banners (Snowflake's).
RUNTIME_LOG_PREFIXES = ("kubepool[", "kubepool:")
LOG_START_MSG = "--------------------------------\nML job started\n--------------------------------"
LOG_END_MSG = "--------------------------------\nML job finished\n--------------------------------"
TERMINATION_MESSAGE_PATH = "/dev/termination-log"
TERMINATION_MESSAGE_MAX_BYTES = 4096  # Kubernetes truncates longer messages
# The operator's own volumes and mount points on an instance (pods, KubeRay's templates): a job's volumes and
# volumeMounts may not take them (the CRD refuses it), or the pod is refused or the runtime reads the user's files.
KUBEPOOL_DIR = "/opt/kubepool"  # PAYLOAD_DIR, RESULT_DIR, PIP_DIR, OUTPUT_MOUNT, WHEELHOUSE_DIR
TMP_DIR = "/tmp"
SHM_DIR = "/dev/shm"
OPERATOR_MOUNT_DIRS = (CONTRACT_DIR, KUBEPOOL_DIR, DEFAULT_BASE_DIR, TMP_DIR, SHM_DIR, TERMINATION_MESSAGE_PATH)
OPERATOR_VOLUMES = ("contract", "tmp", "base", "result", "dshm", "payload", "output", "checkpoints", "pip", "wheelhouse")
OPERATOR_VOLUME_PREFIX = "channel-"  # channel-<index>
# envFrom's Secrets are mounted read-only too, so the runtime knows their values (ENV_SECRET_DIRS) though the
# operator never reads a Secret: volume envfrom-<index> at ENV_FROM_SECRETS_DIR/<index>.
ENV_FROM_VOLUME_PREFIX = "envfrom-"
ENV_FROM_SECRETS_DIR = f"{KUBEPOOL_DIR}/envfrom"
OPERATOR_VOLUME_PREFIXES = (OPERATOR_VOLUME_PREFIX, ENV_FROM_VOLUME_PREFIX)
DEFAULT_RAY_TEMP_DIR = "/tmp/ray"
RAY_READY_FILE = "ray_current_cluster"  # `ray start` writes it into its --temp-dir once the node is up
DEFAULT_HEAD_LOST_TIMEOUT_SECONDS = 60.0

# Every model below: populate_by_name, extra ignored, frozen (each writes its ConfigDict out: mypy's pydantic
# plugin reads only a literal one).


class Distribution(StrEnum):
    FULLY_REPLICATED = "FullyReplicated"
    SHARDED_BY_S3_KEY = "ShardedByS3Key"


class InputMode(StrEnum):
    """SageMaker's TrainingInputMode. FastFile streams objects on demand on SageMaker; here its files are
    downloaded before the payload starts, at the same paths, and inputdataconfig.json says FastFile."""

    FILE = "File"
    FAST_FILE = "FastFile"


class RunMode(StrEnum):
    """How the payload runs: on the head of a Ray cluster (Snowflake's default), once on every instance
    (Snowflake's `parallel`), or SageMaker script mode (every instance, torchrun-style env)."""

    HEAD = "head"
    PARALLEL = "parallel"
    SAGEMAKER = "sagemaker"


class ChannelSource(BaseModel):
    """Where a channel's objects come from; exactly one field is set."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore", frozen=True)
    s3_uri: str | None = Field(None, alias="s3Uri")
    s3_endpoint_url: str | None = Field(None, alias="s3EndpointUrl")
    local_path: str | None = Field(None, alias="localPath", description="mounted PVC/ConfigMap directory")


class Channel(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="ignore", frozen=True)
    name: str
    distribution: Distribution = Distribution.FULLY_REPLICATED
    source: ChannelSource
    instance_groups: list[str] = Field(default_factory=list, alias="instanceGroups")
    content_type: str | None = Field(None, alias="contentType")
    input_mode: InputMode = Field(InputMode.FILE, alias="inputMode")


class OutputTarget(BaseModel):
    """Where the job's outputs go (spec.output): an S3 prefix, or a PVC the operator mounts at OUTPUT_MOUNT.
    `location` is what users and status see (s3://bucket/prefix, pvc://claim/subPath)."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore", frozen=True)
    location: str
    s3_uri: str | None = Field(None, alias="s3Uri")
    s3_endpoint_url: str | None = Field(None, alias="s3EndpointUrl")
    local_path: str | None = Field(None, alias="localPath")


def result_object(location: str, job_name: str, pod: str) -> str:
    """Where the head `pod` keeps a result too large for its MLJob, under the job's output location."""
    return f"{location.rstrip('/')}/{job_name}/output/results/{pod}.pkl"


def output_artifacts(location: str, job_name: str, host: str | None = None) -> tuple[str, str]:
    """(model.tar.gz, output.tar.gz) of a job under an output location, SageMaker's layout; `host` for the
    archives of an instance other than instance 0 (its own subdirectory)."""
    base = f"{location.rstrip('/')}/{job_name}/output" + (f"/{host}" if host else "")
    return f"{base}/model.tar.gz", f"{base}/output.tar.gz"


class Group(BaseModel):
    """One instance group: SageMaker's `instance_groups` entry plus the resources one instance gets."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore", frozen=True)
    name: str
    instance_type: str = Field(alias="instanceType")
    count: int
    cpus: float = 1.0
    memory_bytes: int = Field(0, alias="memoryBytes")
    gpus: int = 0

    @property
    def whole_cpus(self) -> int:
        """Whole CPUs of one instance, rounded up like KubeRay: Ray's --num-cpus and SM_NUM_CPUS are integers."""
        return max(1, math.ceil(self.cpus))


class Instance(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="ignore", frozen=True)
    instance_id: int = Field(alias="instanceId")
    group: str
    rank_in_group: int = Field(alias="rankInGroup")
    host: str = Field(description="SageMaker host name, algo-N")
    dns: str = Field(description="stable DNS name of the pod through the job's headless Service")
    pod: str


class Entrypoint(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="ignore", frozen=True)
    path: str | None = Field(None, description="a .py file, relative to the payload dir or absolute")
    module: str | None = None
    command: list[str] | None = None
    args: list[str] = Field(default_factory=list)
    working_dir: str | None = Field(None, alias="workingDir")
    function: str | None = Field(
        None,
        description="for @remote: a function in `path` to call with `args`; when `path` is a .pkl file it holds "
        "the cloudpickled callable, or a (callable, args, kwargs) tuple",
    )


class RaySettings(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="ignore", frozen=True)
    auth_mode: str = Field("token", alias="authMode")
    gcs_port: int = Field(naming.RAY_GCS_PORT, alias="gcsPort")
    dashboard_port: int = Field(naming.RAY_DASHBOARD_PORT, alias="dashboardPort")
    dashboard: bool = Field(True, description="start the dashboard on the head")
    client_port: int = Field(naming.RAY_CLIENT_PORT, alias="clientPort")
    object_store_memory_bytes: int = Field(0, alias="objectStoreMemoryBytes", description="0: Ray's default")


class InstanceIdentity(BaseModel):
    """Everything one instance derives from the contract and its instance id."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore", frozen=True)
    instance_id: int
    is_head: bool
    group: str
    rank_in_group: int
    group_size: int
    host: str
    hosts: list[str]
    group_hosts: list[str]
    world_size: int


class StoredResult(BaseModel):
    """One instance's outcome as kept on its MLJob. `data` is the base64 of a cloudpickle of
    {"success", "value", "error", "traceback"}; absent when it did not fit, and `dropped` says why."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore", frozen=True)
    pod: str = Field(description="the pod that wrote it: a result of an earlier attempt names an earlier pod")
    instance: int
    success: bool
    encoding: str = RESULT_ENCODING
    data: str | None = None
    dropped: str | None = None
    location: str | None = Field(None, description="where a result too large for the job is kept instead of `data` "
                                 "(spec.output: s3://... or pvc://...): the same bytes `data` would hold, undecoded")
    sha256: str | None = Field(None, description="of the object at `location`: the SDK unpickles it only when it "
                               "matches (this annotation only the job's own pod may write; the object store anyone "
                               "with rights there)")
    size: int | None = None
    endpoint_url: str | None = Field(None, description="S3 endpoint of `location` when it is the operator's results "
                                     "store (a job without spec.output)")


class JobContract(BaseModel):
    """The document every instance of one job reads."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore", frozen=True)
    job_name: str = Field(alias="jobName")
    namespace: str
    job_uid: str = Field("", alias="jobUid")
    target_instances: int = Field(alias="targetInstances")
    min_instances: int = Field(alias="minInstances")
    instances_timeout_seconds: int = Field(naming.DEFAULT_INSTANCES_TIMEOUT_SECONDS, alias="instancesTimeoutSeconds")
    min_wait_seconds: float = Field(-1, alias="minWaitSeconds", description="-1: min(3*log2(target), timeout/10)")
    admitted_at: float | None = Field(None, alias="admittedAt", description="when the operator admitted this attempt "
                                      "(Unix seconds): the instances timeout counts from here, on the head's gate as in the "
                                      "operator's status (one clock), not from the head's own start")
    groups: list[Group]
    # Derived when not given (`_derive`): a job never resized, of attempt 0, has these from its name and groups.
    instances: list[Instance] = Field(default_factory=list, description="default: `build_instances(jobName, groups)`")
    head_address: str = Field("", alias="headAddress", description="DNS name of instance 0")
    service_name: str = Field("", alias="serviceName")
    channels: list[Channel] = Field(default_factory=list)
    hyperparameters: dict[str, str] = Field(default_factory=dict)
    entrypoint: Entrypoint = Field(default_factory=Entrypoint)
    mode: RunMode = RunMode.HEAD
    distribution_instance_groups: list[str] = Field(default_factory=list, alias="distributionInstanceGroups")
    ray: RaySettings = Field(default_factory=RaySettings)
    output: OutputTarget | None = None
    checkpoint_s3: OutputTarget | None = Field(None, alias="checkpointS3", description="an S3 checkpoint prefix (a PVC is mounted instead)")
    results_store: OutputTarget | None = Field(None, alias="resultsStore", description="the operator's S3 results "
                                               "store, for a head's result too large for its MLJob: only without output")
    results_store_secret: str | None = Field(None, alias="resultsStoreSecret", description="the store's credentials "
                                             "Secret in the job's namespace (RESULTS_STORE_ENV_PREFIX)")
    pip_requirements: list[str] = Field(default_factory=list, alias="pipRequirements",
                                        description="installed by every instance into PIP_DIR before anything starts")

    @model_validator(mode="before")
    @classmethod
    def _derive(cls, data: Any) -> Any:
        """Fills in the parts derived from the others, where not given: the instances (`build_instances`; a resized
        job or a retry passes its own), instance 0's DNS name as the head's address, the job's Service. So one
        constructor builds the operator's document and the tests' alike, and a new field touches the model only."""
        if not isinstance(data, dict):
            return data
        name = data.get("job_name", data.get("jobName"))
        if not isinstance(name, str):
            return data  # the field's own validation says what is missing
        out = dict(data)
        if "instances" not in out:
            try:
                groups = [g if isinstance(g, Group) else Group.model_validate(g) for g in out.get("groups") or ()]
            except (ValidationError, TypeError):
                return data  # the field's own validation says what is wrong
            out["instances"] = build_instances(name, groups)
        if "head_address" not in out and "headAddress" not in out:
            first = out["instances"][0] if out["instances"] else None
            out["head_address"] = "" if first is None else first.dns if isinstance(first, Instance) else first.get("dns", "")
        if "service_name" not in out and "serviceName" not in out:
            out["service_name"] = naming.service_name(name)
        return out

    @property
    def is_hetero(self) -> bool:
        return len(self.groups) > 1

    def identity(self, instance_id: int) -> InstanceIdentity:
        try:
            me = next(i for i in self.instances if i.instance_id == instance_id)
        except StopIteration:
            raise ValueError(f"instance {instance_id} is not in job {self.job_name} ({len(self.instances)} instances)") from None
        group_hosts = [i.host for i in self.instances if i.group == me.group]
        return InstanceIdentity(
            instance_id=me.instance_id,
            is_head=me.instance_id == 0,
            group=me.group,
            rank_in_group=me.rank_in_group,
            group_size=len(group_hosts),
            host=me.host,
            hosts=[i.host for i in self.instances],
            group_hosts=group_hosts,
            world_size=len(self.instances),
        )

    def group_of(self, name: str) -> Group:
        return next(g for g in self.groups if g.name == name)

    def channels_for(self, group: str) -> list[Channel]:
        """SageMaker's rule: a channel with no groups goes to every group."""
        return [c for c in self.channels if not c.instance_groups or group in c.instance_groups]

    def gate_timeout(self, now: float) -> float:
        """Seconds the head's gate may still wait at `now` (Unix seconds): what is left of instancesTimeoutSeconds
        since admission (the whole of it when the admission time is unknown)."""
        if self.admitted_at is None:
            return float(self.instances_timeout_seconds)
        return max(0.0, self.admitted_at + self.instances_timeout_seconds - now)

    def effective_min_wait(self) -> float:
        return effective_min_wait(self.min_wait_seconds, self.target_instances, self.instances_timeout_seconds)

    def dumps(self) -> str:
        return self.model_dump_json(by_alias=True, exclude_none=True, indent=1)


def effective_min_wait(min_wait: float, target: int, timeout: float) -> float:
    """Snowflake's launcher default: min(3*log2(target), timeout/10) when unset (-1)."""
    if min_wait >= 0:
        return min_wait
    if target <= 1:
        return 0.0
    return min(3 * math.log2(target), timeout / 10)


def build_instances(job_name: str, groups: Sequence[Group], ids: Mapping[str, Sequence[int]] | None = None,
                    attempt: int = 0) -> list[Instance]:
    """Instances in instance id order; instance 0 (the head) is the first group's first instance. `ids`: each
    group's instance ids in rank order (default: consecutive in group order, as for a job never resized); pods
    carry `attempt`'s names."""
    svc = naming.service_name(job_name)
    out: list[Instance] = []
    for g in groups:
        mine = list(ids[g.name]) if ids is not None else range(len(out), len(out) + g.count)
        for r, iid in enumerate(mine):
            out.append(
                Instance(
                    instance_id=iid,
                    group=g.name,
                    rank_in_group=r,
                    host=naming.sagemaker_host(iid),
                    dns=f"{naming.sagemaker_host(iid)}.{svc}",
                    pod=naming.pod_name(job_name, g.name, r, attempt),
                )
            )
    # Id order: a group grown later appends its new hosts, so the others keep their place in `hosts`.
    return sorted(out, key=lambda i: i.instance_id)


def parse_contract(text: str) -> JobContract:
    return JobContract.model_validate(json.loads(text))


def load_contract(env: Mapping[str, str] | None = None) -> tuple[JobContract, int]:
    """Read the mounted document and this pod's instance id (runtime side)."""
    env = os.environ if env is None else env
    path = Path(env.get(ENV_CONTRACT_FILE, CONTRACT_PATH))
    if not path.is_file():
        raise FileNotFoundError(f"runtime contract not found at {path} (set {ENV_CONTRACT_FILE})")
    if ENV_INSTANCE_ID not in env:
        raise KeyError(f"{ENV_INSTANCE_ID} is not set: this process was not started by kubepool")
    return parse_contract(path.read_text()), int(env[ENV_INSTANCE_ID])


def replica_instance_id(base: int, index: int, ids: str | None = None) -> int | None:
    """The instance id of replica `index` of a KubeRay worker group whose template carries `base` (its first
    instance id) and, once the group's ids are not consecutive, `ids` (ENV_INSTANCE_IDS). None: no such replica."""
    if not ids:
        return base + index
    listed = [int(i) for i in ids.split(",") if i.strip().isdigit()]
    return listed[index] if index < len(listed) else None


def resolve_replica_index(env: Mapping[str, str]) -> dict[str, str]:
    """This pod's instance id and Ray port offset when it is replica N of a KubeRay worker group: the template's
    values moved to the replica's instance id. Unchanged without a replica index (the pod backend sets both per pod)."""
    out = dict(env)
    if ENV_REPLICA_INDEX not in env:
        return out
    raw = env[ENV_REPLICA_INDEX]
    if not raw.isdigit():
        raise ValueError(f"{ENV_REPLICA_INDEX}={raw!r}: the KubeRay operator must run with --feature-gates="
                         "RayMultiHostIndexing=true (the default from KubeRay v1.6.0)")
    base = int(env[ENV_INSTANCE_ID])
    iid = replica_instance_id(base, int(raw), env.get(ENV_INSTANCE_IDS))
    if iid is None:
        raise ValueError(f"{ENV_REPLICA_INDEX}={raw} is past the worker group's instances ({env.get(ENV_INSTANCE_IDS)})")
    out[ENV_INSTANCE_ID] = str(iid)
    if ENV_RAY_PORT_OFFSET in env:
        out[ENV_RAY_PORT_OFFSET] = str(int(env[ENV_RAY_PORT_OFFSET]) + (iid - base) * int(env.get(ENV_RAY_PORT_STRIDE, "0")))
    return out


def shard(keys: Sequence[str], num_shards: int, index: int) -> list[str]:
    """ShardedByS3Key: this shard's keys. Sorted then dealt round-robin: disjoint, complete and stable."""
    if num_shards < 1 or not 0 <= index < num_shards:
        raise ValueError(f"shard index {index} out of range for {num_shards} shards")
    return sorted(keys)[index::num_shards]


def _termination_doc(termination_message: str | None) -> dict[str, Any]:
    """A runtime termination message (JSON) as a dict; empty for anything else."""
    if not termination_message or not termination_message.startswith("{"):
        return {}
    try:
        doc = json.loads(termination_message)
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}


def runtime_failure_reason(termination_message: str | None) -> str | None:
    """The reason a failed instance's termination message names, if it is one the runtime gives."""
    reason = _termination_doc(termination_message).get("reason")
    return reason if reason in RUNTIME_FAILURE_REASONS else None


def runtime_failure_error(termination_message: str | None) -> str | None:
    """The `error` of a runtime termination message (JSON), if it is one."""
    error = _termination_doc(termination_message).get("error")
    return error if isinstance(error, str) and error else None
