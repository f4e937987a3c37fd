"""A/B of the kubepool operator against another revision of itself, side by side in one run (P1 fan-out, or
P2's status lag).

`python -m bench.ab REV [--jobs N] [--pairs K]`: checks REV out into a git worktree, then runs P1 (N jobs of
4 pods, a pool per job, on kwok fake nodes) with this tree's operator and CRDs and REV's in alternating order, K pairs
after one untimed warm-up each. With `--lag`, each run is P2's churn instead (N one-instance jobs in waves of
250 whose heads end 2 s after Running, a fresh namespace and operator per run), compared by its status lag.
Ratios are taken within a pair, so load that drifts during the run (this machine is shared) cancels out; the
median and the spread of the pair ratios are printed and written to `<bench log dir>/ab-<rev>.json` (`-lag`
with `--lag`). Record what it says in bench/NOTES.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import operator_scale as p1
from bench import stats
from bench.cluster import LOG_DIR, BenchCluster
from bench.controllers import KubepoolOperator, kuberay_dir

ROOT = Path(__file__).resolve().parent.parent
KEYS = ("controller_cpu_s", "wall_s", "requests_per_job", "apiserver_cpu_s")
LAG_KEYS = ("status_lag_p99_s", "status_lag_p50_s", "status_lag_max_s", "cpu_s", "wall_s")
LAG_WAVE = 250  # jobs per wave, as P2


def worktree(rev: str) -> tuple[str, Path]:
    sha = subprocess.run(["git", "rev-parse", "--short=10", rev], cwd=ROOT, check=True, capture_output=True,
                         text=True).stdout.strip()  # fmt: skip
    path = Path(tempfile.gettempdir()) / f"kubepool-ab-{sha}"
    if not (path / "src" / "kubepool").is_dir():
        subprocess.run(["git", "worktree", "add", "--detach", str(path), sha], cwd=ROOT, check=True, capture_output=True)
    return sha, path


def use_crds(bench: BenchCluster, system: str) -> None:
    """Install the CRDs of the system's tree before its run: a revision is its operator and its CRDs (the API
    server's cost of every MLJob write depends on the CRD's validation rules)."""
    bench.install_crds(p1.BASE_SRC[p1.BASE].parent if system == p1.BASE else ROOT)


def lag_run(bench: BenchCluster, system: str, jobs: int, tag: str) -> dict[str, Any]:
    """One P2 churn run of `system` ("kubepool" or the base) on a fresh namespace with a freshly started operator."""
    ns = f"lag-{system}-{tag}"
    use_crds(bench, system)
    bench.create_namespace(ns)
    env = {"PYTHONPATH": str(p1.BASE_SRC[p1.BASE])} if system == p1.BASE else None
    op = KubepoolOperator(bench, LOG_DIR / f"ab-lag-{system}.log", env)
    op.start()
    try:
        result = asyncio.run(p1._churn(bench, ns, jobs, max(jobs // LAG_WAVE, 1), op, delete=False))
        bench.delete_namespaces([ns])  # with the operator up: it may hold finalizers
    finally:
        op.stop()
    print(f"  {system:<15} {tag:<7} lag p50 {result['status_lag_p50_s']:.2f} s p99 {result['status_lag_p99_s']:.2f} s "
          f"max {result['status_lag_max_s']:.2f} s  cpu {result['cpu_s']:.1f} s  waves "
          f"{', '.join(f'{w:.1f}' for w in result['wave_s'])} s{'  STALLED' if result['stalled'] else ''}", flush=True)
    return result


def fanout_run(bench: BenchCluster, system: str, jobs: int, tag: str, home: Path) -> dict[str, Any]:
    use_crds(bench, system)
    result = p1.fanout_run(bench, system, jobs, tag, home)
    return {**result, "apiserver_cpu_s": result["cluster_cpu_s"]["kube-apiserver"]}


def pair_ratios(pairs: list[dict[str, dict[str, Any]]], keys: Sequence[str] = KEYS) -> dict[str, dict[str, float]]:
    """Per measure: median, min and max over the pairs of this tree / the base (stalled runs left out), and
    `balanced`: the geometric mean of the medians of the pairs this tree ran first and of those it ran second.
    The second run of a pair is often the faster (the first warms the API server's caches), so with an odd
    number of pairs the plain median leans towards the order that ran more often; `balanced` does not."""
    out = {}
    for k in keys:
        by_order: dict[bool, list[float]] = {True: [], False: []}
        for i, p in enumerate(pairs):
            if p["kubepool"].get(k) and p[p1.BASE].get(k):
                by_order[i % 2 == 0].append(stats.ratio(p["kubepool"][k], p[p1.BASE][k]))
        rs = by_order[True] + by_order[False]
        if rs:
            out[k] = {"median": stats.median(rs), "min": min(rs), "max": max(rs)}
            if by_order[True] and by_order[False]:
                out[k]["balanced"] = (stats.median(by_order[True]) * stats.median(by_order[False])) ** 0.5
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.ab", description=__doc__.split("\n\n")[0])
    ap.add_argument("rev", help="the base revision (e.g. main~3, a sha)")
    ap.add_argument("--jobs", type=int, help="jobs per run (default 50; with --lag 1000)")
    ap.add_argument("--pairs", type=int, default=4, help="timed pairs, alternating which tree runs first (default 4)")
    ap.add_argument("--fake-nodes", type=int, default=100)
    ap.add_argument("--lag", action="store_true", help="P2's status lag instead of P1")
    args = ap.parse_args(argv)
    args.jobs = args.jobs or (1000 if args.lag else 50)
    sha, tree = worktree(args.rev)
    p1.BASE_SRC[p1.BASE] = tree / "src"
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    what = f"{args.jobs} one-instance jobs (P2 churn)" if args.lag else f"{args.jobs} jobs x 4 pods"
    print(f"A/B: this tree vs {args.rev} ({sha}, worktree {tree}); {what}, {args.pairs} pairs", flush=True)
    bench = BenchCluster.up(args.fake_nodes)
    pairs: list[dict[str, dict[str, Any]]] = []
    try:
        p1.wait_for_kwok(bench)  # a freshly started kwok first waits out its old leases
        if args.lag:
            p1.create_pools(bench, [p1.pool(p1.shared_pool(i), 100) for i in range(p1.POOLS)])
            for s in ("kubepool", p1.BASE):
                lag_run(bench, s, LAG_WAVE // 5, "warmup")
        else:
            home = kuberay_dir()
            for s in ("kubepool", p1.BASE):
                use_crds(bench, s)
                p1.fanout_run(bench, s, max(args.jobs // 4, 5), "warmup", home)
        for i in range(args.pairs):
            order = ("kubepool", p1.BASE) if i % 2 == 0 else (p1.BASE, "kubepool")
            if args.lag:
                pairs.append({s: lag_run(bench, s, args.jobs, f"ab{i}") for s in order})
            else:
                pairs.append({s: fanout_run(bench, s, args.jobs, f"ab{i}", home) for s in order})
    finally:
        bench.down()
    ratios = pair_ratios(pairs, LAG_KEYS if args.lag else KEYS)
    print(f"this tree / {args.rev}, per pair:", flush=True)
    for k, r in ratios.items():
        balanced = f", order-balanced {r['balanced']:.2f}" if "balanced" in r else ""
        print(f"  {k:<18} median {r['median']:.2f}  (min {r['min']:.2f}, max {r['max']:.2f}{balanced})", flush=True)
    out = LOG_DIR / f"ab-{sha}{'-lag' if args.lag else ''}.json"
    out.write_text(json.dumps({"base": args.rev, "sha": sha, "jobs": args.jobs, "pairs": pairs, "ratios": ratios}, indent=1))
    print(f"written: {out}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
