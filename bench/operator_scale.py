"""Operator scale benchmarks on kwok fake nodes of a private local cluster (see bench/README.md).

P1 fan-out: N jobs of 1 head + 3 workers submitted at once, until all 4N pods are Running, for the kubepool
operator, the KubeRay operator (N RayClusters of the same shape) and the floor (a raw client creating the 4N
pods itself, 16 requests in flight), the kopf floor (bench/kopffloor.py: the least kopf operator for the
same jobs), the writes floor (bench/writesfloor.py: every write kubepool's operator makes for the jobs, made
by the bench's client with no operator) and the kopf writes floor (the kopf floor making those writes instead of
bare pods: what kubepool's writes cost a plain kopf operator). One warm-up round, then
repeats interleaved (kubepool, KubeRay, floor, kopf floor, writes floor, kopf writes floor);
ratios are taken pair by pair within a repeat, then the median. kubepool's jobs each get their own ComputePool,
created once the operator is up: with pools shared by many jobs its FIFO admission loses wake-ups and jobs stay
Queued, and pools that exist when it starts cost it O(nodes x pools^2) work (bench/NOTES.md). One extra run
("kubepool-shared", 10 pools shared by all jobs) records the stall.
P2 churn: M one-instance jobs created in waves; a kwok Stage moves each head pod to Succeeded 2 s after it runs;
each wave waits for DONE; the operator's RSS is read at M live jobs; then the jobs are deleted in waves. Status
lag = the MLJob's DONE watch event minus its head pod's Succeeded watch event.

`python -m bench.operator_scale [--quick] [--jobs N] [--repeats R] [--churn M]`.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Container, Sequence
from pathlib import Path
from typing import Any

from bench import stats
from bench.cluster import (
    COMPLETE_ENV,
    COMPONENTS,
    FAKE_POOL_LABEL,
    LOG_DIR,
    BenchCluster,
    bounded,
    create,
    describe_machine,
    machine_line,
    metrics_text,
    watch,
)
from bench.controllers import (
    Controller,
    KopfFloor,
    KubepoolOperator,
    KubeRayOperator,
    install_kuberay_crds,
    kuberay_dir,
)
from bench.writesfloor import WritesFloor
from kubepool.kube.aio import Api
from kubepool.kube.transport import AiohttpHttp, Endpoint
from kubepool.local import kwok

RESULTS = Path(__file__).with_name("results")
KOPF_FLOOR = "kopf-floor"  # the least a kopf operator does for the same jobs (bench/kopffloor.py)
WRITES_FLOOR = "writes-floor"  # kubepool's writes without its operator (bench/writesfloor.py)
KOPF_WRITES_FLOOR = "kopf-writes-floor"  # the kopf floor making kubepool's writes (bench/kopffloor.py)
SYSTEMS = ("kubepool", "kuberay", "floor", KOPF_FLOOR, WRITES_FLOOR, KOPF_WRITES_FLOOR)
SHARED = "kubepool-shared"  # kubepool with 10 pools shared by all jobs (documents the admission stall)
BASE = "kubepool-base"  # kubepool from another source tree (bench/ab.py), on the same pools and jobs as "kubepool"
BASE_SRC: dict[str, Path] = {}  # bench/ab.py sets BASE_SRC[BASE] to that tree's src/
OWN_POOLS = ("kubepool", BASE, WRITES_FLOOR, KOPF_WRITES_FLOOR)  # systems whose jobs each get their own ComputePool
WORKERS = 3
POOLS = 10  # kubepool places one instance of a pool per node: 10 pools x 100 fake nodes hold 1000 instances
OWN_POOL_LABEL = {"bench.kubepool.dev/pool": "per-job"}
PROFILE_INCLUDE = ("kubepool/", "pydantic/", "lightkube/", "kopf/_core/reactor/processing", "copy.py", "logging/")
PROFILE_EXCLUDE = ("__main__",)  # the entry frames: in every sample
STALL_S = 60.0  # no pod became Running (no job DONE) for this long: the run is recorded as stalled
CONCURRENCY = 16  # requests in flight when submitting (the same client for all three systems)
RESOURCES = {"cpu": "100m", "memory": "128Mi"}
IMAGE = "fake.invalid/bench:1"  # never pulled: kwok runs nothing
TARGETS = {"kubepool / kuberay": 0.9}  # issue #44's; a target on kubepool / floor lay under KubeRay's own ratio
# The operators' own cost for the same jobs (CPU per job is total CPU: both ran the same jobs), pair by pair.
RESOURCE_TARGETS = {"CPU kubepool / kuberay": 1.0, "peak RSS kubepool / kuberay": 1.1}
REQUESTS_PER_JOB_TARGET = 22.0  # every API request of the run (the API server's count) per kubepool job
P2_TARGETS = {"rss_mib_at_live_jobs": 150.0, "status_lag_p99_s": 1.0}


# --- manifests ------------------------------------------------------------------------------------------------
def shared_pool(i: int) -> str:
    return f"bench-fake-{i % POOLS}"


def own_pool(i: int) -> str:
    return f"bench-job-{i}"


def pool(name: str, max_nodes: int, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "kubepool.dev/v1alpha1", "kind": "ComputePool", "metadata": {"name": name, "labels": labels or {}},
            "spec": {"minNodes": 0, "maxNodes": max_nodes, "nodeSelector": FAKE_POOL_LABEL,
                     "tolerations": [kwok.FAKE_TOLERATION], "resources": RESOURCES}}  # fmt: skip


def own_pools(jobs: int) -> dict[str, dict[str, Any]]:
    """The per-job pools of OWN_POOLS systems, by name."""
    return {own_pool(i): pool(own_pool(i), WORKERS + 1, OWN_POOL_LABEL) for i in range(jobs)}


def create_pools(bench: BenchCluster, pools: list[dict[str, Any]]) -> None:
    bench.kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": pools}))


def mljob(i: int, instances: int, pool_name: str, complete: bool = False) -> dict[str, Any]:
    spec: dict[str, Any] = {"computePool": pool_name, "targetInstances": instances, "image": IMAGE,
                            "entrypoint": {"command": ["true"]}}
    if complete:
        spec["env"] = [{"name": COMPLETE_ENV, "value": "true"}]
    return {"apiVersion": "kubepool.dev/v1alpha1", "kind": "MLJob", "metadata": {"name": f"job-{i}"}, "spec": spec}


def _pod_spec(container: str) -> dict[str, Any]:
    return {"containers": [{"name": container, "image": IMAGE, "resources": {"requests": RESOURCES, "limits": RESOURCES}}],
            "nodeSelector": FAKE_POOL_LABEL, "tolerations": [kwok.FAKE_TOLERATION]}


def raycluster(i: int) -> dict[str, Any]:
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": f"job-{i}"}, "spec": {
        "headGroupSpec": {"rayStartParams": {}, "template": {"spec": _pod_spec("ray-head")}},
        "workerGroupSpecs": [{"groupName": "workers", "replicas": WORKERS, "minReplicas": WORKERS, "maxReplicas": WORKERS,
                              "rayStartParams": {}, "template": {"spec": _pod_spec("ray-worker")}}]}}  # fmt: skip


def raw_pods(i: int) -> list[dict[str, Any]]:
    names = [f"job-{i}-head"] + [f"job-{i}-worker-{w}" for w in range(WORKERS)]
    return [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": n}, "spec": _pod_spec("c")} for n in names]


def submissions(system: str, ns: str, jobs: int) -> list[tuple[str, dict[str, Any]]]:
    """(path, body) of every object the system's user submits."""
    if system in (*OWN_POOLS, SHARED, KOPF_FLOOR):
        pool_of = shared_pool if system == SHARED else own_pool  # the kopf floor reads no pool
        return [(f"/apis/kubepool.dev/v1alpha1/namespaces/{ns}/mljobs", mljob(i, WORKERS + 1, pool_of(i))) for i in range(jobs)]
    if system == "kuberay":
        return [(f"/apis/ray.io/v1/namespaces/{ns}/rayclusters", raycluster(i)) for i in range(jobs)]
    return [(f"/api/v1/namespaces/{ns}/pods", p) for i in range(jobs) for p in raw_pods(i)]


