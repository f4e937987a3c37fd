"""The operator's queue metrics: which status transitions observe what (pure), and that every query of the
shipped Grafana dashboard names a metric the operator exports."""

from __future__ import annotations

import ast
import json
import re
from datetime import timedelta
from pathlib import Path

from prometheus_client import REGISTRY, CollectorRegistry, Gauge, Histogram

from kubepool import contract
from kubepool.api import JobPhase, MLJobStatus
from kubepool.controller import jobsteps, metrics, vocabulary
from support.factories import T0

CREATED = "2026-01-01T12:00:00Z"  # T0
DASHBOARD = Path(__file__).resolve().parents[3] / "charts" / "kubepool" / "dashboards" / "kubepool.json"


def st(**fields: object) -> MLJobStatus:
    return MLJobStatus.model_validate(fields)


def observed(prev: MLJobStatus | None, new: MLJobStatus) -> list[tuple[str, dict[str, str], float]]:
    return metrics.job_transitions(CREATED, "cpu", prev, new)


def test_each_transition_is_observed_once() -> None:
    queued = st(phase="PENDING")
    admitted = st(phase="PENDING", admittedAt=T0 + timedelta(seconds=40))
    running = admitted.model_copy(update={"phase": JobPhase.RUNNING, "start_time": T0 + timedelta(seconds=55)})
    done = running.model_copy(update={"phase": JobPhase.DONE, "completion_time": T0 + timedelta(seconds=155)})
    assert observed(None, queued) == []
    assert observed(queued, admitted) == [("kubepool_mljob_queued_seconds", {"pool": "cpu"}, 40.0)]
    assert observed(admitted, admitted) == []
    assert observed(admitted, running) == [("kubepool_mljob_start_seconds", {"pool": "cpu"}, 55.0)]
    assert observed(running, done) == [("kubepool_mljob_duration_seconds", {"pool": "cpu", "phase": "DONE"}, 100.0),
                                       ("kubepool_mljobs_finished", {"pool": "cpu", "phase": "DONE", "reason": ""}, 1.0)]
    assert observed(done, done) == []
    # Cancelled while queued: it never ran, so no duration, but it finished; a first status that is already
    # admitted counts both waits.
    assert observed(queued, st(phase="CANCELLED", reason="Cancelled", completionTime=T0)) == [
        ("kubepool_mljobs_finished", {"pool": "cpu", "phase": "CANCELLED", "reason": "Cancelled"}, 1.0)]
    assert [o[0] for o in observed(None, running)] == ["kubepool_mljob_queued_seconds", "kubepool_mljob_start_seconds"]


def test_a_resumed_job_counts_from_its_resume() -> None:
    resumed = st(phase="PENDING", reason="Resumed", queuedAt=T0 + timedelta(seconds=300))
    admitted = resumed.model_copy(update={"admitted_at": T0 + timedelta(seconds=310)})
    assert observed(resumed, admitted) == [("kubepool_mljob_queued_seconds", {"pool": "cpu"}, 10.0)]


def test_dashboard_queries_name_exported_metrics() -> None:
    exported = {m.name for m in REGISTRY.collect() if m.name.startswith("kubepool_")}
    board = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    assert len(exprs) >= 8
    for expr in exprs:
        names = set(re.findall(r"\bkubepool_[a-z_]+", expr))
        assert names, f"query names no kubepool metric: {expr}"
        for name in names:
            base = re.sub(r"_(bucket|sum|count|total|created)$", "", name)
            assert base in exported or name in exported, f"{expr}: {name} is not exported by the operator"


def test_a_pools_job_series_exist_at_zero_so_its_first_failure_shows() -> None:
    from kubepool.api import ComputePoolStatus

    def count(name: str, **labels: str) -> float | None:
        return REGISTRY.get_sample_value(name, labels)

    metrics.set_pool("fresh-pool", 2, ComputePoolStatus())
    assert count("kubepool_mljob_duration_seconds_count", pool="fresh-pool", phase="FAILED") == 0.0
    assert count("kubepool_mljob_queued_seconds_count", pool="fresh-pool") == 0.0
    ends = [(str(phase), reason) for phase, reasons in vocabulary.FINISH_REASONS.items() for reason in reasons]
    assert {"Completed", "HeadFailed", "PipInstallFailed", "Cancelled"} <= {r for _, r in ends}
    for phase, reason in ends:  # the first job the pool finishes, any way, is an increase rate() sees
        assert count("kubepool_mljobs_finished_total", pool="fresh-pool", phase=phase, reason=reason) == 0.0, (phase, reason)
    metrics.forget_pool("fresh-pool")
    assert count("kubepool_mljob_duration_seconds_count", pool="fresh-pool", phase="FAILED") is None
    assert count("kubepool_mljobs_finished_total", pool="fresh-pool", phase="FAILED", reason="HeadFailed") is None
    assert count("kubepool_pool_max_instances", pool="fresh-pool") is None


