"""P3 latency: submit → payload start and submit → DONE of a 3-instance trivial job on local process nodes
(pods are real processes: the runtime starts Ray on every instance, the head gates on all 3, then runs the
payload), broken down by stage from watch events of the MLJob and its pods, the head's log lines (arrival
times, streamed) and the payload's own clock. One warm-up job, then the median over repeats.

`python -m bench.latency [--quick] [--repeats R]`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from bench import rayfloor, stats
from bench.cluster import LOG_DIR, STATE_DIR, BenchCluster, describe_machine, machine_line, watch
from bench.controllers import KubepoolOperator

RESULTS = Path(__file__).with_name("results")
INSTANCES = 3
# P3's target (issue #44): payload start ÷ a bare Ray cluster formed by hand (bench/rayfloor.py), same run; none in
# seconds, since the floor itself moves with the machine.
TARGET_FLOOR_RATIO = 1.0
TIMEOUT_S = 300.0
MARK = "BENCH_PAYLOAD_START"
PAYLOAD = ["python", "-c", f"import time; print('{MARK}', time.time(), flush=True)"]
# (key, what it marks): the stages, in order; each row of the table is the time from the previous one.
STAGES = (
    ("admitted", "MLJob admitted (status.admittedAt set)"),
    ("pods_created", f"all {INSTANCES} pods created"),
    ("scheduled", f"all {INSTANCES} pods bound to nodes"),
    ("pods_running", f"all {INSTANCES} pods Running"),
    ("ray_head", "Ray head started (head log)"),
    ("ray_formed", f"Ray formed: {INSTANCES}/{INSTANCES} instances (head log)"),
    ("payload_start", "payload started (its own clock)"),
    ("done", "MLJob DONE (watch event)"),
)
# Local nodes share the host's network and run as this user (see tests/operator/operator_cluster.py).
OPERATOR_ENV = {"KUBEPOOL_OPERATOR_RAY_PORT_STRIDE": "3000", "KUBEPOOL_OPERATOR_WORKER_GRACE_SECONDS": "5",
                "KUBEPOOL_OPERATOR_POD_TERMINATION_GRACE_SECONDS": "3"}


def operator_env() -> dict[str, str]:
    path = Path(os.path.realpath(sys.executable))
    reachable = all(os.stat(d).st_mode & 0o001 for d in path.parents)
    return OPERATOR_ENV | ({} if reachable else {"KUBEPOOL_OPERATOR_RUN_AS_USER": ""})


def pool() -> dict[str, Any]:
    return {"apiVersion": "kubepool.dev/v1alpha1", "kind": "ComputePool", "metadata": {"name": "bench-local"},
            "spec": {"minNodes": 0, "maxNodes": INSTANCES, "nodeSelector": {"kubepool.dev/node-pool": "bench-local"},
                     "resources": {"cpu": "1", "memory": "2Gi"}}}  # fmt: skip


# The job as submitted by default, and with Ray's dashboard off (spec.ray.dashboard: false), measured side by side.
VARIANTS = {"p3": {}, "p3_no_dashboard": {"ray": {"dashboard": False}}}
FLOOR = "ray_floor"  # run between the variants: the same machine's bare Ray cluster (bench/rayfloor.py)


def job(name: str, extra: dict[str, Any] | None = None, pool: str = "bench-local") -> dict[str, Any]:
    return {"apiVersion": "kubepool.dev/v1alpha1", "kind": "MLJob", "metadata": {"name": name},
            "spec": {"computePool": pool, "targetInstances": INSTANCES, "entrypoint": {"command": PAYLOAD},
                     **(extra or {})}}


def log_marks(lines: Sequence[tuple[float, str]]) -> dict[str, float]:
    """Stage times from the head's log: (arrival time, line) pairs; the payload's line carries its own clock."""
    marks: dict[str, float] = {}
    for t, line in lines:
        if "Ray head started" in line:
            marks.setdefault("ray_head", t)
        elif "instance requirement met" in line:
            marks.setdefault("ray_formed", t)
        elif line.startswith(MARK):
            marks.setdefault("payload_start", float(line.split()[1]))
    return marks


def breakdown(submit: float, marks: dict[str, float]) -> dict[str, float | None]:
    """Seconds from submit to each stage (None: not seen)."""
    return {k: (marks[k] - submit if k in marks else None) for k, _ in STAGES}


async def _follow_head_log(client: httpx.AsyncClient, ns: str, pod: str, lines: list[tuple[float, str]]) -> None:
    """Stream the head's log from its start; the agent serves it once the container runs (retry until then)."""
    while True:
        try:
            async with client.stream("GET", f"/api/v1/namespaces/{ns}/pods/{pod}/log", params={"follow": "true"},
                                     timeout=httpx.Timeout(None, connect=10)) as resp:
                if resp.status_code == 200:
                    async for line in resp.aiter_lines():
                        lines.append((time.time(), line))
                    return
        except httpx.HTTPError:
            pass
        await asyncio.sleep(0.2)


