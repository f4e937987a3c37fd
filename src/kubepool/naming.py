"""Every name, label, annotation and port kubepool puts on the cluster: one place, so operator, runtime,
SDK and tests agree. Pure: no I/O, no Kubernetes client.
"""

from __future__ import annotations

import hashlib
import re

GROUP = "kubepool.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
MLJOB_KIND, MLJOB_PLURAL, MLJOB_SHORT = "MLJob", "mljobs", "mlj"
POOL_KIND, POOL_PLURAL, POOL_SHORT = "ComputePool", "computepools", "cpool"
FIELD_MANAGER = "kubepool-operator"

# Labels on every child of a job; selectors use them, so they never change once a pod exists.
LABEL_JOB = f"{GROUP}/job"
LABEL_JOB_UID = f"{GROUP}/job-uid"
LABEL_GROUP = f"{GROUP}/group"
LABEL_INSTANCE = f"{GROUP}/instance-id"
LABEL_ROLE = f"{GROUP}/role"  # head | worker
LABEL_POOL = f"{GROUP}/pool"
LABEL_ATTEMPT = f"{GROUP}/attempt"  # retry attempt (backoffLimit) that created the pod
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
# Kueue's LocalQueue of a job: Kueue creates such a job suspended and admits it by setting spec.suspend false.
LABEL_KUEUE_QUEUE = "kueue.x-k8s.io/queue-name"
# Kueue's Workload, which the operator writes for such a job when it acts as Kueue's external controller of
# MLJobs (Kueue's configuration: integrations.externalFrameworks: [KUEUE_EXTERNAL_FRAMEWORK]).
KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_API_VERSION = f"{KUEUE_GROUP}/v1beta2"
WORKLOAD_KIND, WORKLOAD_PLURAL = "Workload", "workloads"
KUEUE_EXTERNAL_FRAMEWORK = f"{MLJOB_KIND}.{VERSION}.{GROUP}"
LABEL_KUEUE_JOB_UID = "kueue.x-k8s.io/job-uid"
MANAGED_BY = "kubepool"
ROLE_HEAD, ROLE_WORKER = "head", "worker"
# Warm capacity (ComputePool minNodes): placeholder pods carry LABEL_POOL (so instances' anti-affinity treats
# them as holding the node's slot), LABEL_ROLE=placeholder and LABEL_MANAGED_BY; PriorityClass below.
ROLE_PLACEHOLDER = "placeholder"
PLACEHOLDER_PRIORITY_CLASS = "kubepool-placeholder"
PLACEHOLDER_PRIORITY = -10  # below the default 0 of instance pods: any instance pre-empts a placeholder
ANNOTATION_PLACEHOLDER_SPEC = f"{GROUP}/placeholder-spec"  # hash of the pod spec: a changed pool replaces its pods
# The KubeRay backend: a worker template's label, the group's first worker instance id (KubeRay's replica index
# adds to it, api.kuberay.kuberay_instance_id); the finalizer on KubeRay's pods, which KubeRay deletes (and
# recreates) as soon as they end, so the exit the job's status is decided from is seen before the pod goes.
LABEL_INSTANCE_BASE = f"{GROUP}/instance-base"
# ... and, once the group's ids are not consecutive (a resized job), all of them in replica index order (comma
# separated; too long for a label). Outside kopf's annotation prefix.
ANNOTATION_INSTANCE_IDS = f"instances.{GROUP}/ids"
POD_FINALIZER = f"{GROUP}/instance-outcome"

# A Secret named by a channel's credentialsSecret must carry this label with value "true" (its owner's opt-in): a
# job would otherwise read any Secret of its namespace into its pods' environment, whoever submitted it.
LABEL_CREDENTIALS = f"{GROUP}/credentials"
CREDENTIALS_OPT_IN = "true"

ANNOTATION_PREFIX = GROUP  # kopf progress/diffbase storage lives under this prefix, never in status
# Code kept in the cluster under a name for many jobs (Snowflake's code bundles and job definitions): a ConfigMap
# owned by no job, labelled with its kind.
LABEL_STORED_PAYLOAD = f"{GROUP}/stored-payload"
STORED_CODE_BUNDLE = "code-bundle"
STORED_JOB_DEFINITION = "job-definition"
# Where an instance keeps its payload's outcome on its own MLJob (contract.StoredResult): a prefix of its own, so
# no kopf storage key can ever collide with it.
RESULT_ANNOTATION_PREFIX = f"results.{GROUP}"


def result_annotation(instance_id: int) -> str:
    return f"{RESULT_ANNOTATION_PREFIX}/{instance_id}"

# MLJob spec.instancesTimeoutSeconds when unset (the CRD, contract, SDK and CLI share it): 12 minutes, as Snowflake.
DEFAULT_INSTANCES_TIMEOUT_SECONDS = 720