def test_every_way_a_job_ends_has_its_finished_series() -> None:
    """Each (phase, reason) jobsteps finishes a job with, and each reason the runtime names, is in
    vocabulary.FINISH_REASONS: a new way to end gets its kubepool_mljobs_finished_total series from a pool's start."""
    tree = ast.parse((Path(jobsteps.__file__)).read_text())
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
             and n.func.attr == "finish"]
    ends = set()
    for call in calls:
        phase, reason = call.args[0], call.args[1]
        assert isinstance(phase, ast.Attribute), ast.unparse(call)
        if isinstance(reason, ast.Attribute):
            ends.add((JobPhase[phase.attr], getattr(vocabulary, reason.attr)))
        else:  # the runtime's own reason (runtime_failure_reason)
            ends.update((JobPhase[phase.attr], r) for r in contract.RUNTIME_FAILURE_REASONS)
    assert len(ends) >= 10, ends
    declared = {(phase, r) for phase, reasons in vocabulary.FINISH_REASONS.items() for r in reasons}
    assert ends <= declared, ends - declared


def test_pool_series_scrape_as_prometheus_clients_own_metrics() -> None:
    """PoolSeries keeps numbers, not prometheus_client's objects: its samples are what a Histogram and a Gauge
    with the same observations give (bounds, cumulative counts, +Inf, sum, count), a value on a bound included."""
    ours, theirs = metrics.PoolSeries(), CollectorRegistry()
    ref = Histogram(metrics.DURATION_SECONDS, "h", ["pool", "phase"], buckets=metrics._WAIT_BUCKETS, registry=theirs)
    gauge = Gauge("kubepool_pool_queued_jobs", "g", ["pool"], registry=theirs)
    for value in (0.2, 1, 1.5, 300, 299.9, 5e5):
        ours.observe(metrics.DURATION_SECONDS, ("a", "DONE"), value)
        ref.labels(pool="a", phase="DONE").observe(value)
    ours.ensure(metrics.DURATION_SECONDS, ("b", "FAILED"))
    ref.labels(pool="b", phase="FAILED")
    ours.set_gauges("a", [4, 2, 7, 1, 0])
    gauge.labels(pool="a").set(7)

    def samples(metric_families: object, names: set[str]) -> set[tuple[str, tuple[tuple[str, str], ...], float]]:
        return {(s.name, tuple(sorted(s.labels.items())), s.value) for m in metric_families for s in m.samples  # type: ignore[attr-defined]
                if m.name in names and not s.name.endswith("_created")}

    names = {metrics.DURATION_SECONDS, "kubepool_pool_queued_jobs"}
    got = samples(ours.collect(), names)
    assert got == samples(theirs.collect(), names)
    assert ("kubepool_mljob_duration_seconds_bucket", (("le", "1.0"), ("phase", "DONE"), ("pool", "a")), 2.0) in got
    ours.forget("a")
    assert {s[2] for s in samples(ours.collect(), names)} == {0.0}  # only b's series, at zero


def test_jobs_that_end_before_running_are_counted_by_reason() -> None:
    def finished(**labels: str) -> float | None:
        return REGISTRY.get_sample_value("kubepool_mljobs_finished_total", labels)

    labels = {"pool": "short-pool", "phase": "FAILED", "reason": "InstancesUnavailable"}
    admitted = st(phase="PENDING", admittedAt=T0)
    gave_up = admitted.model_copy(update={"phase": JobPhase.FAILED, "reason": "InstancesUnavailable",
                                          "completion_time": T0 + timedelta(seconds=600)})
    metrics.observe_job(CREATED, "short-pool", admitted, gave_up)
    metrics.observe_job(CREATED, "short-pool", gave_up, gave_up)  # a later pass over the same end: no more
    assert finished(**labels) == 1.0
    assert REGISTRY.get_sample_value("kubepool_mljob_duration_seconds_count",
                                     {"pool": "short-pool", "phase": "FAILED"}) is None  # it never ran
    metrics.forget_pool("short-pool")
    assert finished(**labels) is None


def test_dashboard_plots_every_end_and_each_pools_waits() -> None:
    exprs = [t["expr"] for p in json.loads(DASHBOARD.read_text())["panels"] for t in p.get("targets", [])]
    assert any("kubepool_mljobs_finished_total" in e and "reason" in e for e in exprs)
    for histogram in ("kubepool_mljob_queued_seconds_bucket", "kubepool_mljob_start_seconds_bucket"):
        assert any(histogram in e and "by (le, pool)" in e for e in exprs), histogram