async def follow(bench: BenchCluster, ns: str, body: dict[str, Any]) -> dict[str, Any]:
    """Submit the job `body` (one of `job`'s) and follow it to its end: its outcome and seconds to each stage."""
    name = body["metadata"]["name"]
    marks: dict[str, float] = {}
    pods: dict[str, dict[str, Any]] = {}
    lines: list[tuple[float, str]] = []
    outcome: list[str] = []  # the job's final phase
    finished = asyncio.Event()
    tasks: list[asyncio.Task[None]] = []
    following: list[str] = []  # the head pod whose log is streamed

    async with bench.client() as client:
        def on_job(kind: str, obj: dict[str, Any], t: float) -> None:
            st = obj.get("status") or {}
            if st.get("admittedAt"):
                marks.setdefault("admitted", t)
            if st.get("phase") in ("DONE", "FAILED", "CANCELLED"):
                marks.setdefault("done", t)
                outcome.append(f"{st['phase']} ({st.get('reason')}: {st.get('message')})")
                finished.set()

        def on_pod(kind: str, obj: dict[str, Any], t: float) -> None:
            pods[obj["metadata"]["name"]] = obj
            if len(pods) >= INSTANCES:
                marks.setdefault("pods_created", t)
            if sum(bool(p["spec"].get("nodeName")) for p in pods.values()) >= INSTANCES:
                marks.setdefault("scheduled", t)
            if sum(p.get("status", {}).get("phase") == "Running" for p in pods.values()) >= INSTANCES:
                marks.setdefault("pods_running", t)
            labels = obj["metadata"].get("labels", {})
            if labels.get("kubepool.dev/role") == "head" and obj["spec"].get("nodeName") and not following:
                following.append(obj["metadata"]["name"])
                tasks.append(asyncio.create_task(_follow_head_log(client, ns, obj["metadata"]["name"], lines)))

        sel = {"labelSelector": f"kubepool.dev/job={name}"}
        tasks.append(asyncio.create_task(watch(client, f"/api/v1/namespaces/{ns}/pods", on_pod, sel)))
        tasks.append(asyncio.create_task(watch(client, f"/apis/kubepool.dev/v1alpha1/namespaces/{ns}/mljobs", on_job,
                                               {"fieldSelector": f"metadata.name={name}"})))
        await asyncio.sleep(0.5)  # both watches listed
        submit = time.time()
        r = await client.post(f"/apis/kubepool.dev/v1alpha1/namespaces/{ns}/mljobs", json=body)
        r.raise_for_status()
        try:
            await asyncio.wait_for(finished.wait(), TIMEOUT_S)
            await asyncio.sleep(1.0)  # the log stream's last lines
        finally:
            for t in tasks:
                t.cancel()
    marks.update(log_marks(lines))
    result: dict[str, Any] = {"outcome": outcome[0], "since_submit_s": breakdown(submit, marks)}
    if not outcome[0].startswith("DONE"):
        result["head_log_tail"] = [text for _, text in lines[-30:]]
    return result


def measure(bench: BenchCluster, repeats: int) -> dict[str, dict[str, Any]]:
    """Per variant: its runs and medians per stage. One warm-up job, then the variants alternate job by job, so
    a slow phase of the (shared) machine hits both."""
    bench.kubectl("apply", "-f", "-", stdin=json.dumps(pool()))
    ns = "p3-latency"
    bench.create_namespace(ns)
    op = KubepoolOperator(bench, LOG_DIR / "kubepool-p3.log", operator_env())
    op.start()
    runs: dict[str, list[dict[str, Any]]] = {v: [] for v in VARIANTS}
    floor: list[float] = []
    try:
        schedule = [("warm-up", "p3")] + [(f"run {i}", v) for i in range(1, repeats + 1) for v in (*VARIANTS, FLOOR)]
        for n, (label, variant) in enumerate(schedule):
            if variant == FLOOR:
                try:
                    floor.append(rayfloor.form(INSTANCES))
                except RuntimeError as e:  # a bare `ray start` can fail on a loaded machine: say so, try once more
                    print(f"  {label:<8} {variant:<16} failed, once more: {e}", flush=True)
                    floor.append(rayfloor.form(INSTANCES))
                print(f"  {label:<8} {variant:<16} {INSTANCES} bare Ray nodes formed, seen by a driver: {floor[-1]:.2f} s", flush=True)
                continue
            r = asyncio.run(follow(bench, ns, job(f"lat-{n}", VARIANTS[variant])))
            b = r["since_submit_s"]
            print(f"  {label:<8} {variant:<16} payload start {stats.fmt(b['payload_start'])} s, "
                  f"finished {stats.fmt(b['done'])} s: {r['outcome']}", flush=True)
            if n:
                runs[variant].append(r)
            bench.kubectl("delete", "mljob", f"lat-{n}", "-n", ns, "--wait=true", "--timeout=120s")
        bench.delete_namespaces([ns])
    finally:
        op.stop()
    # Every stage a run reached counts, also in a run that ended FAILED (its outcome is reported beside it).
    out: dict[str, dict[str, Any]] = {v: {"instances": INSTANCES, "repeats": repeats, "runs": rs, "spec": VARIANTS[v],
                "median": {k: stats.median([r["since_submit_s"][k] for r in rs if r["since_submit_s"][k] is not None])
                           for k, _ in STAGES}}
            for v, rs in runs.items()}
    out[FLOOR] = {"runs_s": floor, "median_s": stats.median(floor), "target_ratio": TARGET_FLOOR_RATIO}
    for v in VARIANTS:
        out[v]["ratio_to_floor"] = stats.ratio(out[v]["median"]["payload_start"], out[FLOOR]["median_s"])
    return out


