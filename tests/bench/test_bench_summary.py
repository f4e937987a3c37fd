"""The summary's P1 rows on a report shaped like bench/results/operator_scale.json: each target beside the floor
measured in the same run (bench/summary.py). Pure: no cluster."""

from __future__ import annotations

from typing import Any

from bench.operator_scale import REQUESTS_PER_JOB_TARGET, RESOURCE_TARGETS, TARGETS
from bench.summary import scale_rows


def _median(requests_per_job: float, cpu_s: float | None = 1.0) -> dict[str, Any]:
    return {"wall_s": 20.0, "pods_per_s": 40.0, "requests_per_job": requests_per_job, "controller_peak_rss_mib": 100.0,
            "controller_cpu_s": cpu_s, "client_cpu_s": 1.5, "stalled": 0}


def report(writes_floor_requests: float, kopf_cpu_ratio: float = 0.56) -> dict[str, Any]:
    """operator_scale.json's keys, fanout's targets; kubepool above every target."""
    return {"cluster_up_s": 5.6, "cold_build": "", "p1": {
        "jobs": 200, "pods_per_job": 4, "repeats": 3, "warmup_jobs": 50,
        "median": {"kubepool": _median(28.84, 5.5), "kuberay": _median(29.1, 3.7), "floor": _median(16.4, None),
                   "kopf-floor": _median(17.5, 2.0), "writes-floor": _median(writes_floor_requests, None),
                   "kubepool-shared": _median(28.2, 4.8)},
        "ratios": {"kubepool / kuberay": 1.03, "writes-floor / kuberay": 0.81},
        "resource_ratios": {"CPU kubepool / kuberay": 1.44, "peak RSS kubepool / kuberay": 1.29,
                            "CPU kopf-floor / kuberay": kopf_cpu_ratio, "peak RSS kopf-floor / kuberay": 1.04},
        "targets": TARGETS, "resource_targets": RESOURCE_TARGETS, "requests_per_job_target": REQUESTS_PER_JOB_TARGET}}


def rows(rep: dict[str, Any]) -> dict[str, list[str]]:
    return {r[0]: r[1:] for r in scale_rows(rep)}


def test_requests_per_job_row_names_the_writes_floor_when_the_floor_misses_the_target_too() -> None:
    got = rows(report(writes_floor_requests=27.825))
    assert got["P1 API requests per job: kubepool (KubeRay 29.1)"] == [
        "28.8", f"≤ {REQUESTS_PER_JOB_TARGET:g}", "NO: target under the floor (writes-floor 27.8)"]
    assert got["P1 API requests per job: kubepool-shared (KubeRay 29.1)"][2] == "NO: target under the floor (writes-floor 27.8)"


def test_requests_per_job_row_is_a_bare_no_where_the_writes_floor_meets_the_target() -> None:
    row = rows(report(writes_floor_requests=REQUESTS_PER_JOB_TARGET - 1))["P1 API requests per job: kubepool (KubeRay 29.1)"]
    assert row[2] == "NO", "a floor under the target excuses nothing"
    rep = report(writes_floor_requests=27.825)
    rep["p1"]["median"]["kubepool"]["requests_per_job"] = REQUESTS_PER_JOB_TARGET
    assert rows(rep)["P1 API requests per job: kubepool (KubeRay 29.1)"][2] == "yes"


def test_requests_per_job_row_of_a_run_without_a_writes_floor_or_a_target() -> None:
    rep = report(writes_floor_requests=27.825)
    del rep["p1"]["median"]["writes-floor"]
    assert rows(rep)["P1 API requests per job: kubepool (KubeRay 29.1)"][2] == "NO"
    del rep["p1"]["requests_per_job_target"]  # results of runs before the target: the figure, unjudged
    assert rows(rep)["P1 API requests per job: kubepool (KubeRay 29.1)"] == ["28.8", "", ""]


def test_operator_cost_rows_take_the_kopf_floor_of_the_same_run() -> None:
    assert rows(report(27.825))["P1 CPU kubepool / kuberay"] == ["1.44", f"≤ {RESOURCE_TARGETS['CPU kubepool / kuberay']:g}", "NO"]
    rep = report(27.825, kopf_cpu_ratio=1.2)
    assert rows(rep)["P1 CPU kubepool / kuberay"][2] == "NO: target under the floor (CPU kopf-floor / kuberay 1.20)"
    rep["p1"]["resource_ratios"]["peak RSS kopf-floor / kuberay"] = 1.2
    assert rows(rep)["P1 peak RSS kubepool / kuberay"][2] == "NO: target under the floor (peak RSS kopf-floor / kuberay 1.20)"
    assert rows(rep)["P1 CPU kopf-floor / kuberay"] == ["1.20", "", ""]



def test_the_kopf_writes_floor_is_shown_and_bounds_nothing() -> None:
    """The kopf writes floor (a plain kopf operator making kubepool's writes) cost more than kubepool's operator,
    which takes kopf's streams over: it is no lower bound, so the rows show it beside the others and name only the
    kopf floor as the floor."""
    rep = report(27.825, kopf_cpu_ratio=0.9)
    rep["p1"]["resource_ratios"]["CPU kopf-writes-floor / kuberay"] = 1.7
    got = rows(rep)
    assert got["P1 CPU kubepool / kuberay"][2] == "NO"
    assert got["P1 CPU kopf-writes-floor / kuberay"] == ["1.70", "", ""]

def test_p3_is_judged_by_its_ratio_to_the_floor_alone() -> None:
    from bench.latency import TARGET_FLOOR_RATIO
    from bench.summary import latency_rows

    rep: dict[str, Any] = {
        "p3": {"median": {"payload_start": 7.2, "done": 9.5}, "runs": [{"outcome": "DONE"}], "ratio_to_floor": 0.91},
        "ray_floor": {"median_s": 7.9, "target_ratio": TARGET_FLOOR_RATIO}}
    got = {r[0]: r[1:] for r in latency_rows(rep)}
    assert got["P3 submit → payload start (3 instances, process nodes)"] == ["7.2 s", "", ""]
    assert got["P3 payload start ÷ floor"] == ["0.91", f"≤ {TARGET_FLOOR_RATIO:g}", "yes"]
    rep["p3"]["ratio_to_floor"] = TARGET_FLOOR_RATIO + 0.01
    assert {r[0]: r[3] for r in latency_rows(rep)}["P3 payload start ÷ floor"] == "NO"
