"""Prometheus metrics of the operator (served on OperatorConfig.metrics_port; 0 disables the endpoint): what
people use to run a queue (time queued, time to start, duration; each pool's capacity, use and queue) and
what the operator itself does (passes, their time and their errors). charts/kubepool/dashboards/ plots them;
a test checks that every query there names a metric defined here."""

from __future__ import annotations

from datetime import datetime

from prometheus_client import Counter, Gauge, Histogram, start_http_server

from kubepool.api import ComputePoolStatus, JobPhase, MLJobStatus

_WAIT_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 4 * 3600, 12 * 3600)

JOBS = Gauge("kubepool_mljobs", "MLJobs by phase", ["phase"])
QUEUED = Gauge("kubepool_mljobs_queued", "MLJobs waiting for pool capacity")
QUEUED_SECONDS = Histogram("kubepool_mljob_queued_seconds", "From an MLJob's creation (or its last resume) to "
                           "its admission (capacity granted)", ["pool"], buckets=_WAIT_BUCKETS)
START_SECONDS = Histogram("kubepool_mljob_start_seconds", "From an MLJob's creation (or its last resume) to "
                          "its payload's start (RUNNING)", ["pool"], buckets=_WAIT_BUCKETS)
DURATION_SECONDS = Histogram("kubepool_mljob_duration_seconds", "From an MLJob's start (RUNNING) to its end, by "
                             "outcome", ["pool", "phase"], buckets=_WAIT_BUCKETS)
POOL_MAX = Gauge("kubepool_pool_max_instances", "A ComputePool's maxNodes: instances it may run at once", ["pool"])
POOL_IN_USE = Gauge("kubepool_pool_instances_in_use", "Instances admitted jobs hold in a ComputePool", ["pool"])
POOL_QUEUED = Gauge("kubepool_pool_queued_jobs", "MLJobs waiting for a ComputePool's capacity", ["pool"])
POOL_READY_NODES = Gauge("kubepool_pool_ready_nodes", "Ready nodes a ComputePool selects", ["pool"])
POOL_WARM = Gauge("kubepool_pool_warm_instances", "Warm placeholders holding a ComputePool's nodes", ["pool"])
RECONCILE_SECONDS = Histogram("kubepool_reconcile_seconds", "Time to reconcile one MLJob",
                              buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
RECONCILE_ERRORS = Counter("kubepool_reconcile_errors_total", "Passes that failed and will be retried, by kind "
                           "(job, pool) and reason (the API's HTTP status, or the exception's type)", ["kind", "reason"])
API_ERRORS = Counter("kubepool_api_errors_total", "Kubernetes API calls that failed", ["status"])
_POOL_GAUGES = (POOL_MAX, POOL_IN_USE, POOL_QUEUED, POOL_READY_NODES, POOL_WARM)


def serve(port: int, addr: str = "0.0.0.0") -> None:
    if port:
        start_http_server(port, addr=addr)


def _seconds(since: datetime | str | None, until: datetime | None) -> float | None:
    if since is None or until is None:
        return None
    start = datetime.fromisoformat(since.replace("Z", "+00:00")) if isinstance(since, str) else since
    return max((until - start).total_seconds(), 0.0)


def job_transitions(created: str | None, pool: str, prev: MLJobStatus | None, new: MLJobStatus) -> list[tuple[Histogram, dict[str, str], float]]:
    """The observations a status transition makes (pure: the caller records them): admitted → time queued;
    RUNNING → time to start; finished after a start → duration by outcome. A resumed job counts from its resume
    (status.queuedAt), not its creation: the time it was suspended was not spent waiting."""
    out: list[tuple[Histogram, dict[str, str], float]] = []
    since = new.queued_at or created
    if (prev is None or prev.admitted_at is None) and new.admitted_at is not None:
        queued = _seconds(since, new.admitted_at)
        if queued is not None:
            out.append((QUEUED_SECONDS, {"pool": pool}, queued))
    if (prev is None or prev.start_time is None) and new.start_time is not None:
        started = _seconds(since, new.start_time)
        if started is not None:
            out.append((START_SECONDS, {"pool": pool}, started))
    was_finished = prev is not None and prev.phase is not None and prev.phase.finished
    if new.phase is not None and new.phase.finished and not was_finished:
        ran = _seconds(new.start_time, new.completion_time)
        if ran is not None:
            out.append((DURATION_SECONDS, {"pool": pool, "phase": str(new.phase)}, ran))
    return out


def observe_job(created: str | None, pool: str, prev: MLJobStatus | None, new: MLJobStatus) -> None:
    for histogram, labels, value in job_transitions(created, pool, prev, new):
        histogram.labels(**labels).observe(value)


# A series Prometheus has never seen at 0 shows no increase at its first observation (rate() needs two samples):
# the first job a pool finishes, queues or fails would be missing from the dashboard. Every pool's job series
# exist, at 0, from the moment the pool does.
_FINISHED = tuple(str(p) for p in JobPhase if p.finished)


def _job_series(name: str) -> list[tuple[Histogram, tuple[str, ...]]]:
    return [(QUEUED_SECONDS, (name,)), (START_SECONDS, (name,)), *((DURATION_SECONDS, (name, p)) for p in _FINISHED)]


def set_pool(name: str, max_nodes: int, st: ComputePoolStatus) -> None:
    for histogram, values in _job_series(name):
        histogram.labels(*values)
    POOL_MAX.labels(pool=name).set(max_nodes)
    POOL_IN_USE.labels(pool=name).set(st.instances_in_use or 0)
    POOL_QUEUED.labels(pool=name).set(st.queued_jobs or 0)
    POOL_READY_NODES.labels(pool=name).set(st.ready_nodes or 0)
    POOL_WARM.labels(pool=name).set(st.warm_instances or 0)


def forget_pool(name: str) -> None:
    series: list[tuple[Gauge | Histogram, tuple[str, ...]]] = [(g, (name,)) for g in _POOL_GAUGES]
    for metric, values in [*series, *_job_series(name)]:
        try:
            metric.remove(*values)
        except KeyError:  # never set for this pool
            pass
