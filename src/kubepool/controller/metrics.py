"""Prometheus metrics of the operator (served on OperatorConfig.metrics_port; 0 disables the endpoint): what
people use to run a queue (time queued, time to start, duration; each pool's capacity, use and queue) and
what the operator itself does (passes, their time and their errors). charts/kubepool/dashboards/ plots them;
a test checks that every query there names a metric defined here."""

from __future__ import annotations

import bisect
import itertools
import threading
from collections.abc import Iterator
from datetime import datetime

from prometheus_client import REGISTRY, Counter, Gauge, Histogram, start_http_server
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

import kubepool
from kubepool.api import ComputePoolStatus, JobPhase, MLJobStatus
from kubepool.controller import vocabulary
from kubepool.controller.jobstatus import ends

_WAIT_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 4 * 3600, 12 * 3600)
_BOUNDS = [floatToGoString(b) for b in _WAIT_BUCKETS] + ["+Inf"]  # the `le` labels, as prometheus_client writes them

JOBS = Gauge("kubepool_mljobs", "MLJobs by phase", ["phase"])
QUEUED = Gauge("kubepool_mljobs_queued", "MLJobs waiting for pool capacity")
# Which release is running (always 1): the version the package, the chart and the images share.
BUILD_INFO = Gauge("kubepool_build_info", "The running operator's version (value 1)", ["version"])
BUILD_INFO.labels(version=kubepool.__version__).set(1)
RECONCILE_SECONDS = Histogram("kubepool_reconcile_seconds", "Time to reconcile one MLJob",
                              buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
RECONCILE_ERRORS = Counter("kubepool_reconcile_errors_total", "Passes that failed and will be retried, by kind "
                           "(job, pool) and reason (the API's HTTP status, or the exception's type)", ["kind", "reason"])
API_ERRORS = Counter("kubepool_api_errors_total", "Kubernetes API calls that failed", ["status"])

# Per pool (a series each, or one per outcome): the job histograms and the pool's gauges, kept by PoolSeries.
QUEUED_SECONDS = "kubepool_mljob_queued_seconds"
START_SECONDS = "kubepool_mljob_start_seconds"
DURATION_SECONDS = "kubepool_mljob_duration_seconds"
FINISHED = "kubepool_mljobs_finished"  # exposed as kubepool_mljobs_finished_total
_FINISHED_HELP = ("MLJobs that ended, by pool, phase (DONE, FAILED, CANCELLED) and reason; jobs that ended before "
                  "RUNNING too (InstancesUnavailable, cancelled while queued)")
_FINISHED_LABELS = ("pool", "phase", "reason")
_HISTOGRAMS = {
    QUEUED_SECONDS: ("From an MLJob's creation (or its last resume) to its admission (capacity granted)", ("pool",)),
    START_SECONDS: ("From an MLJob's creation (or its last resume) to its payload's start (RUNNING)", ("pool",)),
    DURATION_SECONDS: ("From an MLJob's start (RUNNING) to its end, by outcome", ("pool", "phase")),
}
_GAUGES = (  # in the order set_pool's values come
    ("kubepool_pool_max_instances", "A ComputePool's maxNodes: instances it may run at once"),
    ("kubepool_pool_instances_in_use", "Instances admitted jobs hold in a ComputePool"),
    ("kubepool_pool_queued_jobs", "MLJobs waiting for a ComputePool's capacity"),
    ("kubepool_pool_ready_nodes", "Ready nodes a ComputePool selects"),
    ("kubepool_pool_warm_instances", "Warm placeholders holding a ComputePool's nodes"),
)


class PoolSeries(Collector):
    """Every pool's series as plain numbers, turned into samples when scraped. prometheus_client keeps a value
    object and a lock per bucket of each labelled child, 75 objects per pool, every one another container the
    garbage collector walks; a pool here is one list of gauges and one list of counts per histogram series."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # the scrape runs in prometheus_client's server thread
        self._gauges: dict[str, list[float]] = {}
        self._counts: dict[tuple[str, tuple[str, ...]], list[float]] = {}  # per bucket, then +Inf, then the sum
        self._finished: dict[tuple[str, ...], float] = {}  # (pool, phase, reason) -> jobs

    def ensure(self, name: str, labels: tuple[str, ...]) -> None:
        with self._lock:
            self._counts.setdefault((name, labels), [0.0] * (len(_WAIT_BUCKETS) + 2))

    def observe(self, name: str, labels: tuple[str, ...], value: float) -> None:
        with self._lock:
            counts = self._counts.setdefault((name, labels), [0.0] * (len(_WAIT_BUCKETS) + 2))
            counts[bisect.bisect_left(_WAIT_BUCKETS, value)] += 1  # a bucket counts what is ≤ its bound
            counts[-1] += value

    def ensure_finished(self, many: list[tuple[str, ...]]) -> None:
        with self._lock:
            for labels in many:
                self._finished.setdefault(labels, 0.0)

    def count_finished(self, labels: tuple[str, ...]) -> None:
        with self._lock:
            self._finished[labels] = self._finished.get(labels, 0.0) + 1

    def set_gauges(self, pool: str, values: list[float]) -> None:
        with self._lock:
            self._gauges[pool] = values

    def forget(self, pool: str) -> None:
        with self._lock:
            self._gauges.pop(pool, None)
            for key in [k for k in self._counts if k[1][0] == pool]:
                del self._counts[key]
            for labels in [k for k in self._finished if k[0] == pool]:
                del self._finished[labels]

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            gauges = list(self._gauges.items())
            counts = [(k, list(v)) for k, v in self._counts.items()]
            finished = list(self._finished.items())
        for i, (name, text) in enumerate(_GAUGES):
            gauge = GaugeMetricFamily(name, text, labels=["pool"])
            for pool, values in gauges:
                gauge.add_metric([pool], values[i])
            yield gauge
        for name, (text, labelnames) in _HISTOGRAMS.items():
            histogram = HistogramMetricFamily(name, text, labels=list(labelnames))
            for (series, labels), c in counts:
                if series == name:
                    cumulative = itertools.accumulate(c[:-1])
                    histogram.add_metric(list(labels), list(zip(_BOUNDS, cumulative, strict=True)), c[-1])
            yield histogram
        counter = CounterMetricFamily(FINISHED, _FINISHED_HELP, labels=list(_FINISHED_LABELS))
        for labels, value in finished:
            counter.add_metric(list(labels), value)
        yield counter

    def describe(self) -> Iterator[Metric]:  # the names, for the registry's duplicate check (no samples)
        yield from (GaugeMetricFamily(name, text) for name, text in _GAUGES)
        yield from (HistogramMetricFamily(name, text) for name, (text, _) in _HISTOGRAMS.items())
        yield CounterMetricFamily(FINISHED, _FINISHED_HELP)


POOLS = PoolSeries()
REGISTRY.register(POOLS)


def serve(port: int, addr: str = "0.0.0.0") -> None:
    if port:
        start_http_server(port, addr=addr)


def _seconds(since: datetime | str | None, until: datetime | None) -> float | None:
    if since is None or until is None:
        return None
    start = datetime.fromisoformat(since.replace("Z", "+00:00")) if isinstance(since, str) else since
    return max((until - start).total_seconds(), 0.0)


def job_transitions(created: str | None, pool: str, prev: MLJobStatus | None, new: MLJobStatus) -> list[tuple[str, dict[str, str], float]]:
    """The observations a status transition makes (pure: the caller records them): admitted → time queued;
    RUNNING → time to start; finished after a start → duration by outcome; finished at all (before RUNNING
    too) → one more of kubepool_mljobs_finished_total by outcome and reason. A resumed job counts from its
    resume (status.queuedAt), not its creation: the time it was suspended was not spent waiting."""
    out: list[tuple[str, dict[str, str], float]] = []
    since = new.queued_at or created
    if (prev is None or prev.admitted_at is None) and new.admitted_at is not None:
        queued = _seconds(since, new.admitted_at)
        if queued is not None:
            out.append((QUEUED_SECONDS, {"pool": pool}, queued))
    if (prev is None or prev.start_time is None) and new.start_time is not None:
        started = _seconds(since, new.start_time)
        if started is not None:
            out.append((START_SECONDS, {"pool": pool}, started))
    if ends(prev, new):
        ran = _seconds(new.start_time, new.completion_time)
        if ran is not None:
            out.append((DURATION_SECONDS, {"pool": pool, "phase": str(new.phase)}, ran))
        out.append((FINISHED, {"pool": pool, "phase": str(new.phase), "reason": new.reason or ""}, 1.0))
    return out


def observe_job(created: str | None, pool: str, prev: MLJobStatus | None, new: MLJobStatus) -> None:
    for name, labels, value in job_transitions(created, pool, prev, new):
        if name == FINISHED:
            POOLS.count_finished(tuple(labels[k] for k in _FINISHED_LABELS))
        else:
            POOLS.observe(name, tuple(labels[k] for k in _HISTOGRAMS[name][1]), value)


# A series Prometheus has never seen at 0 shows no increase at its first observation (rate() needs two samples):
# the first job a pool finishes, queues or fails would be missing from the dashboard. Every pool's job series
# exist, at 0, from the moment the pool does: kubepool_mljobs_finished_total's for each way a job can end.
_FINISHED = tuple(str(p) for p in JobPhase if p.finished)
_FINISH_LABELS = [(str(phase), reason) for phase, reasons in vocabulary.FINISH_REASONS.items() for reason in reasons]


def _job_series(name: str) -> list[tuple[str, tuple[str, ...]]]:
    return [(QUEUED_SECONDS, (name,)), (START_SECONDS, (name,)), *((DURATION_SECONDS, (name, p)) for p in _FINISHED)]


def set_pool(name: str, max_nodes: int, st: ComputePoolStatus) -> None:
    for series, labels in _job_series(name):
        POOLS.ensure(series, labels)
    POOLS.ensure_finished([(name, phase, reason) for phase, reason in _FINISH_LABELS])
    POOLS.set_gauges(name, [max_nodes, st.instances_in_use or 0, st.queued_jobs or 0, st.ready_nodes or 0,
                            st.warm_instances or 0])


def forget_pool(name: str) -> None:
    POOLS.forget(name)