# --- P1 -------------------------------------------------------------------------------------------------------
def controller_for(system: str, bench: BenchCluster, kuberay_home: Path, jobs: int) -> Controller | None:
    log = LOG_DIR / f"{system}.log"
    if system in ("kubepool", SHARED):
        return KubepoolOperator(bench, log)
    if system == BASE:  # PYTHONPATH puts the other tree ahead of this venv's editable install
        return KubepoolOperator(bench, log, {"PYTHONPATH": str(BASE_SRC[BASE])})
    if system == "kuberay":
        return KubeRayOperator(bench, log, kuberay_home)
    if system == KOPF_FLOOR:
        return KopfFloor(bench, log, _pod_spec("c"))
    if system == KOPF_WRITES_FLOOR:
        return KopfFloor(bench, log, _pod_spec("c"), own_pools(jobs))
    return None


def operator_api(bench: BenchCluster) -> Api:
    """The operator's own API client, on the bench cluster (the writes floor's)."""
    return Api(AiohttpHttp(lambda: Endpoint(bench.lay.apiserver_url, ssl=bench.ssl_context())))


async def _first(*aws: Any) -> None:
    """Until the first of these is done; raises its error."""
    tasks = [asyncio.ensure_future(a) for a in aws]
    done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    for t in done:
        t.result()


