"""Pure helpers of the operator benchmarks (bench/stats.py, bench/operator_scale.py manifests): no cluster."""

from __future__ import annotations

import math

from bench.operator_scale import POOLS, mljob, raw_pods, raycluster, submissions, summarize_p1

from bench import stats

METRICS = """# HELP apiserver_request_total [STABLE] Counter of apiserver requests
# TYPE apiserver_request_total counter
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1"} 800
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="status",verb="PATCH",version="v1"} 1.6e+03
apiserver_request_total{code="409",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1"} 2
apiserver_request_duration_seconds_count{verb="POST"} 99
"""


def test_percentile_interpolates_like_numpy() -> None:
    xs = [4.0, 1.0, 3.0, 2.0]
    assert stats.percentile(xs, 50) == 2.5
    assert stats.percentile(xs, 0) == 1.0
    assert stats.percentile(xs, 100) == 4.0
    assert math.isclose(stats.percentile(xs, 99), 3.97)
    assert stats.percentile([7.0], 99) == 7.0
    assert math.isnan(stats.percentile([], 50))


def test_request_totals_sum_codes_and_keep_subresources() -> None:
    totals = stats.request_totals(METRICS)
    assert totals == {("POST", "pods"): 802.0, ("PATCH", "pods/status"): 1600.0}


def test_delta_and_by_verb() -> None:
    before = {("POST", "pods"): 10.0, ("GET", "pods"): 5.0}
    after = {("POST", "pods"): 30.0, ("GET", "pods"): 5.0, ("PATCH", "pods/status"): 4.0}
    d = stats.delta(before, after)
    assert d == {("POST", "pods"): 20.0, ("PATCH", "pods/status"): 4.0}
    assert list(stats.by_verb(d).items()) == [("POST", 20.0), ("PATCH", 4.0)]


def test_proc_readings() -> None:
    status = "Name:\tpython\nVmHWM:\t  204800 kB\nVmRSS:\t  102400 kB\n"
    assert stats.proc_status_kib(status, "VmRSS") == 102400
    assert stats.proc_status_kib(status, "VmHWM") == 204800
    assert stats.proc_status_kib(status, "VmSwap") == 0
    stat = "1234 (python -m x) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 3 0 99 0 0"
    assert stats.proc_cpu_seconds(stat, 100) == 3.0


def test_fmt_and_table() -> None:
    assert stats.fmt(None) == "–"
    assert stats.fmt(math.nan) == "–"
    assert stats.fmt(1.234, 1) == "1.2"
    assert stats.fmt(3) == "3"
    table = stats.markdown_table(["a", "b"], [["x", 1]], right=(1,))
    assert table == "| a | b |\n|---|---:|\n| x | 1 |\n"
    assert math.isnan(stats.ratio(1.0, 0.0))


def test_same_shape_for_all_three_systems() -> None:
    jobs = 3
    assert len(submissions("kubepool", "ns", jobs)) == jobs
    assert len(submissions("kuberay", "ns", jobs)) == jobs
    assert len(submissions("floor", "ns", jobs)) == 4 * jobs
    rc = raycluster(0)["spec"]
    head, workers = rc["headGroupSpec"]["template"]["spec"], rc["workerGroupSpecs"][0]
    assert workers["replicas"] == 3
    assert head == workers["template"]["spec"] | {"containers": head["containers"]}
    assert head["nodeSelector"] == raw_pods(0)[0]["spec"]["nodeSelector"] == {"kubepool.dev/node-pool": "fake"}
    assert mljob(0, 4, "p")["spec"]["computePool"] == "p"
    assert submissions("kubepool-shared", "ns", POOLS + 2)[-1][1]["spec"]["computePool"] == "bench-fake-1"
    assert submissions("kubepool", "ns", 2)[-1][1]["spec"]["computePool"] == "bench-job-1"
    assert "env" not in mljob(0, 4, "p")["spec"]
    assert mljob(0, 1, "p", complete=True)["spec"]["env"] == [{"name": "BENCH_COMPLETE", "value": "true"}]


def test_summarize_p1_ratios_pair_by_pair() -> None:
    def run(wall: float | None, rss: float | None) -> dict[str, object]:
        return {"wall_s": wall, "pods_per_s": 800 / wall if wall else 1.0, "requests_per_job": 10.0,
                "controller_peak_rss_mib": rss, "controller_cpu_s": rss, "stalled": wall is None}

    runs = {"kubepool": [run(10, 100), run(30, 100), run(None, 100)], "kuberay": [run(5, 50), run(30, 50), run(5, 50)],
            "floor": [run(5, None), run(10, None), run(5, None)]}
    s = summarize_p1(runs)
    assert s["median"]["kubepool"]["wall_s"] == 20  # the stalled run has no wall time
    assert s["median"]["kubepool"]["stalled"] == 1
    assert s["median"]["floor"]["controller_peak_rss_mib"] is None
    assert s["ratios"]["kubepool / kuberay"] == 1.5  # median of 2.0 and 1.0, not 20 / 17.5
    assert s["ratios"]["kubepool / floor"] == 2.5
    # The operators' own cost, pair by pair (a stalled run still used its CPU and memory).
    assert s["resource_ratios"] == {"CPU kubepool / kuberay": 2.0, "peak RSS kubepool / kuberay": 2.0}


def test_profile_top_counts_each_function_once_per_stack() -> None:
    collapsed = (
        "run (kopf/x.py:1);reconcile (kubepool/r.py:10);reconcile (kubepool/r.py:12);validate (pydantic/m.py:5) 3\n"
        "run (kopf/x.py:1);pools (kubepool/s.py:90) 1\n"
        "garbage\n"
    )
    top = stats.profile_top(collapsed, ["kubepool/", "pydantic/"])
    assert top == [("reconcile (kubepool/r.py)", 0.75), ("validate (pydantic/m.py)", 0.75), ("pools (kubepool/s.py)", 0.25)]
    assert stats.profile_top(collapsed, ["kubepool/"], exclude=["s.py"]) == [("reconcile (kubepool/r.py)", 0.75)]
    assert stats.profile_top("", ["x"]) == []


def test_ab_balances_the_order_within_pairs() -> None:
    from bench import ab

    def pair(this: float, base: float) -> dict[str, dict[str, float]]:
        return {"kubepool": {"wall_s": this}, "kubepool-base": {"wall_s": base}}

    # The second run of every pair is 20 % faster and the trees are equal: 2 of 3 pairs ran this tree first,
    # so the plain median says 1.25; the order-balanced figure says 1.0.
    r = ab.pair_ratios([pair(10, 8), pair(8, 10), pair(10, 8)])["wall_s"]
    assert math.isclose(r["median"], 1.25) and math.isclose(r["balanced"], 1.0)


def test_p6_reads_the_operators_own_reconcile_count_and_reports_its_targets() -> None:
    from bench import live_jobs, summary

    text = "# HELP x\nkubepool_reconcile_seconds_bucket{le=\"0.1\"} 3.0\nkubepool_reconcile_seconds_count 5012.0\n"
    assert live_jobs.reconciled(text) == 5012 and live_jobs.reconciled("") == 0
    rep = {"live_jobs": 5000, "rss_mib_at_live_jobs": 290.0, "status_lag_p99_s": 1.5, "restart_to_reconciled_s": 9.0,
           "targets": live_jobs.TARGETS}
    assert [r[3] for r in summary.live_rows(rep)] == ["yes", "NO", "yes"]
