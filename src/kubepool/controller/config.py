"""OperatorConfig: the operator's settings, read once from the environment at startup and passed
explicitly to everything that needs them. Builders and status functions never read the environment."""

from __future__ import annotations

import os
from collections.abc import Mapping
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field, model_validator

from kubepool.api import Backend
from kubepool.api.families import GPU_RESOURCE
from kubepool.api.mljob import S3Source

ENV_PREFIX = "KUBEPOOL_OPERATOR_"


class RuntimeAccountPolicy(StrEnum):
    """Which ServiceAccount instance pods run as."""

    # One ServiceAccount + Role + RoleBinding per namespace (naming.RUNTIME_ACCOUNT), made once, shared by its jobs:
    # read pods, get/patch MLJobs of the namespace. No RBAC writes per job; the chart's ValidatingAdmissionPolicy
    # narrows the MLJob patches to the pod's own job.
    PER_NAMESPACE = "per-namespace"
    PER_JOB = "per-job"  # a ServiceAccount + Role per job: read pods, get/patch its own MLJob, nothing else
    NONE = "none"  # the namespace's default account, with no API token mounted


class OperatorConfig(BaseModel):
    """Operator-wide defaults; each field can be set with KUBEPOOL_OPERATOR_<FIELD> (upper case)."""

    model_config = ConfigDict(frozen=True)

    default_image: str = Field("kubepool/runtime:dev", description="Image of instance pods when neither the job nor its pool names one.")
    gpu_image: str = Field("", description="Image of instance pods on pools whose instances have GPUs, when neither the job nor the pool names one (empty: default_image).")
    accelerator_resource: str = Field(GPU_RESOURCE, pattern=r"^[a-z0-9.-]+/[a-z0-9._-]+$",
                                      description="Extended resource a pool's GPUs are requested as (nvidia.com/gpu, amd.com/gpu, ...).")
    default_backend: Backend = Backend.PODS
    namespaces: tuple[str, ...] = Field((), description="Watched namespaces; empty means all.")
    runtime_account: RuntimeAccountPolicy = RuntimeAccountPolicy.PER_NAMESPACE
    python: str = Field("python", description="Interpreter that runs `-m kubepool.runtime` in the image.")
    # The runtime's user; None keeps the image's own (non-root) user, for images (or local nodes) whose
    # interpreter uid 1000 cannot reach. runAsNonRoot stays on either way.
    run_as_user: int | None = Field(1000, ge=1)
    image_pull_policy: str = "IfNotPresent"
    pip_index_url: str = Field("", description="Index of jobs' pipRequirements when the job names none (empty: pip's default, PyPI).")
    pip_extra_index_urls: str = Field("", description="More indexes of jobs' pipRequirements, space separated.")
    # Local clusters only, where every pod shares the host's network: instance N shifts its per-node Ray
    # ports by N * stride (contract.ENV_RAY_PORT_OFFSET) so a job's instances never clash. 0 on real clusters.
    ray_port_stride: int = Field(0, ge=0, le=3000)
    # Workers leave on their own once the head is done; this is how long they get before being deleted.
    worker_grace_seconds: int = Field(30, ge=0)
    # An instance whose node is NotReady or unreachable this long is evicted (a NoExecute toleration), so the
    # job's verdict (instances lost, head failed) follows a lost node; Kubernetes' own default is 300 s.
    node_lost_seconds: int = Field(60, ge=0)
    # Deleting a pod gives it this long to exit on SIGTERM (Ray shuts down in a few seconds).
    pod_termination_grace_seconds: int = Field(10, ge=0)
    # Warm capacity: placeholder pods keep each ComputePool's minNodes nodes held (and the runtime image pulled)
    # while fewer instances run. Off: minNodes is informational only.
    warm_capacity: bool = True
    # Act as Kueue's controller of MLJobs (Kueue configured with integrations.externalFrameworks:
    # [MLJob.v1alpha1.kubepool.dev]): a job labelled kueue.x-k8s.io/queue-name gets a Workload and runs only
    # while Kueue admits it (controller/kueue.py). Needs Kueue's CRDs, and RBAC on its Workloads.
    kueue: bool = False
    # Namespace of the placeholder pods; empty: the operator's own (in a pod), else the first watched namespace,
    # else `default`. It must be watched (the operator follows its placeholders through its pod watch).
    placeholder_namespace: str = ""
    # Each watch stream is ended by the API server after this long and opened again (kopf resumes it; after a
    # gap the server cannot resume, kopf lists again and kopf_fence.relist_deletions reports what went meanwhile).
    # The client gives up on a silent stream a fifth later. Tests shorten it.
    watch_timeout_seconds: int = Field(300, ge=1)
    # Leader election (a coordination.k8s.io Lease): only the replica holding the lease reconciles; the others
    # stand by. Off: this process assumes it is the only operator (the chart's single Recreate replica).
    leader_election: bool = False
    lease_name: str = "kubepool-operator"
    lease_namespace: str = Field("", description="Namespace of the Lease; empty: the operator's own (in a pod), else "
                                 "the first watched namespace, else `default`.")
    lease_seconds: float = Field(8.0, gt=0)  # a leader silent this long is replaced
    lease_renew_deadline_seconds: float = Field(5.0, gt=0)  # a leader that could not renew this long stops
    lease_retry_seconds: float = Field(1.0, gt=0)  # renewals and stand-by looks
    liveness_port: int = 8080
    metrics_port: int = 9090
    # Address the liveness and metrics endpoints listen on: all by default; the pod's IP where pods share the
    # host's network (the chart's `operator.listenOnPodIP`), so two operators on one host never collide.
    bind_address: str = "0.0.0.0"
    # The operator's results store: where a head's result too large for its MLJob goes when the job has no
    # spec.output, as spec.output's S3 form (`results_location`; S3 only: a claim would have to exist in every
    # namespace before a head could start). Its credentials Secret is taken from each job's own namespace, where
    # the platform creates it; a namespace without it keeps the annotation's limit.
    results_store: str = Field("", description="s3://bucket/prefix; empty: no store")
    results_store_endpoint_url: str = ""
    results_store_credentials_secret: str = ""

    @model_validator(mode="after")
    def _store_is_s3(self) -> OperatorConfig:
        if self.results_store and not self.results_store.startswith("s3://"):
            raise ValueError(f"{ENV_PREFIX}RESULTS_STORE must be an s3://bucket/prefix URI, got {self.results_store!r}")
        if not self.results_store and (self.results_store_endpoint_url or self.results_store_credentials_secret):
            raise ValueError(f"{ENV_PREFIX}RESULTS_STORE_ENDPOINT_URL and _CREDENTIALS_SECRET need {ENV_PREFIX}RESULTS_STORE")
        _ = self.results_location  # its URI, endpoint and Secret name checked as spec.output's
        return self

    @property
    def results_location(self) -> S3Source | None:
        if not self.results_store:
            return None
        return S3Source(uri=self.results_store, endpoint_url=self.results_store_endpoint_url or None,
                        credentials_secret=self.results_store_credentials_secret or None)

    @property
    def url_host(self) -> str:
        return f"[{self.bind_address}]" if ":" in self.bind_address else self.bind_address

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> OperatorConfig:
        env = os.environ if env is None else env
        values: dict[str, object] = {}
        for name in cls.model_fields:
            raw = env.get(ENV_PREFIX + name.upper())
            if raw is None:
                continue
            if name == "namespaces":
                values[name] = tuple(n for n in raw.replace(",", " ").split() if n)
            else:
                values[name] = None if raw == "" and name == "run_as_user" else raw
        return cls.model_validate(values)


def resolve_placeholder_namespace(cfg: OperatorConfig, own_namespace: str | None) -> str:
    """Where placeholder pods live: the configured namespace; else the operator's own namespace if it is
    watched; else the first watched namespace; else `default`."""
    if cfg.placeholder_namespace:
        return cfg.placeholder_namespace
    if own_namespace and (not cfg.namespaces or own_namespace in cfg.namespaces):
        return own_namespace
    return cfg.namespaces[0] if cfg.namespaces else "default"


def resolve_lease_namespace(cfg: OperatorConfig, own_namespace: str | None) -> str:
    """Where the leader-election Lease lives: the configured namespace; else the operator's own; else the first
    watched namespace; else `default`."""
    return cfg.lease_namespace or own_namespace or (cfg.namespaces[0] if cfg.namespaces else "default")
