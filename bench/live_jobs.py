"""P6: the operator at 5000 live jobs. One-instance jobs on kwok fake nodes, created in waves (each wave DONE
before the next, as P2), kept: the operator's RSS with all of them live, the status lag (head pod Succeeded →
MLJob DONE, p99), then the operator restarted and the time until it has reconciled every job again (its own
`kubepool_reconcile_seconds_count` reaching the number of jobs; also until its CPU is quiet, its start-up over).

`python -m bench.live_jobs [--jobs N] [--quick]`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import stats
from bench.cluster import LOG_DIR, BenchCluster, describe_machine, free_port, machine_line
from bench.controllers import KubepoolOperator
from bench.operator_scale import POOLS, _churn, create_pools, pool, shared_pool, wait_for_kwok

RESULTS = Path(__file__).with_name("results")
TARGETS = {"rss_mib_at_live_jobs": 300.0, "status_lag_p99_s": 1.0, "restart_to_reconciled_s": 10.0}
WAVE = 250  # as P2: a wave the size of P2's, so the two lags compare
RESTART_TIMEOUT_S = 600.0


def reconciled(metrics_text: str) -> int:
    """Passes the operator finished, from its own metrics (`kubepool_reconcile_seconds_count`)."""
    m = re.search(r"^kubepool_reconcile_seconds_count\s+([0-9.e+]+)$", metrics_text, re.MULTILINE)
    return int(float(m.group(1))) if m else 0


def _scrape(port: int) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            return r.read().decode()
    except OSError:
        return ""


def restart(op: KubepoolOperator, port: int, jobs: int) -> dict[str, float | None]:
    """Stop the operator, start it again; seconds until it has reconciled `jobs` jobs, and until it is quiet.
    The reconciled clock runs from the start, apart from the quiet one: waiting for a quiet operator first
    stopped the reconciled clock at the first quiet 2-s window, whole windows after the last reconcile."""
    op.stop()
    t0 = time.monotonic()
    op.start(settle=False)  # returns once configured
    while (done := reconciled(_scrape(port))) < jobs:
        if time.monotonic() - t0 > RESTART_TIMEOUT_S:  # a result too: how far it got
            print(f"  P6: only {done}/{jobs} jobs reconciled {RESTART_TIMEOUT_S:.0f} s after the restart", flush=True)
            return {"restart_to_reconciled_s": None, "reconciled_at_timeout": done, "restart_to_quiet_s": None,
                    "rss_mib_after_restart": op.usage().rss_mib}
        time.sleep(0.1)
    done_s = time.monotonic() - t0
    op.settle()
    return {"restart_to_reconciled_s": done_s, "restart_to_quiet_s": time.monotonic() - t0,
            "rss_mib_after_restart": op.usage().rss_mib}


def measure(bench: BenchCluster, jobs: int) -> dict[str, Any]:
    ns, port = "p6-live", free_port()
    bench.create_namespace(ns)
    create_pools(bench, [pool(shared_pool(i), 100) for i in range(POOLS)])
    env = {"KUBEPOOL_OPERATOR_METRICS_PORT": str(port), "KUBEPOOL_OPERATOR_BIND_ADDRESS": "127.0.0.1"}
    op = KubepoolOperator(bench, LOG_DIR / "kubepool-p6.log", env)
    op.start()
    try:
        waves = max(jobs // WAVE, 1)
        print(f"P6: {jobs} one-instance jobs in {waves} waves, kept live; then the operator restarted", flush=True)
        live = asyncio.run(_churn(bench, ns, jobs, waves, op, delete=False))
        print(f"  RSS at {live['live_jobs']} live jobs {live['rss_mib_at_live_jobs']:.0f} MiB, lag p99 "
              f"{live['status_lag_p99_s']:.2f} s; restarting the operator", flush=True)
        again = restart(op, port, live["live_jobs"])
        print(f"  restart: all {live['live_jobs']} reconciled after {stats.fmt(again['restart_to_reconciled_s'], 1)} s "
              f"(quiet after {stats.fmt(again['restart_to_quiet_s'], 1)} s), RSS {stats.fmt(again['rss_mib_after_restart'], 0)} MiB", flush=True)
    finally:
        op.stop()
    bench.delete_namespaces([ns])
    keep = ("jobs", "live_jobs", "stalled", "rss_mib_at_live_jobs", "peak_rss_mib", "status_lag_p50_s",
            "status_lag_p99_s", "wave_s", "cpu_s", "requests_per_job")
    return {**{k: live[k] for k in keep}, **again, "targets": TARGETS}


def markdown(r: dict[str, Any]) -> str:
    rows = [[f"operator RSS at {r['live_jobs']} live jobs (MiB)", stats.fmt(r["rss_mib_at_live_jobs"], 0), f"≤ {TARGETS['rss_mib_at_live_jobs']:.0f}"],
            ["status lag p50 / p99 (s)", f"{stats.fmt(r['status_lag_p50_s'])} / {stats.fmt(r['status_lag_p99_s'])}", f"p99 ≤ {TARGETS['status_lag_p99_s']:g}"],
            ["restart to every job reconciled (s)", stats.fmt(r["restart_to_reconciled_s"], 1), f"≤ {TARGETS['restart_to_reconciled_s']:g}"],
            ["restart to a quiet operator (s)", stats.fmt(r["restart_to_quiet_s"], 1), ""],
            ["operator RSS after the restart (MiB)", stats.fmt(r["rss_mib_after_restart"], 0), ""],
            ["waves create → DONE (s)", ", ".join(f"{w:.1f}" for w in r["wave_s"]), ""]]  # fmt: skip
    return "\n".join([f"# P6: {r['jobs']} live jobs", "", f"{r['when']}. {machine_line(r['machine'])}", "",
                      stats.markdown_table(["measure", "value", "target"], rows, right=(1,))]) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.live_jobs", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="500 jobs")
    ap.add_argument("--jobs", type=int, help="live jobs (default 5000)")
    args = ap.parse_args(argv)
    jobs = args.jobs or (500 if args.quick else 5000)
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "machine": describe_machine()}
    bench = BenchCluster.up(100)
    try:
        wait_for_kwok(bench)  # a freshly started kwok first waits out its old leases
        report.update(measure(bench, jobs))
    finally:
        bench.down()
    name = "live_jobs-quick" if args.quick else "live_jobs"
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(report, indent=1))
    (RESULTS / f"{name}.md").write_text(markdown(report))
    print("\n" + markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