def markdown(report: dict[str, Any]) -> str:
    p3 = report["p3"]
    med = p3["median"]
    off = (report.get("p3_no_dashboard") or {}).get("median") or {}
    rows, prev = [], 0.0
    for key, what in STAGES:
        v = med[key]
        rows.append([what, stats.fmt(v), stats.fmt(v - prev if v == v else None), stats.fmt(off.get(key))])
        prev = v if v == v else prev
    out = ["# Submit-to-payload latency", "", f"{report['when']}. {machine_line(report['machine'])}", "",
           f"Private local cluster with {INSTANCES} local process nodes (`kubepool local up` to Ready: "
           f"{report['cluster_up_s']:.1f} s). A {INSTANCES}-instance job whose payload prints the time; median of "
           f"{p3['repeats']} run(s) after one warm-up, the default job and one with `spec.ray.dashboard: false` "
           "alternating.", "",
           stats.markdown_table(["stage", "since submit (s)", "since previous stage (s)", "dashboard off: since submit (s)"],
                                rows, right=(1, 2, 3)),
           f"Submit → payload start: {stats.fmt(med['payload_start'])} s by default, {stats.fmt(off.get('payload_start'))} s "
           "with the dashboard off; its target is a ratio to the floor below.", "",
           *_floor_lines(report),
           "Log stages are the arrival times of the streamed head log, which trail the line by up to ~0.5 s "
           "(the node agent's log relay), so one can show after the payload's own clock.", "",
           "Outcomes: " + "; ".join(f"run {i + 1}: {r['outcome']}" for i, r in enumerate(p3["runs"])) + "."]  # fmt: skip
    return "\n".join(out) + "\n"


def _floor_lines(report: dict[str, Any]) -> list[str]:
    floor = report.get(FLOOR)
    if not floor:
        return []
    runs = ", ".join(f"{x:.2f}" for x in floor["runs_s"])
    return [f"Floor, measured between the jobs: {INSTANCES} bare Ray nodes on this machine (`ray start` head, workers "
            f"joining when its GCS answers, a driver that sees them all; bench/rayfloor.py): {stats.fmt(floor['median_s'])} s "
            f"(runs: {runs}). P3 ÷ floor: {stats.fmt(report['p3'].get('ratio_to_floor'))} (target ≤ {floor['target_ratio']:g}); "
            f"dashboard off: {stats.fmt((report.get('p3_no_dashboard') or {}).get('ratio_to_floor'))}.", ""]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.latency", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="1 run after the warm-up")
    ap.add_argument("--repeats", type=int, help="timed jobs after the warm-up (default 3)")
    args = ap.parse_args(argv)
    repeats = args.repeats or (1 if args.quick else 3)
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "machine": describe_machine()}
    print(f"P3 latency: private cluster with {INSTANCES} local process nodes", flush=True)
    bench = BenchCluster.up(0, INSTANCES, STATE_DIR.with_name(STATE_DIR.name + "-latency"))
    report["cluster_up_s"] = bench.up_seconds
    try:
        report.update(measure(bench, repeats))
    finally:
        bench.down()
    RESULTS.mkdir(exist_ok=True)
    name = "latency-quick" if args.quick else "latency"  # a quick run never overwrites the full run's results
    (RESULTS / f"{name}.json").write_text(json.dumps(report, indent=1))
    (RESULTS / f"{name}.md").write_text(markdown(report))
    print("\n" + markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