# Default single-pool group name: SageMaker's name for a homogeneous cluster.
DEFAULT_GROUP = "homogeneousCluster"

# Ray ports. Every pod has its own IP, so fixed ports never clash between instances.
RAY_GCS_PORT = 6379
RAY_CLIENT_PORT = 10001
RAY_DASHBOARD_PORT = 8265
RAY_NODE_MANAGER_PORT = 6380
RAY_OBJECT_MANAGER_PORT = 6381
RAY_DASHBOARD_AGENT_GRPC_PORT = 6382
RAY_RUNTIME_ENV_AGENT_PORT = 6383
RAY_DASHBOARD_AGENT_LISTEN_PORT = 52365
RAY_METRICS_EXPORT_PORT = 8080
RAY_MIN_WORKER_PORT = 10002
RAY_MAX_WORKER_PORT = 10999
TORCH_MASTER_PORT = 29500
SHUTDOWN_PORT = 29400  # head -> worker "leave now" handshake (see kubepool.runtime)

_DNS_LABEL = re.compile(r"[^a-z0-9-]+")
MAX_NAME = 63


def dns_label(value: str) -> str:
    """SageMaker group names such as `instance_group_1` become DNS-safe `instance-group-1`."""
    out = _DNS_LABEL.sub("-", value.lower()).strip("-")
    return out or "x"


def _fit(name: str, limit: int = MAX_NAME) -> str:
    """Cut long names deterministically: keep a prefix and add a short hash so two names never collide."""
    if len(name) <= limit:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{name[: limit - 9].rstrip('-')}-{digest}"


def pod_name(job: str, group: str, index_in_group: int, attempt: int = 0) -> str:
    """Deterministic pod name of one instance: `<job>-<group>-<index in group>`; retries (attempt N > 0)
    add `-rN` so a retry never waits for the previous attempt's pods to be gone."""
    suffix = f"-r{attempt}" if attempt else ""
    return _fit(f"{job}-{dns_label(group)}-{index_in_group}{suffix}")


def workload_name(job: str, uid: str) -> str:
    """Kueue Workload of one MLJob (of this uid: a job created again under its name gets another)."""
    return _fit(f"mljob-{job}-{uid[:5]}")


def service_name(job: str) -> str:
    """Headless Service that gives every instance of the job a stable DNS name."""
    return _fit(f"{job}-svc")


def sagemaker_host(instance_id: int) -> str:
    """SageMaker's host names: instance 0 is `algo-1`. Also the pod's `hostname`: with
    `subdomain=service_name(job)` and the Service's domain in `dnsConfig.searches`, a bare `algo-2`
    resolves inside the job as it does on SageMaker."""
    return f"algo-{instance_id + 1}"


def job_secret_name(job: str) -> str:
    """The job's Secret: its runtime contract and, with Ray token auth, its Ray token (one object, one write)."""
    return _fit(f"{job}-contract")


def payload_configmap_name(job: str) -> str:
    return _fit(f"{job}-payload")


RAY_TOKEN_KEY = "token"  # key of the Ray token in the job's Secret (job_secret_name)


def runtime_service_account_name(job: str) -> str:
    return _fit(f"{job}-runtime")


def runtime_role_name(job: str) -> str:
    """Role and RoleBinding of the job's runtime ServiceAccount (same name as the account)."""
    return runtime_service_account_name(job)


# The runtime's ServiceAccount, Role and RoleBinding of a namespace (runtimeAccount per-namespace): made once per
# namespace, shared by its jobs, so a job costs no RBAC writes.
RUNTIME_ACCOUNT = "kubepool-runtime"


def endpoint_slice_name(job: str) -> str:
    """The EndpointSlice the operator writes for the job's headless Service (which has no selector)."""
    return service_name(job)


# EndpointSlice labels: the Service it serves, and who writes it (the endpointslice controller skips slices
# managed by another controller).
LABEL_SERVICE_NAME = "kubernetes.io/service-name"
LABEL_SLICE_MANAGED_BY = "endpointslice.kubernetes.io/managed-by"
SLICE_MANAGER = f"operator.{GROUP}"  # a label value: no "/"


def network_policy_name(job: str) -> str:
    return _fit(f"{job}-ray")


def placeholder_pod_name(pool: str, index: int) -> str:
    """Placeholder pod `index` (0..) of a ComputePool's warm capacity: `kubepool-warm-<pool>-<index>`."""
    return _fit(f"kubepool-warm-{pool}-{index}")


def placeholder_labels(pool: str) -> dict[str, str]:
    """Labels of a pool's placeholder pods (the operator's watch and kubectl select them by these)."""
    return {LABEL_POOL: pool, LABEL_ROLE: ROLE_PLACEHOLDER, LABEL_MANAGED_BY: MANAGED_BY}

