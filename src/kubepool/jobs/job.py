"""`MLJob`: the client-side handle of one submitted job (Snowflake's `snowflake.ml.jobs.MLJob`), backed by
the MLJob resource: status from `.status.phase`, waiting through a watch, logs through the pod log
endpoint, the result from what the head kept on the job."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any, Literal

from lightkube.resources.core_v1 import Pod

from kubepool import api, naming
from kubepool.api import InstanceStatus, JobPhase
from kubepool.api.kuberay import kuberay_instance_id
from kubepool.contract import RunMode
from kubepool.jobs import distributed
from kubepool.jobs.distributed import DistributedJobError, DistributedResult
from kubepool.jobs.logs import payload_lines, payload_output, stream_payload
from kubepool.jobs.results import (
    ExecutionResult,
    Fetch,
    RemoteError,
    ResultUnavailable,
    claim_reader,
    decode,
    output_reader,
    stored_result,
)
from kubepool.kube.errors import KubeError, NotFound
from kubepool.kube.sync import Kube

# Snowflake's statuses. CANCELLING: cancelled (spec.cancel) and the operator has not yet removed its pods.
# INTERNAL_ERROR is Snowflake's for a failure of the service itself; a kubepool job that the platform fails (a lost
# node, a refusal) says so in FAILED's reason, so it never takes this value: it is here so code written for
# Snowflake that tests for it runs unchanged.
JOB_STATUS = Literal["PENDING", "RUNNING", "DONE", "FAILED", "CANCELLING", "CANCELLED", "INTERNAL_ERROR", "DELETED"]
TERMINAL = frozenset({"DONE", "FAILED", "CANCELLED", "INTERNAL_ERROR", "DELETED"})
# One watch request lasts at most this long; the server ends it and the handle re-watches from where it was.
WATCH_WINDOW_S = 60
POD_START_POLL_S = 1.0


def parse_job_id(job_id: str, default_namespace: str) -> tuple[str, str]:
    """`namespace/name` or a bare `name` (in `default_namespace`) → (namespace, name)."""
    namespace, sep, name = job_id.rpartition("/")
    if not name or (sep and not namespace):
        raise ValueError(f"Invalid job ID: {job_id!r} (use NAME or NAMESPACE/NAME)")
    return (namespace if sep else default_namespace), name


class JobNotFound(NotFound):
    """No such job. Snowflake raises a SnowparkSQLException with `sql_error_code` 2003 ("does not exist or could
    not be retrieved"); this carries the same code and words, so code that checks them works unchanged."""

    sql_error_code = 2003


def status_of(obj: api.MLJob) -> str:
    """The job's JOB_STATUS as Snowflake's SDK reports it (CANCELLING included)."""
    phase = str(obj.status.phase) if obj.status and obj.status.phase else JobPhase.PENDING.value
    if obj.spec.cancel and phase not in TERMINAL:
        return "CANCELLING"
    return phase


def _text(line: str) -> str:
    """A log line without the API server's timestamp (`timestamps=True`)."""
    return line.partition(" ")[2]


class MLJob:
    """A handle on one MLJob.

    Args:
        name: Job name.
        namespace: Job namespace.
        kube: Connection to use; by default one from the environment.
    """

    def __init__(self, name: str, namespace: str, *, kube: Kube | None = None) -> None:
        self._name = name
        self._namespace = namespace
        self._kube = kube
        self._obj: api.MLJob | None = None

    def __repr__(self) -> str:
        return f"MLJob(id={self.id!r})"

    @property
    def id(self) -> str:
        """`namespace/name`."""
        return f"{self._namespace}/{self._name}"

    @property
    def name(self) -> str:
        return self._name

    @property
    def namespace(self) -> str:
        return self._namespace

    @property
    def kube(self) -> Kube:
        if self._kube is None:
            self._kube = Kube(self._namespace)
        return self._kube

    def refresh(self) -> api.MLJob:
        """Read the job from the API server (cached afterwards once it is terminal).

        Raises:
            NotFound: The job does not exist (any more).
        """
        if self._obj is None or status_of(self._obj) not in TERMINAL:
            self._obj = self.kube.get_job(self._name, self._namespace)
        return self._obj

    @property
    def status(self) -> JOB_STATUS:
        """PENDING, RUNNING, DONE, FAILED, CANCELLING (cancelled, pods still going) or CANCELLED; DELETED once
        the job is gone after being seen."""
        try:
            return status_of(self.refresh())  # type: ignore[return-value]
        except NotFound:
            if self._obj is None:
                raise
            return "DELETED"

    @property
    def message(self) -> str | None:
        """Why the job is in its status (e.g. the failure), from `.status.message`."""
        obj = self.refresh()
        return obj.status.message if obj.status else None

    @property
    def target_instances(self) -> int:
        obj = self.refresh()
        return (obj.status.target_instances if obj.status else None) or obj.spec.resolved_target()

    @property
    def min_instances(self) -> int:
        obj = self.refresh()
        return (obj.status.min_instances if obj.status else None) or obj.spec.resolved_min()

    @property
    def instances(self) -> list[InstanceStatus]:
        """One entry per instance (pod, node, phase, ready, exit code), as the operator reports them."""
        obj = self.refresh()
        return list(obj.status.instances) if obj.status else []

    def wait(self, timeout: float = -1, *, on_update: Callable[[api.MLJob], None] | None = None) -> JOB_STATUS:
        """Block until the job is DONE, FAILED or CANCELLED.

        Args:
            timeout: Seconds to wait; negative waits forever.
            on_update: Called with the job each time it changes (e.g. to print progress).

        Returns:
            The final status.

        Raises:
            TimeoutError: The job did not finish within `timeout`.
        """
        deadline = None if timeout < 0 else time.monotonic() + timeout
        obj = self.refresh()
        if on_update:
            on_update(obj)
        while status_of(obj) not in TERMINAL:
            remaining = WATCH_WINDOW_S if deadline is None else deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"job {self.id} did not finish within {timeout:g}s (status {status_of(obj)})")
            window = max(1, int(min(remaining, WATCH_WINDOW_S)))
            try:
                for kind, event in self.kube.watch_job(self._name, obj.metadata.get("resourceVersion"), window,
                                                       self._namespace):
                    if kind == "DELETED":
                        self._obj = event
                        return "DELETED"
                    obj = self._obj = event
                    if on_update:
                        on_update(obj)
                    if status_of(obj) in TERMINAL:
                        break
            except KubeError as err:
                if err.status != 410:  # 410 Gone: our resourceVersion is too old; read afresh
                    raise
                obj = self.refresh()
        return status_of(obj)  # type: ignore[return-value]

    def result(self, timeout: float = -1) -> Any:
        """Wait for the job and return its payload's result (an @remote function's return value).

        Args:
            timeout: Seconds to wait; negative waits forever.

        Returns:
            The return value; None for file and directory jobs.

        Raises:
            RuntimeError: The job failed (chained to the remote exception, or with the job's message), or was
                cancelled.
            TimeoutError: The job did not finish within `timeout`.
        """
        status = self.wait(timeout)
        doc = self._stored(0)
        if doc is not None:
            try:
                outcome = decode(doc, self._result_fetch(doc.endpoint_url))
            except ResultUnavailable as err:
                raise RuntimeError(f"Job {self.id} ended {status}; its result is not readable: {err}") from None
            if not outcome.success or status == "DONE":
                return outcome.unwrap()
        if status != "DONE":
            raise RuntimeError(f"Job {self.id} ended {status}: {self.message or 'no result was reported'}")
        if self.refresh().spec.entrypoint.function:
            raise RuntimeError(f"Job {self.id} is DONE but its head kept no result (see its log: "
                               f"job.get_logs(verbose=True))")
        return None

    def _stored(self, instance_id: int) -> Any:
        """The result `instance_id` kept on the job for the current attempt, if any."""
        obj = self.refresh()
        pods = {i.instance_id: i.pod for i in (obj.status.instances if obj.status else [])}
        return stored_result(obj.metadata.get("annotations"), instance_id, pods.get(instance_id))

    def _outcome(self, instance_id: int) -> ExecutionResult | None:
        doc = self._stored(instance_id)
        kept = doc is not None and (doc.data is not None or doc.location is not None)
        return decode(doc, self._result_fetch(doc.endpoint_url)) if kept else None

    def _result_fetch(self, store_endpoint: str | None = None) -> Fetch:
        """Reads a result kept in the job's spec.output (else the operator's results store, at `store_endpoint`):
        S3 with this client's credentials; a PVC through a pod of the head's image (results.claim_reader)."""

        def read_claim(claim: str, path: str) -> bytes:
            return claim_reader(self.kube.client, self._namespace, self._name, self._pod(0))(claim, path)

        return output_reader(self.refresh().spec.output, read_claim, store_endpoint)

    def distributed_result(self, timeout: float = -1) -> DistributedResult:
        """Wait for a job whose every instance ran the payload (parallel or sagemaker mode) and return its
        per-instance summary (Snowflake's `distributed_result()`); `result()` stays the single-head API.

        Args:
            timeout: Seconds to wait; negative waits forever.

        Returns:
            The summary, on full success (instance 0's return value in `return_value`).

        Raises:
            NotImplementedError: The job runs the payload on its head only (use `result()`).
            DistributedJobError: An instance did not exit 0 (`.result` has the exit codes; the cause is the
                failing instance's remote exception when it reported one).
            TimeoutError: The job did not finish within `timeout`.
        """
        if self.refresh().spec.mode is RunMode.HEAD:
            raise NotImplementedError(f"{self.id} runs its payload on the head only: distributed_result() is for "
                                      "jobs submitted with parallel=True (or SageMaker mode); use result()")
        self.wait(timeout)
        summary = distributed.reduce(self.target_instances, {i.instance_id: i.exit_code for i in self.instances})
        if summary.success:
            outcome = self._outcome(0)
            return replace(summary, return_value=outcome.value if outcome is not None else None)
        cause: BaseException | None = None
        try:
            failed = self._outcome(summary.failed_instance or 0)
            if failed is not None and not failed.success:
                cause = failed.error if isinstance(failed.error, BaseException) else RemoteError(failed.traceback or str(failed.error))
        except ResultUnavailable:
            pass  # lost or unreadable: the exit codes say what is known
        raise DistributedJobError.from_result(summary) from cause

    def _head_or(self, instance_id: int | None) -> int:
        return 0 if instance_id is None else instance_id

    def _pod(self, instance_id: int) -> Pod:
        pods = self.kube.list_pods({naming.LABEL_JOB: self._name, naming.LABEL_INSTANCE: str(instance_id)},
                                   self._namespace)
        if not pods:  # KubeRay names worker pods from one template per group: its ids + replica index
            pods = [p for p in self.kube.list_pods({naming.LABEL_JOB: self._name}, self._namespace)
                    if kuberay_instance_id((p.metadata.labels if p.metadata else None) or {},
                                           (p.metadata.annotations if p.metadata else None) or {}) == instance_id]
        if not pods:
            # A resized job's ids need not be 0..target-1 (new instances take new ids): the status lists them.
            ids = [i.instance_id for i in self.instances] or list(range(self.target_instances))
            if instance_id not in ids:
                which = f"in 0..{len(ids) - 1}" if ids == list(range(len(ids))) else f"one of {ids}"
                raise ValueError(f"job {self.id} has {len(ids)} instances: instance_id must be {which}")
            status = self.status
            when = ("its pod was removed when the job ended" if status in TERMINAL
                    else "its logs are readable once the instance has started")
            raise NotFound(f"job {self.id} has no pod for instance {instance_id} (status {status}): {when}", 404)
        # A retried job may briefly have an old and a new pod: the newest is the current attempt.
        return max(pods, key=lambda p: str(p.metadata.creationTimestamp if p.metadata else ""))

    @staticmethod
    def _container(pod: Pod) -> str | None:
        return pod.spec.containers[0].name if pod.spec and pod.spec.containers else None

    def _log_lines(self, instance_id: int, limit: int, follow: bool = False, since_seconds: int | None = None,
                   timestamps: bool = False) -> Iterator[str]:
        pod = self._pod(instance_id)
        assert pod.metadata is not None and pod.metadata.name is not None
        return self.kube.pod_log(pod.metadata.name, container=self._container(pod),
                                 tail_lines=limit if limit > 0 else None, follow=follow, namespace=self._namespace,
                                 since_seconds=since_seconds, timestamps=timestamps)

    def get_logs(self, limit: int = -1, instance_id: int | None = None, *, as_list: bool = False,
                 verbose: bool = False, since_seconds: int | None = None,
                 timestamps: bool = False) -> str | list[str]:
        """Logs of one instance, readable while it runs and after the job ended (until the job is deleted).

        Args:
            limit: Last lines to return; negative returns all.
            instance_id: Instance whose logs to read; default the head (instance 0).
            as_list: Return a list of lines instead of one string.
            verbose: The whole log (Ray's start-up output, the banners and the runtime's `kubepool[...]` lines
                too); by default what the payload printed, as Snowflake's log extraction gives it (jobs.logs): a
                log without banners, a head-mode worker's, whole. `limit` counts the lines shown.
            since_seconds: Only lines written in the last this many seconds (kubectl's `--since`).
            timestamps: Prefix each line with its RFC3339 time (kubectl's `--timestamps`).

        Returns:
            The log text, or its lines.

        Raises:
            ValueError: `instance_id` is not an instance of the job.
            NotFound: The instance has no pod yet (or any more).
        """
        iid = self._head_or(instance_id)
        if verbose:
            lines = list(self._log_lines(iid, limit, since_seconds=since_seconds, timestamps=timestamps))
        else:  # the extraction needs the banners, which a tail may cut off
            full = list(self._log_lines(iid, -1, since_seconds=since_seconds, timestamps=timestamps))
            lines = payload_lines(full, _text) if timestamps else payload_output(full).splitlines()
        if limit > 0:
            lines = lines[-limit:]
        return lines if as_list else "\n".join(lines)

    def show_logs(self, limit: int = -1, instance_id: int | None = None, verbose: bool = False) -> None:
        """Print `get_logs(limit, instance_id)`."""
        print(self.get_logs(limit, instance_id, verbose=verbose))

    def follow_logs(self, instance_id: int | None = None, *, verbose: bool = False, since_seconds: int | None = None,
                    timestamps: bool = False) -> Iterator[str]:
        """Stream one instance's log lines as they are written, until its container exits.

        Waits for the instance's pod to start first (logs exist only once its container runs).
        """
        iid = self._head_or(instance_id)
        while True:
            try:
                pod = self._pod(iid)
            except NotFound:
                if self.status in TERMINAL:
                    raise
                time.sleep(POD_START_POLL_S)
                continue
            states = pod.status.containerStatuses if pod.status and pod.status.containerStatuses else []
            if states and states[0].state and (states[0].state.running or states[0].state.terminated):
                break
            time.sleep(POD_START_POLL_S)
        lines = self._log_lines(iid, limit=-1, follow=True, since_seconds=since_seconds, timestamps=timestamps)
        yield from (lines if verbose else stream_payload(lines, _text if timestamps else lambda line: line))

    def cancel(self) -> None:
        """Cancel the job for good (`spec.cancel: true`): its pods are removed and its status becomes CANCELLED."""
        self._obj = self.kube.patch_job(self._name, {"spec": {"cancel": True}}, self._namespace)

    def suspend(self) -> None:
        """Pause the job (`spec.suspend: true`): its pods are removed and its capacity released; it stays PENDING
        (reason Suspended) until `resume`."""
        self._obj = self.kube.patch_job(self._name, {"spec": {"suspend": True}}, self._namespace)

    def resume(self) -> None:
        """Run a suspended job again (`spec.suspend: false`): it queues for capacity and starts from scratch."""
        self._obj = self.kube.patch_job(self._name, {"spec": {"suspend": False}}, self._namespace)

    def get_ray_dashboard_url(self) -> str:
        """Address of the job's Ray dashboard inside the cluster (reach it from outside with
        `kubectl port-forward -n <namespace> pod/<head pod> 8265`)."""
        obj = self.refresh()
        if obj.status and obj.status.ray_dashboard:
            return obj.status.ray_dashboard
        if not obj.spec.ray.dashboard or obj.spec.mode != "head":
            raise RuntimeError(f"job {self.id} runs no Ray dashboard (spec.ray.dashboard off, or a mode without Ray)")
        host = f"{naming.sagemaker_host(0)}.{naming.service_name(self._name)}.{self._namespace}.svc"
        return f"http://{host}:{naming.RAY_DASHBOARD_PORT}"
