"""The SageMaker API server under load, through boto3 (the client users run): 200 DescribeTrainingJob calls in
flight at once, and a burst of 50 CreateTrainingJob calls, each SigV4-verified and run as its key's
ServiceAccount against the API server. Beside them, the floor: the same boto3 calls to a bare aiohttp server
that answers `{}` without reading anything (boto3's own round trip: signing, HTTP, parsing). No operator runs:
the server's cost is what is measured, the jobs stay MLJobs.

`python -m bench.sagemaker_api [--quick] [--kubeconfig PATH]` (default: a private cluster, made and removed).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import boto3
import yaml
from aiohttp import web
from botocore.config import Config
from botocore.exceptions import ClientError

from bench import stats
from bench.cluster import BenchCluster, describe_machine, free_port, machine_line
from kubepool.sagemaker_api.keys import DEFAULT_KEYS_SECRET, key_entry, keys_secret, new_key

RESULTS = Path(__file__).with_name("results")
ROOT = Path(__file__).resolve().parents[1]
REGION = "us-east-1"
RULES = [{"apiGroups": ["kubepool.dev"], "resources": ["mljobs"], "verbs": ["create", "get", "list"]}]


def request(name: str, pool: str) -> dict[str, Any]:
    return {"TrainingJobName": name, "RoleArn": "arn:aws:iam::111122223333:role/default",
            "AlgorithmSpecification": {"TrainingImage": "local", "TrainingInputMode": "File",
                                       "ContainerEntrypoint": ["python", "-c", "pass"]},
            "ResourceConfig": {"InstanceType": pool, "InstanceCount": 1, "VolumeSizeInGB": 30},
            "OutputDataConfig": {"S3OutputPath": "s3://bench/out"}, "StoppingCondition": {"MaxRuntimeInSeconds": 60}}


def sagemaker(endpoint: str, key_id: str, secret: str, connections: int) -> Any:
    return boto3.client("sagemaker", endpoint_url=endpoint, region_name=REGION, aws_access_key_id=key_id,
                        aws_secret_access_key=secret,
                        config=Config(max_pool_connections=connections, retries={"max_attempts": 0}))


def burst(n: int, call: Callable[[int], Any]) -> dict[str, Any]:
    """`n` calls at once (one thread each, released together): the wall time, each call's latency, errors."""
    start = threading.Barrier(n + 1)
    latencies: list[float] = []
    errors: list[str] = []

    def one(i: int) -> None:
        start.wait()
        t = time.perf_counter()
        try:
            call(i)
            latencies.append(time.perf_counter() - t)
        except ClientError as err:
            errors.append(str(err.response["Error"]["Code"]))
    with ThreadPoolExecutor(n) as pool:
        futures = [pool.submit(one, i) for i in range(n)]
        start.wait()
        t0 = time.perf_counter()
        for f in futures:
            f.result()
        wall = time.perf_counter() - t0
    return {"calls": n, "wall_s": wall, "p50_s": stats.median(latencies), "p99_s": stats.percentile(latencies, 99),
            "errors": sorted(set(errors)), "error_count": len(errors)}


@contextmanager
def floor_server() -> Iterator[str]:
    """A bare aiohttp server answering every POST with `{}` (AWS JSON 1.1's content type), in a thread."""
    import asyncio

    async def answer(request: web.Request) -> web.Response:
        return web.Response(body=b"{}", content_type="application/x-amz-json-1.1")

    port = free_port()
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(web.Application())
    runner.app.router.add_post("/", answer)
    loop.run_until_complete(runner.setup())
    loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", port).start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)


@contextmanager
def api_server(kubeconfig: Path, log: Path, keys_namespace: str) -> Iterator[str]:
    port = free_port()
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "kubepool.sagemaker_api", "--host", "127.0.0.1", "--port",
                                 str(port), "--keys-namespace", keys_namespace], env=env, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        import urllib.request

        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"{endpoint}/healthz", timeout=2).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the server did not start:\n{log.read_text()[-2000:]}") from None
                time.sleep(0.2)
        yield endpoint
    finally:
        proc.terminate()
        proc.wait(10)


