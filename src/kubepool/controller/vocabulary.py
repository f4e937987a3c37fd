"""The job state machine's words: the reasons a job's status and its Events give, the condition types it writes,
an instance entry's own phase, and the message limits. Imported as a module (`vocabulary.SUSPENDED`), so a
reader sees where a word comes from and a new one has one home."""

from __future__ import annotations

from kubepool.api.mljob import JOB_CONDITION_TYPES, JobPhase
from kubepool.contract import INSTANCES_UNAVAILABLE as _INSTANCES_UNAVAILABLE
from kubepool.contract import RUNTIME_FAILURE_REASONS

# Limits.
MESSAGE_MAX = 2048  # status.message: enough for a traceback's tail, small enough for `kubectl get -o yaml`
EVENT_MESSAGE_MAX = 1024  # the API server refuses longer Event messages

# Condition types (status.conditions[].type), in the order the status lists them (the API's JOB_CONDITION_TYPES).
ADMITTED_TYPE, INSTANCES_READY_TYPE, COMPLETE_TYPE, FAILED_TYPE, SUSPENDED_TYPE = JOB_CONDITION_TYPES

# Reasons (status.reason, a condition's reason and Event reasons).
# ... before admission (admission.decide)
POOL_NOT_FOUND = "PoolNotFound"
POOL_SUSPENDED = "PoolSuspended"
POOL_TOO_SMALL = "PoolTooSmall"
QUEUED = "Queued"
# ... refused before admission
KUBERAY_NOT_INSTALLED = "KubeRayNotInstalled"
CREDENTIALS_NOT_ALLOWED = "CredentialsNotAllowed"
VOLUME_NOT_SHARED = "VolumeNotShared"  # an output/checkpoint claim that several nodes cannot all mount
API_REFUSED = "ApiRefused"  # the API server refused a write of the job's children (quota, policy, RBAC)
# ... while it runs
WAITING_FOR_INSTANCES = "WaitingForInstances"
INSTANCES_READY = "InstancesReady"
INSTANCES_UNAVAILABLE = _INSTANCES_UNAVAILABLE  # the runtime's gate gives it too (contract)
INSTANCES_LOST = "InstancesLost"
RETRYING = "Retrying"
SUSPENDED = "Suspended"
RESUMED = "Resumed"  # a suspended job set to run again: back in its pools' queue
# A head-mode job whose head succeeded while workers still keep their outputs (RUNNING), and the DONE of one whose
# workers were still running workerGraceSeconds after the head ended (their outputs may be incomplete).
WAITING_FOR_WORKERS = "WaitingForWorkers"
WORKERS_CUT_OFF = "WorkersCutOff"
# ... at its end
COMPLETED = "Completed"
HEAD_FAILED = "HeadFailed"
INSTANCE_FAILED = "InstanceFailed"
DEADLINE_EXCEEDED = "DeadlineExceeded"
CANCELLED = "Cancelled"
# ... a condition's reason where none of the above applies
ADMITTED = "Admitted"
PENDING = "Pending"
NOT_COMPLETE = "NotComplete"
FAILED = "Failed"
NOT_FAILED = "NotFailed"
NOT_SUSPENDED = "NotSuspended"

# An instance entry's phase while its pod is being deleted and still runs (as kubectl says).
TERMINATING = "Terminating"

# The reasons a job ends with, by its final phase (jobsteps' finish calls; the runtime's own for FAILED): a pool's
# kubepool_mljobs_finished_total series exist for each from the pool's start (metrics.set_pool).
FINISH_REASONS: dict[JobPhase, tuple[str, ...]] = {
    JobPhase.DONE: (COMPLETED, WORKERS_CUT_OFF),
    JobPhase.FAILED: tuple(dict.fromkeys((
        HEAD_FAILED, INSTANCE_FAILED, INSTANCES_LOST, INSTANCES_UNAVAILABLE, DEADLINE_EXCEEDED, KUBERAY_NOT_INSTALLED,
        CREDENTIALS_NOT_ALLOWED, VOLUME_NOT_SHARED, *sorted(RUNTIME_FAILURE_REASONS)))),
    JobPhase.CANCELLED: (CANCELLED,),
}


def cut(text: str | None) -> str | None:
    """A message within MESSAGE_MAX: its tail kept (a traceback's last lines say the most)."""
    return text if text is None or len(text) <= MESSAGE_MAX else "…" + text[-(MESSAGE_MAX - 1):]