async def _fanout(bench: BenchCluster, system: str, ns: str, jobs: int, ctl: Controller | None) -> dict[str, Any]:
    want = jobs * (WORKERS + 1)
    running: set[str] = set()
    progress = asyncio.Event()

    floor: WritesFloor | None = None

    def on_pod(kind: str, pod: dict[str, Any], _: float) -> None:
        if kind != "DELETED" and pod.get("status", {}).get("phase") == "Running":
            running.add(pod["metadata"]["name"])
            progress.set()
            if floor:
                floor.on_pod(pod)

    async with bench.client() as client:
        watcher = asyncio.create_task(watch(client, f"/api/v1/namespaces/{ns}/pods", on_pod))
        before = stats.request_totals(await metrics_text(client))
        c0, client0 = bench.component_cpu(), time.process_time()
        u0 = ctl.usage() if ctl else None
        t0 = time.perf_counter()
        writes = None
        if system == WRITES_FLOOR:
            floor = WritesFloor(client, operator_api(bench), ns, [b for _, b in submissions(system, ns, jobs)], own_pools(jobs),
                                CONCURRENCY)
            writes = asyncio.create_task(floor.run())
            await _first(floor.submitted.wait(), writes)
        else:
            await bounded(CONCURRENCY, [functools.partial(create, client, p, b) for p, b in submissions(system, ns, jobs)])
        submitted = time.perf_counter() - t0
        last = time.perf_counter()
        while len(running) < want and time.perf_counter() - last < STALL_S and not (writes and writes.done()):
            progress.clear()
            try:
                await asyncio.wait_for(progress.wait(), 1.0)
                last = time.perf_counter()
            except TimeoutError:
                pass
        watcher.cancel()
        stalled = len(running) < want
        wall = (last if stalled else time.perf_counter()) - t0
        c1, client1 = bench.component_cpu(), time.process_time()
        requests = stats.delta(before, stats.request_totals(await metrics_text(client)))
        if floor and writes:  # its last jobs' last writes (after the window, as the operator's), and any error of its writes
            try:
                await asyncio.wait_for(writes, 120)
            finally:
                await floor.writes.api.close()
    u1 = ctl.usage() if ctl else None
    return {
        "stalled": stalled, "running": len(running),
        "wall_s": None if stalled else wall, "last_progress_s": wall, "submit_s": submitted, "pods": want,
        "pods_per_s": len(running) / wall if wall else None,
        "requests_per_job": sum(requests.values()) / jobs,
        "requests_per_job_by_verb": {v: n / jobs for v, n in stats.by_verb(requests).items()},
        "top_requests": {f"{v} {r}": n for (v, r), n in stats.largest(requests, 12)},
        "controller_peak_rss_mib": u1.peak_rss_mib if u1 else None,
        "controller_cpu_s": (u1.cpu_s - u0.cpu_s) if u0 and u1 else None,
        "cluster_cpu_s": {k: round(c1[k] - c0[k], 2) for k in c1},
        "client_cpu_s": client1 - client0,  # the bench's process: its submits and watch (the writes floor's writes)
    }  # fmt: skip