def measure(kubectl: Callable[..., str], kubeconfig: Path, describes: int, creates: int) -> dict[str, Any]:
    ns, pool = f"bench-sm-{uuid.uuid4().hex[:6]}", f"bench-sm-{uuid.uuid4().hex[:6]}"
    key_id, secret = new_key()
    docs = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
            keys_secret(ns, DEFAULT_KEYS_SECRET, key_entry(key_id, secret, ns)),  # the server's namespace is the job's here
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "sm", "namespace": ns},
             "rules": RULES},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
             "metadata": {"name": "sm", "namespace": ns},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "sm"},
             "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": ns}]},
            {"apiVersion": "kubepool.dev/v1alpha1", "kind": "ComputePool", "metadata": {"name": pool},
             "spec": {"instanceFamily": "CPU_X64_S", "minNodes": 0, "maxNodes": 1}}]
    kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(docs))
    out: dict[str, Any] = {}
    try:
        with floor_server() as floor:
            bare = sagemaker(floor, key_id, secret, describes)
            out["floor_describe"] = burst(describes, lambda i: bare.describe_training_job(TrainingJobName="j"))
            out["floor_create"] = burst(creates, lambda i: bare.create_training_job(**request(f"j-{i}", pool)))
        with api_server(kubeconfig, Path(tempfile.mkdtemp(prefix="bench-sagemaker-api-")) / "server.log", ns) as endpoint:
            sm = sagemaker(endpoint, key_id, secret, describes)
            sm.create_training_job(**request("described", pool))
            sm.describe_training_job(TrainingJobName="described")  # warm: the key read, the connections
            out["describe"] = burst(describes, lambda i: sm.describe_training_job(TrainingJobName="described"))
            out["create"] = burst(creates, lambda i: sm.create_training_job(**request(f"burst-{i}", pool)))
            made = json.loads(kubectl("get", "mljobs", "-n", ns, "-o", "json"))["items"]
            out["created_jobs"] = sum(1 for j in made if j["metadata"]["name"].startswith("burst-"))
    finally:
        kubectl("delete", "namespace", ns, "--wait=false")
        kubectl("delete", "computepool", pool, "--wait=false")
    return out


def report(res: dict[str, Any], machine: dict[str, Any], quick: bool, cluster: str) -> str:
    rows = []
    for what, mine, floor in (("DescribeTrainingJob, all at once", "describe", "floor_describe"),
                              ("CreateTrainingJob, a burst", "create", "floor_create")):
        m, f = res[mine], res[floor]
        rows.append([what, m["calls"], stats.fmt(m["wall_s"]), stats.fmt(m["p50_s"], 3), stats.fmt(m["p99_s"], 3),
                     m["error_count"], stats.fmt(f["wall_s"]), stats.fmt(f["p50_s"], 3), stats.fmt(f["p99_s"], 3)])
    table = stats.markdown_table(["calls", "n", "wall (s)", "p50 (s)", "p99 (s)", "errors", "floor wall (s)",
                                  "floor p50 (s)", "floor p99 (s)"], rows, right=range(1, 9))
    return (f"# SageMaker API server under load{' (quick)' if quick else ''}\n\n"
            f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}. {machine_line(machine)} Cluster: {cluster}.\n\n"
            "boto3 (one client, a connection per call in flight, no retries) against `python -m kubepool.sagemaker_api` "
            "on loopback, every call SigV4-verified and run as its key's ServiceAccount against the API server. "
            "Floor: the same boto3 calls to a bare aiohttp server answering `{}` (boto3's own round trip).\n\n"
            f"{table}\n\nJobs the burst left as MLJobs: {res['created_jobs']} of {res['create']['calls']}.\n")


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.sagemaker_api")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--kubeconfig", type=Path, help="an existing cluster with the kubepool CRDs (default: a private one)")
    args = p.parse_args(argv)
    describes, creates = (50, 10) if args.quick else (200, 50)
    machine = describe_machine()
    bench = None
    if args.kubeconfig:
        kubeconfig = args.kubeconfig

        def kubectl(*a: str, stdin: str | None = None) -> str:
            return subprocess.run(["kubectl", "--kubeconfig", str(kubeconfig), *a], input=stdin, text=True,
                                  capture_output=True, check=True).stdout
    else:
        bench = BenchCluster.up(fake_nodes=0)
        kubeconfig, kubectl = bench.lay.kubeconfig, bench.kubectl
    try:
        res = measure(kubectl, kubeconfig, describes, creates)
    finally:
        if bench is not None:
            bench.down()
    stem = "sagemaker_api-quick" if args.quick else "sagemaker_api"
    (RESULTS / f"{stem}.json").write_text(json.dumps({"machine": machine, "private_cluster": bench is not None, **res},
                                                     indent=1) + "\n")
    text = report(res, machine, args.quick, "a private one (no nodes)" if bench else
                  f"an existing one ({args.kubeconfig}), shared with whatever else ran on it")
    (RESULTS / f"{stem}.md").write_text(text)
    print(text)
    ok = not res["describe"]["error_count"] and not res["create"]["error_count"] and res["created_jobs"] == creates
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
