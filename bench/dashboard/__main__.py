"""`python -m bench.dashboard [--out PNG]` (`make dashboard-picture`): renders the chart's Grafana dashboard
from real data, without Grafana. A private local cluster with kwok nodes, the operator with its metrics on, a
real Prometheus scraping it, the small workload of bench/dashboard/workload.py; then every panel's own queries
through Prometheus's HTTP API, drawn in the dashboard's grid. A panel whose query returns nothing is an error
named on the way out (exit 1), as is a finished panel without the jobs that ended before RUNNING: the picture
also checks the dashboard against what the operator exports."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter
from datetime import datetime
from pathlib import Path

import httpx

from bench.cluster import ROOT, BenchCluster, cli_down, free_port
from bench.controllers import KubepoolOperator
from bench.dashboard import panels, workload
from bench.dashboard.prometheus import Prometheus, Series, binary, has_data

STATE_DIR = Path(os.environ.get("KUBEPOOL_DASHBOARD_STATE_DIR", "/var/tmp/kubepool-dashboard"))
FINISHED = {"DONE", "FAILED", "CANCELLED"}
LEAD_S = 20.0  # the picture starts this long before the first wave: the gauges at rest


def say(line: str) -> None:
    print(f"[dashboard {datetime.now().strftime('%H:%M:%S')}] {line}", file=sys.stderr, flush=True)


def phases(bench: BenchCluster) -> Counter[str]:
    out = bench.kubectl("get", "mljobs", "-A", "-o", "jsonpath={range .items[*]}{.status.phase}{'\\n'}{end}")
    return Counter(line or "NEW" for line in out.splitlines())


def cancel_queued(bench: BenchCluster, job: workload.JobSpec) -> None:
    """Cancels the job, which must still be waiting for capacity: else the picture would not show what it says."""
    admitted = bench.kubectl("get", "mljob", job.name, "-n", job.namespace, "-o", "jsonpath={.status.admittedAt}")
    if admitted:
        raise RuntimeError(f"{job.name} was admitted ({admitted}) before its cancel at {job.cancel_at_s:g}s: "
                           "it would not end while queued; bench/dashboard/workload.py's schedule needs a look")
    bench.kubectl("patch", "mljob", job.name, "-n", job.namespace, "--type", "merge", "-p", workload.CANCEL)
    say(f"cancelled {job.name} while it was queued")


def run_workload(bench: BenchCluster, timeout_s: float) -> float:
    """Submits the waves on their schedule, cancels the queued jobs meant to be and raises the quota; returns
    when every job finished. The start time."""
    t0 = time.time()
    waves = sorted({j.at_s for j in workload.JOBS})
    cancels = sorted((j for j in workload.JOBS if j.cancel_at_s is not None), key=lambda j: j.cancel_at_s or 0.0)
    raised = False
    last_report = 0.0
    while True:
        elapsed = time.time() - t0
        while waves and elapsed >= waves[0]:
            wave = waves.pop(0)
            batch = [workload.mljob(j) for j in workload.JOBS if j.at_s == wave]
            bench.kubectl("apply", "-f", "-", stdin=workload.as_list(batch))
            say(f"submitted {', '.join(j['metadata']['name'] for j in batch)}")
        while cancels and elapsed >= (cancels[0].cancel_at_s or 0.0):
            cancel_queued(bench, cancels.pop(0))
        if not raised and elapsed >= workload.QUOTA_RAISED_AT_S:
            bench.kubectl("apply", "-f", "-", stdin=workload.as_list([workload.quota(20)]))
            raised = True
            say(f"raised {workload.QUOTA_NAMESPACE}'s pod quota: its refused job can start")
        counts = phases(bench)
        if time.time() - last_report >= 15:
            say(f"{elapsed:.0f}s: jobs {dict(sorted(counts.items()))}")
            last_report = time.time()
        if not waves and not cancels and raised and sum(counts[p] for p in FINISHED) == len(workload.JOBS):
            return t0
        if elapsed > timeout_s:
            raise RuntimeError(f"the workload did not finish in {timeout_s:.0f}s: {dict(counts)}")
        time.sleep(2)


def setup(bench: BenchCluster) -> None:
    for node, pool in workload.node_labels().items():
        bench.kubectl("label", "node", node, f"{workload.NODE_LABEL}={pool}", "--overwrite")
    bench.install_stages(workload.STAGES)
    for ns in workload.NAMESPACES:
        bench.create_namespace(ns)
    items = [workload.quota(1), *(workload.pool(p) for p in workload.POOLS)]
    bench.kubectl("apply", "-f", "-", stdin=workload.as_list(items))
    say("waiting until the restarted kwok runs pods again (it first waits out its node leases)")
    probe = workload.probe_pod()
    bench.kubectl("apply", "-f", "-", stdin=workload.as_list([probe]))
    bench.kubectl("wait", "--for=condition=Ready", "pod/kwok-probe", "-n", probe["metadata"]["namespace"], "--timeout=120s")
    bench.kubectl("delete", "pod/kwok-probe", "-n", probe["metadata"]["namespace"], "--wait=false")


def wait_pools_seen(port: int, timeout_s: float = 180) -> None:
    """Until the operator exports each pool with all its nodes Ready: its watches run (a fresh apiserver answers
    "storage is (re)initializing" at first, and kopf backs off) and kwok, restarted for the stages, is back.
    Jobs submitted earlier would show that wait as time queued."""
    want = [f'kubepool_pool_ready_nodes{{pool="{p.name}"}} {float(p.nodes)}' for p in workload.POOLS]
    deadline = time.monotonic() + timeout_s
    while True:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
        missing = [w for w in want if w not in text.splitlines()]
        if not missing:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"the operator did not report {missing} within {timeout_s:.0f}s")
        time.sleep(1)


def query(prom: Prometheus, ps: list[panels.Panel], start: float, end: float, step: float) -> tuple[list[list[list[Series]]], list[str]]:
    """Every target of every panel over the run; and `panel: target` for each that returned no number."""
    results, empty = [], []
    for p in ps:
        per_target = [prom.query_range(t.expr, start, end, step) for t in p.targets]
        empty += [f"{p.title!r}: {t.expr}" for t, r in zip(p.targets, per_target, strict=True) if not has_data(r)]
        results.append(per_target)
        say(f"panel {p.title!r}: {sum(len(r) for r in per_target)} series")
    return results, empty


def ends_missing(ps: list[panels.Panel], results: list[list[list[Series]]]) -> list[str]:
    """The finished panel must show the jobs that never ran (workload.ENDS_BEFORE_RUNNING), each by name."""
    out = []
    for p, per_target in zip(ps, results, strict=True):
        for t, series in zip(p.targets, per_target, strict=True):
            if "kubepool_mljobs_finished_total" in t.expr:
                out += [f"{p.title!r}: no {end} (a job that ended before RUNNING)" for end in workload.missing_ends(series)]
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.dashboard", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "images" / "dashboard.png")
    ap.add_argument("--scrape-seconds", type=float, default=2.0, help="Prometheus's scrape interval")
    ap.add_argument("--rate-interval", type=float, default=60.0, metavar="S",
                    help="$__rate_interval, in seconds: a minute keeps each finished job visible in the rates")
    ap.add_argument("--step", type=float, default=5.0, metavar="S", help="the range queries' step ($__interval)")
    ap.add_argument("--keep-cluster", action="store_true", help="leave the private cluster running")
    args = ap.parse_args(argv)
    dashboard = panels.load()
    ps = panels.panels(dashboard, panels.variables(dashboard, interval_s=args.step, rate_interval_s=args.rate_interval,
                                                   range_s=600))  # $__range: no panel uses it; the run's length
    say(f"{len(ps)} panels in {panels.DASHBOARD.relative_to(ROOT)}")
    say(f"Prometheus: {binary()}")
    say(f"starting a private local cluster in {STATE_DIR} (kwok fake nodes only)")
    port = free_port()
    prom = Prometheus(STATE_DIR.with_name(STATE_DIR.name + "-prometheus"), f"127.0.0.1:{port}", args.scrape_seconds)
    op: KubepoolOperator | None = None
    try:
        bench = BenchCluster.up(fake_nodes=sum(p.nodes for p in workload.POOLS), state_dir=STATE_DIR)
        op = KubepoolOperator(bench, STATE_DIR.with_name(STATE_DIR.name + "-operator.log"),
                              {"KUBEPOOL_OPERATOR_METRICS_PORT": str(port), "KUBEPOOL_OPERATOR_BIND_ADDRESS": "127.0.0.1"})
        setup(bench)
        op.log_path.unlink(missing_ok=True)
        op.start()
        say(f"operator up, metrics on 127.0.0.1:{port}; waiting until it reports every pool's nodes")
        wait_pools_seen(port)
        prom.start()
        say(f"Prometheus scraping it every {args.scrape_seconds:g}s ({prom.url}); submitting {len(workload.JOBS)} jobs")
        t0 = run_workload(bench, timeout_s=600)
        say("every job finished; 30s more so the gauges settle")
        time.sleep(30)
        start, end = t0 - LEAD_S, time.time()
        results, empty = query(prom, ps, start, end, args.step)
        empty += ends_missing(ps, results)
    finally:
        prom.stop()
        if op is not None:
            op.stop()
        if not args.keep_cluster:
            cli_down(STATE_DIR)
    from bench.dashboard.draw import draw  # matplotlib: the `dashboard` extra

    draw(args.out, dashboard.get("title", "dashboard"),
         f"{len(workload.JOBS)} MLJobs on {len(workload.POOLS)} ComputePools, {(end - start) / 60:.1f} min, Prometheus every "
         f"{args.scrape_seconds:g}s; $__rate_interval={args.rate_interval:g}s", (start, end), ps, results)
    say(f"wrote {args.out} ({args.out.stat().st_size // 1024} KiB)")
    if empty:
        say("panels whose queries returned no data, or not the ends the workload makes:\n  " + "\n  ".join(empty))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