def fanout_run(bench: BenchCluster, system: str, jobs: int, tag: str, kuberay_home: Path,
               profile: Path | None = None) -> dict[str, Any]:
    """One P1 run on a fresh namespace with a freshly started controller; cleans up before returning.
    With `profile`, py-spy samples the controller meanwhile (collapsed stacks), so the run is not timed fairly."""
    ns = f"p1-{system}-{tag}"
    bench.create_namespace(ns)
    ctl = controller_for(system, bench, kuberay_home, jobs)
    spy: subprocess.Popen[bytes] | None = None
    if ctl:
        ctl.start()
    if system in OWN_POOLS:  # per-job pools, created while the operator runs (see the module docstring)
        create_pools(bench, list(own_pools(jobs).values()))
        if ctl:
            ctl.settle()
    if ctl:
        if profile:
            spy = subprocess.Popen([str(Path(sys.executable).with_name("py-spy")), "record", "--pid", str(ctl.pid),
                                    "--rate", "50", "--format", "raw", "--output", str(profile), "--nonblocking"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        result = asyncio.run(_fanout(bench, system, ns, jobs, ctl))
        if spy:
            spy.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
            spy.wait(timeout=60)
        result["cleanup_s"] = bench.delete_namespaces([ns])  # with the controller up: it may hold finalizers
        if system in OWN_POOLS:
            bench.kubectl("delete", "computepools", "-l", ",".join(f"{k}={v}" for k, v in OWN_POOL_LABEL.items()))
    finally:
        if ctl:
            ctl.stop()
    head = (f"STALLED: {result['running']}/{result['pods']} Running, none for {STALL_S:.0f} s after {result['last_progress_s']:.0f} s"
            if result["stalled"] else f"{result['wall_s']:7.1f} s")
    print(f"  {system:<15} {tag:<7} {head}  {result['pods_per_s']:6.1f} pods/s  "
          f"{result['requests_per_job']:6.1f} req/job  rss {stats.fmt(result['controller_peak_rss_mib'], 0)} MiB  "
          f"cpu {stats.fmt(result['controller_cpu_s'], 1)} s  (cleanup {result['cleanup_s']:.0f} s)", flush=True)
    return result


def _median(rs: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in rs if r.get(key) is not None]  # runs recorded before a measure was added lack it
    return stats.median(values) if values else None


def summarize_p1(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Medians per system (stalled runs have no wall time) and pair-by-pair ratios of wall time (median over
    the repeats where both ran and finished; kubepool-shared runs in the first repeat only)."""
    keys = ("wall_s", "pods_per_s", "requests_per_job", "controller_peak_rss_mib", "controller_cpu_s", "client_cpu_s")
    med = {s: {k: _median(rs, k) for k in keys} | {"stalled": sum(r["stalled"] for r in rs)} for s, rs in runs.items()}
    for s, rs in runs.items():  # runs recorded before the cluster's CPU was measured have none
        by = [r["cluster_cpu_s"] for r in rs if r.get("cluster_cpu_s")]
        if by:
            med[s]["cluster_cpu_s"] = {k: stats.median([b[k] for b in by]) for k in by[0]}
    pairs = {"kubepool / kuberay": ("kubepool", "kuberay"), "kubepool / floor": ("kubepool", "floor"),
             "kuberay / floor": ("kuberay", "floor"), f"{SHARED} / kuberay": (SHARED, "kuberay"),
             f"{SHARED} / floor": (SHARED, "floor"), f"{KOPF_FLOOR} / kuberay": (KOPF_FLOOR, "kuberay"),
             f"{WRITES_FLOOR} / kuberay": (WRITES_FLOOR, "kuberay"), f"kubepool / {WRITES_FLOOR}": ("kubepool", WRITES_FLOOR)}
    ratios = {}
    for name, (a, b) in pairs.items():
        both = [stats.ratio(x["wall_s"], y["wall_s"]) for x, y in zip(runs.get(a, []), runs.get(b, []), strict=False)
                if x["wall_s"] and y["wall_s"]]
        if both:
            ratios[name] = stats.median(both)
    resources = {}
    for system in ("kubepool", KOPF_FLOOR, KOPF_WRITES_FLOOR):  # the floors': what kopf operators pay, beside KubeRay
        for name, key in ((f"CPU {system} / kuberay", "controller_cpu_s"), (f"peak RSS {system} / kuberay", "controller_peak_rss_mib")):
            both = [stats.ratio(x[key], y[key]) for x, y in zip(runs.get(system, []), runs.get("kuberay", []), strict=False)
                    if x.get(key) and y.get(key)]  # fmt: skip
            if both:
                resources[name] = stats.median(both)
    return {"median": med, "ratios": ratios, "resource_ratios": resources}


async def _kwok_ready(bench: BenchCluster, ns: str, timeout: float = 180.0) -> float:
    """Seconds until kwok marks a probe pod Running. A freshly (re)started kwok leaves pods Pending for ~30-40 s
    on this machine, and that wait used to land in whichever run came first (the kubepool warm-up)."""
    t0 = time.perf_counter()
    async with bench.client() as client:
        await create(client, f"/api/v1/namespaces/{ns}/pods", raw_pods(0)[0])
        while time.perf_counter() - t0 < timeout:
            r = await client.get(f"/api/v1/namespaces/{ns}/pods/{raw_pods(0)[0]['metadata']['name']}")
            if r.status_code == 200 and r.json().get("status", {}).get("phase") == "Running":
                break
            await asyncio.sleep(0.5)
    return time.perf_counter() - t0


def wait_for_kwok(bench: BenchCluster) -> float:
    """Seconds until kwok marks a probe pod Running (in a namespace of its own, deleted after), printed: waited for
    before any timed run, never inside one."""
    bench.create_namespace("kwok-probe")
    ready = asyncio.run(_kwok_ready(bench, "kwok-probe"))
    bench.delete_namespaces(["kwok-probe"])
    print(f"  kwok marks pods Running after {ready:.1f} s (untimed)", flush=True)
    return ready


def fanout(bench: BenchCluster, jobs: int, repeats: int, warmup_jobs: int) -> dict[str, Any]:
    home = kuberay_dir()
    install_kuberay_crds(bench, home)
    create_pools(bench, [pool(shared_pool(i), 100) for i in range(POOLS)])
    print(f"P1 fan-out: {jobs} jobs x {WORKERS + 1} pods; warm-up round of {warmup_jobs} jobs, then {repeats} repeat(s)", flush=True)
    profile = LOG_DIR / "kubepool-p1.pyspy.txt"
    profile.unlink(missing_ok=True)
    for s in SYSTEMS:  # the kubepool warm-up run doubles as its profile (untimed anyway)
        fanout_run(bench, s, warmup_jobs, "warmup", home, profile if s == "kubepool" else None)
    runs: dict[str, list[dict[str, Any]]] = {s: [] for s in (*SYSTEMS, SHARED)}
    for r in range(repeats):
        for s in (*SYSTEMS, SHARED) if r == 0 else SYSTEMS:
            runs[s].append(fanout_run(bench, s, jobs, f"r{r}", home))
    top = stats.profile_top(profile.read_text(), PROFILE_INCLUDE, PROFILE_EXCLUDE) if profile.exists() else []
    return {"jobs": jobs, "pods_per_job": WORKERS + 1, "repeats": repeats, "warmup_jobs": warmup_jobs,
            "runs": runs, **summarize_p1(runs), "targets": TARGETS, "resource_targets": RESOURCE_TARGETS,
            "requests_per_job_target": REQUESTS_PER_JOB_TARGET, "profile_top": top}


# --- P2 -------------------------------------------------------------------------------------------------------
def _all_in(names: list[str], seen: Container[str]) -> bool:
    return all(n in seen for n in names)


async def _churn(bench: BenchCluster, ns: str, jobs: int, waves: int, op: KubepoolOperator,
                 delete: bool = True) -> dict[str, Any]:
    succeeded: dict[str, float] = {}
    done: dict[str, float] = {}
    gone: set[str] = set()
    changed = asyncio.Event()

    def on_pod(kind: str, pod: dict[str, Any], t: float) -> None:
        job = pod["metadata"].get("labels", {}).get("kubepool.dev/job")
        if job and pod.get("status", {}).get("phase") == "Succeeded":
            succeeded.setdefault(job, t)

    def on_job(kind: str, job: dict[str, Any], t: float) -> None:
        name = job["metadata"]["name"]
        if kind == "DELETED":
            gone.add(name)
        elif (job.get("status") or {}).get("phase") == "DONE":
            done.setdefault(name, t)
        changed.set()

    async def until(pred: Callable[[], bool], what: str) -> None:
        last = time.monotonic()
        while not pred():
            if time.monotonic() - last > STALL_S:
                raise RuntimeError(f"P2 stalled: no progress for {STALL_S:.0f} s waiting for {what} "
                                   f"({len(done)} DONE, {len(gone)} deleted)")
            changed.clear()
            try:
                await asyncio.wait_for(changed.wait(), 5)
                last = time.monotonic()
            except TimeoutError:
                pass

    path = f"/apis/kubepool.dev/v1alpha1/namespaces/{ns}/mljobs"
    per_wave = jobs // waves
    wave_s: list[float] = []
    async with bench.client() as client:
        watchers = [asyncio.create_task(watch(client, f"/api/v1/namespaces/{ns}/pods", on_pod, {"labelSelector": "kubepool.dev/role=head"})),
                    asyncio.create_task(watch(client, path, on_job))]  # fmt: skip
        before = stats.request_totals(await metrics_text(client))
        u0 = op.usage()
        t0 = time.perf_counter()
        stalled = None
        delete_s = None
        try:
            for w in range(waves):
                names = [f"job-{i}" for i in range(w * per_wave, (w + 1) * per_wave)]
                tw = time.perf_counter()
                await bounded(CONCURRENCY, [functools.partial(create, client, path, mljob(i, 1, shared_pool(i), complete=True))
                                            for i in range(w * per_wave, (w + 1) * per_wave)])
                await until(functools.partial(_all_in, names, done), f"wave {w} DONE")
                wave_s.append(time.perf_counter() - tw)
                print(f"  P2 wave {w}: {per_wave} jobs created and DONE in {wave_s[-1]:.1f} s; operator RSS "
                      f"{op.usage().rss_mib:.0f} MiB", flush=True)
        except RuntimeError as e:  # a stall is a result too: keep what was measured; the namespace goes anyway
            stalled = str(e)
            print(f"  {stalled}", flush=True)
        await asyncio.sleep(5)  # let the operator settle (status writes, GC of its own structures) before reading RSS
        live = op.usage()
        if stalled is None and delete:
            td = time.perf_counter()
            for w in range(waves):
                names = [f"job-{i}" for i in range(w * per_wave, (w + 1) * per_wave)]
                await bounded(CONCURRENCY, [functools.partial(client.delete, f"{path}/{n}") for n in names])
                await until(functools.partial(_all_in, names, gone), f"wave {w} deleted")
            delete_s = time.perf_counter() - td
        wall = time.perf_counter() - t0
        for t in watchers:
            t.cancel()
        requests = stats.delta(before, stats.request_totals(await metrics_text(client)))
    u1 = op.usage()
    lags = [done[j] - succeeded[j] for j in done if j in succeeded]
    return {
        "jobs": jobs, "waves": waves, "stalled": stalled, "live_jobs": len(done) if stalled else jobs,
        "wall_s": wall, "wave_s": wave_s, "delete_s": delete_s,
        "rss_mib_at_live_jobs": live.rss_mib, "peak_rss_mib": u1.peak_rss_mib, "cpu_s": u1.cpu_s - u0.cpu_s,
        "status_lag_p50_s": stats.percentile(lags, 50), "status_lag_p99_s": stats.percentile(lags, 99),
        "status_lag_max_s": max(lags, default=float("nan")), "lag_samples": len(lags),
        "requests_per_job": sum(requests.values()) / jobs,
        "requests_per_job_by_verb": {v: n / jobs for v, n in stats.by_verb(requests).items()},
        "top_requests": {f"{v} {r}": n for (v, r), n in stats.largest(requests, 12)},
    }  # fmt: skip


def churn(bench: BenchCluster, jobs: int, waves: int) -> dict[str, Any]:
    print(f"P2 churn: {jobs} one-instance jobs in {waves} waves (heads succeed {2} s after Running)", flush=True)
    ns = "p2-churn"
    bench.create_namespace(ns)
    create_pools(bench, [pool(shared_pool(i), 100) for i in range(POOLS)])  # P1 made them too, unless --skip-p1
    op = KubepoolOperator(bench, LOG_DIR / "kubepool-p2.log")
    op.start()
    try:
        result = asyncio.run(_churn(bench, ns, jobs, waves, op))
        bench.delete_namespaces([ns])
    finally:
        op.stop()
    print(f"  RSS at {result['live_jobs']} live jobs {result['rss_mib_at_live_jobs']:.0f} MiB (peak {result['peak_rss_mib']:.0f}), "
          f"status lag p50 {result['status_lag_p50_s']:.2f} s p99 {result['status_lag_p99_s']:.2f} s, "
          f"cpu {result['cpu_s']:.0f} s", flush=True)
    return {**result, "targets": P2_TARGETS}


# --- report ---------------------------------------------------------------------------------------------------
def run_text(r: dict[str, Any]) -> str:
    if r["stalled"]:
        return f"stalled at {r['running']}/{r['pods']} Running (last progress {r['last_progress_s']:.0f} s)"
    return f"{r['wall_s']:.1f}"


def markdown(report: dict[str, Any]) -> str:
    out = ["# Operator scale benchmark", "", f"{report['when']}. {machine_line(report['machine'])}", "",
           f"Private local cluster: {report['fake_nodes']} kwok fake nodes, no process nodes; "
           f"`kubepool local up` to Ready with cached binaries: {report['cluster_up_s']:.1f} s "
           f"(cold build of the binaries: {report['cold_build']})."
           + (f" kwok marked a first probe pod Running after {report['kwok_ready_s']:.1f} s (waited for, untimed)."
              if "kwok_ready_s" in report else "")]  # fmt: skip
    p1 = report.get("p1")
    if p1:
        out += ["", f"## P1 fan-out: {p1['jobs']} jobs x {p1['pods_per_job']} pods, until all Running",
                "", f"Median of {p1['repeats']} repeat(s) after a warm-up round of {p1['warmup_jobs']} jobs per system.", ""]
        rows = [[s, stats.fmt(m["wall_s"], 1), stats.fmt(m["pods_per_s"], 1), stats.fmt(m["requests_per_job"], 1),
                 ", ".join(f"{v} {n:.1f}" for v, n in list(p1["runs"][s][0]["requests_per_job_by_verb"].items())[:5]),
                 stats.fmt(m["controller_peak_rss_mib"], 0), stats.fmt(m["controller_cpu_s"], 1),
                 ", ".join(run_text(r) for r in p1["runs"][s])]
                for s, m in p1["median"].items()]  # fmt: skip
        out.append(stats.markdown_table(["system", "wall (s)", "pods/s", "API req/job", "by verb (first run)",
                                         "peak RSS (MiB)", "CPU (s)", "runs (s)"], rows, right=(1, 2, 3, 5, 6)))
        targets = {k.replace("kubepool", SHARED): v for k, v in TARGETS.items()} | TARGETS
        out.append(stats.markdown_table(["ratio (wall time)", "value", "target"],
                                        [[k, stats.fmt(v), f"≤ {targets[k]}" if k in targets else ""] for k, v in p1["ratios"].items()],
                                        right=(1,)))  # fmt: skip
        out.append(stats.markdown_table(["ratio (operator's own cost, same jobs)", "value", "target"],
                                        [[k, stats.fmt(v), f"≤ {RESOURCE_TARGETS[k]}" if k in RESOURCE_TARGETS else "(floor)"]
                                         for k, v in p1.get("resource_ratios", {}).items()],
                                        right=(1,)))  # fmt: skip
        req = {s: m["requests_per_job"] for s, m in p1["median"].items() if s in ("kubepool", WRITES_FLOOR)}
        out += [f"API requests per kubepool job: {stats.fmt(req.get('kubepool'), 1)}, target ≤ {REQUESTS_PER_JOB_TARGET:g} "
                f"(the writes floor's: {stats.fmt(req.get(WRITES_FLOOR), 1)}).", ""]
    if p1 and any("cluster_cpu_s" in m for m in p1["median"].values()):
        out += ["", "### Where the machine's CPU went (seconds in the timed window, medians)", "",
                "Every process of the run shares the machine's cores; a run that keeps them all busy is as fast as its "
                "total CPU allows, so an operator's requests (the API server's and etcd's CPU) count with its own CPU.", ""]
        rows = []
        for s, m in p1["median"].items():
            cpu = m.get("cluster_cpu_s")
            if not cpu:
                continue
            total = sum(cpu.values()) + (m["controller_cpu_s"] or 0.0) + (m.get("client_cpu_s") or 0.0)
            busy = stats.fmt(total / m["wall_s"], 2) if m["wall_s"] else "–"
            rows.append([s, *(stats.fmt(cpu[k], 1) for k in COMPONENTS), stats.fmt(m["controller_cpu_s"], 1),
                         stats.fmt(m.get("client_cpu_s"), 1), stats.fmt(total, 1), busy])
        out.append(stats.markdown_table(["system", *COMPONENTS, "controller", "bench client", "total", "cores busy"], rows,
                                        right=tuple(range(1, len(COMPONENTS) + 5))))
    if p1 and p1.get("profile_top"):
        out += ["", f"### Where the kubepool operator spends its CPU (py-spy, warm-up run of {p1['warmup_jobs']} jobs)", "",
                stats.markdown_table(["function (file)", "share of samples, inclusive"],
                                     [[f"`{f}`", f"{100 * v:.1f} %"] for f, v in p1["profile_top"]], right=(1,))]  # fmt: skip
    p2 = report.get("p2")
    if p2:
        out += ["", f"## P2 churn: {p2['jobs']} one-instance jobs in {p2['waves']} waves on {POOLS} shared pools", ""]
        if p2["stalled"]:
            out += [f"**Stalled**: {p2['stalled']}. The measures below are up to the stall.", ""]
        rows = [[f"operator RSS at {p2['live_jobs']} live jobs (MiB)", stats.fmt(p2["rss_mib_at_live_jobs"], 0), f"≤ {P2_TARGETS['rss_mib_at_live_jobs']:.0f}"],
                ["operator peak RSS (MiB)", stats.fmt(p2["peak_rss_mib"], 0), ""],
                ["status lag p50 (s)", stats.fmt(p2["status_lag_p50_s"]), ""],
                ["status lag p99 (s)", stats.fmt(p2["status_lag_p99_s"]), f"≤ {P2_TARGETS['status_lag_p99_s']}"],
                ["status lag max (s)", stats.fmt(p2["status_lag_max_s"]), ""],
                ["waves create → DONE (s)", ", ".join(f"{w:.1f}" for w in p2["wave_s"]), ""],
                ["delete all in waves (s)", stats.fmt(p2["delete_s"], 1), ""],
                ["operator CPU (s)", stats.fmt(p2["cpu_s"], 1), ""],
                ["API requests per job", stats.fmt(p2["requests_per_job"], 1), ""]]  # fmt: skip
        out.append(stats.markdown_table(["measure", "value", "target"], rows, right=(1,)))
    return "\n".join(out) + "\n"


def cold_build_note() -> str:
    """hack/k8s-bin/build.sh logs `done in Ns` on a cold build; /tmp/k8sbuild.log kept the first one."""
    log = Path("/tmp/k8sbuild.log")
    if log.exists():
        for line in reversed(log.read_text(errors="replace").splitlines()):
            if "done in" in line:
                return line.split("done in", 1)[1].split()[0].rstrip(":") + " (/tmp/k8sbuild.log)"
    return "not recorded on this machine"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.operator_scale", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="20 jobs, 1 repeat, 100-job churn, 20 fake nodes")
    ap.add_argument("--jobs", type=int, help="P1 jobs (default 200)")
    ap.add_argument("--repeats", type=int, help="P1 timed repeats after the warm-up round (default 3)")
    ap.add_argument("--churn", type=int, help="P2 jobs (default 1000; 0 skips P2)")
    ap.add_argument("--skip-p1", action="store_true")
    ap.add_argument("--render", action="store_true", help="only rewrite the Markdown from the JSON (with --quick: the quick run's)")
    args = ap.parse_args(argv)
    if args.render:
        rendered = json.loads((RESULTS / f"{result_name(args.quick)}.json").read_text())
        if "p1" in rendered:
            rendered["p1"].update(summarize_p1(rendered["p1"]["runs"]))
        write(rendered, args.quick)
        return 0
    jobs = args.jobs or (20 if args.quick else 200)
    repeats = args.repeats or (1 if args.quick else 3)
    churn_jobs = args.churn if args.churn is not None else (100 if args.quick else 1000)
    fake_nodes = 20 if args.quick else 100
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "machine": describe_machine(),
                              "fake_nodes": fake_nodes, "cold_build": cold_build_note()}  # fmt: skip
    print(f"private cluster: kubepool local up --fake-nodes {fake_nodes} (logs in {LOG_DIR})", flush=True)
    bench = BenchCluster.up(fake_nodes)
    report["cluster_up_s"] = bench.up_seconds
    print(f"  up to Ready in {bench.up_seconds:.1f} s (cached binaries); cold build: {report['cold_build']}", flush=True)
    try:
        report["kwok_ready_s"] = wait_for_kwok(bench)
        if not args.skip_p1:
            report["p1"] = fanout(bench, jobs, repeats, max(jobs // 4, 5))
        if churn_jobs:
            report["p2"] = churn(bench, churn_jobs, 4 if churn_jobs >= 400 else 2)
    finally:
        bench.down()
    write(report, args.quick)
    return 0


def result_name(quick: bool) -> str:
    """A quick run never overwrites the full run's results."""
    return "operator_scale-quick" if quick else "operator_scale"


def write(report: dict[str, Any], quick: bool) -> None:
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{result_name(quick)}.json").write_text(json.dumps(report, indent=1))
    (RESULTS / f"{result_name(quick)}.md").write_text(markdown(report))
    print("\n" + markdown(report))


if __name__ == "__main__":
    sys.exit(main())
