"""Every job in examples/ end to end, on both backends, as a user runs it: `kubectl apply -f examples/<job>.yaml`
(for kuberay the same manifest with `spec.backend: kuberay`) into a namespace watched by kubepool's operator,
on the local cluster's process-backed nodes with real Ray, xgboost and torch processes.

Each case observes the same things on both backends: the job ends DONE; its ready and target counts; one status
entry per instance (ids, groups, nodes of the right pool, one instance per node); every instance's log, read
through the SDK while the job runs (`follow_logs`; KubeRay's pods go with their RayCluster when the job ends),
and the head's through `kubepool logs -f`, holding what the payload prints; and nothing left once the job is
deleted (no pods, no RayCluster). With the pod backend the logs stay readable after DONE (`get_logs`, `kubepool
logs`)."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubepool import naming
from kubepool.api.kuberay import LABEL_CLUSTER
from kubepool.jobs import MLJob
from kubepool.jobs.job import TERMINAL
from kubepool.kube.errors import KubeError
from support.examplekit import EXAMPLES, Env
from support.operator_cluster import get_json, wait_for

# exclusive: examples/computepools.yaml's pool keeps a warm node, which every running operator would hold.
pytestmark = [pytest.mark.cluster, pytest.mark.ray, pytest.mark.exclusive]

JOB_TIMEOUT_S = 420.0  # generous for a loaded 2-core CI machine; a case takes about a minute there
HOMOGENEOUS = naming.DEFAULT_GROUP


@dataclass(frozen=True)
class Example:
    file: str
    job: str
    target: int
    min_ready: int  # the fewest instances the job may run with (minInstances)
    groups: dict[int, str]  # instance id -> group
    pools: dict[str, str]  # group -> node name prefix of its pool
    check: Callable[[dict[int, str]], None] = field(repr=False)  # on the instances' logs


def _one(pattern: str, text: str) -> re.Match[str]:
    found = re.search(pattern, text, re.MULTILINE)
    assert found, f"no line matching {pattern!r} in:\n{text[-3000:]}"
    return found


def _xgboost(logs: dict[int, str]) -> None:
    _one(r"^Ray cluster: 3 nodes", logs[0])
    score = _one(r"^score: r2=([0-9.]+) rmse=([0-9.]+)$", logs[0])
    assert float(score[1]) > 0.9, score[0]


def _pytorch_ddp(logs: dict[int, str]) -> None:
    nodes = int(_one(r"^training on (\d) nodes$", logs[0])[1])
    score = _one(r"^score: loss=([0-9.]+) on (\d) workers$", logs[0])
    assert nodes in (2, 3) and int(score[2]) == nodes, (nodes, score[0])  # one DDP rank per node it got
    assert float(score[1]) < 0.05, score[0]  # y = x @ [1..8] + noise(0.1): the fit recovers w (about 0.01)


def _sagemaker_hetero(logs: dict[int, str]) -> None:
    head = logs[0]
    _one(r"^algo-1: group data_group, channels \['train'\]$", head)
    for iid, host in ((1, "algo-2"), (2, "algo-3")):
        _one(rf"^sent 20000 rows to {host}$", head)
        _one(rf"^{host} done: \{{'mse': ", head)
        _one(rf"^{host}: group dnn_group, channels \['config'\]$", logs[iid])
        _one(rf"^{host}: rank {iid - 1} of 2 in dnn_group, 20000 rows from algo-1$", logs[iid])
        _one(rf"^{host}: trained, mse=", logs[iid])
    score = _one(r"^score: mse=([0-9.]+) on 2 trainers \(cpu\)$", head)
    assert float(score[1]) < 0.05, score[0]  # var(tanh(xw)) is near 1; the trained network gets about 0.003


def _ray_tasks(logs: dict[int, str]) -> None:
    hosts = _one(r"^tasks per host: \{(.*)\}$", logs[0])
    assert len(hosts[1].split(",")) == 3, hosts[0]  # tasks ran on every instance
    score = _one(r"^score: pi~([0-9.]+)$", logs[0])
    assert abs(float(score[1]) - 3.1416) < 0.01, score[0]


CPU, GPU = "cpu-node-", "gpu-node-"
CASES = [
    Example("xgboost-job.yaml", "xgboost-train", 3, 3, dict.fromkeys(range(3), HOMOGENEOUS), {HOMOGENEOUS: CPU}, _xgboost),
    Example("pytorch-ddp-job.yaml", "pytorch-ddp", 3, 2, dict.fromkeys(range(3), HOMOGENEOUS), {HOMOGENEOUS: CPU},
            _pytorch_ddp),
    Example("sagemaker-hetero-job.yaml", "sagemaker-hetero", 3, 3, {0: "data_group", 1: "dnn_group", 2: "dnn_group"},
            {"data_group": CPU, "dnn_group": GPU}, _sagemaker_hetero),
    Example("ray-tasks-job.yaml", "ray-tasks", 3, 3, dict.fromkeys(range(3), HOMOGENEOUS), {HOMOGENEOUS: CPU}, _ray_tasks),
]


def manifest(path: Path, backend: str) -> str:
    """The example as a user applies it; for kuberay with `spec.backend: kuberay` on its MLJob."""
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    for d in docs:
        if d["kind"] == "MLJob" and backend != "pods":
            d["spec"]["backend"] = backend
    return yaml.safe_dump_all(docs)


class LogFollower(threading.Thread):
    """One instance's log through the SDK (`MLJob.follow_logs`), from its start until its container exits."""

    def __init__(self, namespace: str, job: str, instance_id: int) -> None:
        super().__init__(daemon=True, name=f"logs-{job}-{instance_id}")
        self.handle = MLJob(job, namespace)
        self.instance_id = instance_id
        self.lines: list[str] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                for line in self.handle.follow_logs(self.instance_id, verbose=True):  # kubepool's lines too
                    self.lines.append(line)
                return
            except (KubeError, OSError) as e:  # the pod went (job finished) or a connection broke
                if self.lines or (isinstance(e, KubeError) and self.handle.status in TERMINAL):
                    return
                time.sleep(1)

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


def _kubepool_cli(*args: str, **kw: Any) -> Any:
    return subprocess.Popen([sys.executable, "-m", "kubepool.cli", *args], text=True, **kw)


@pytest.mark.parametrize("example", CASES, ids=lambda e: e.file.removesuffix(".yaml"))
def test_example_runs_to_done(kubectl: Any, env: Env, example: Example, tmp_path: Path) -> None:
    ns, name, started = env.namespace, example.job, time.monotonic()
    path = EXAMPLES / example.file
    kubectl("apply", "-n", ns, "-f", "-", input=manifest(path, env.backend), check=True)
    followers = {i: LogFollower(ns, name, i) for i in range(example.target)}
    for f in followers.values():
        f.start()
    cli_log = tmp_path / "cli-head.log"
    with cli_log.open("w") as out:
        cli = _kubepool_cli("logs", f"{ns}/{name}", "--instance", "0", "-f", stdout=out, stderr=subprocess.STDOUT)
    try:
        # The SDK's wait: every status update passes by, so the most instances ever ready are seen.
        seen: list[tuple[str, int]] = []
        job = MLJob(name, ns)
        final = job.wait(JOB_TIMEOUT_S, on_update=lambda o: seen.append(
            (str(o.status.phase) if o.status else "", (o.status.ready_instances or 0) if o.status else 0)))
        st = get_json(kubectl, ns, "mljob", name)["status"]
        assert final == "DONE", _diagnostics(kubectl, env, name, st, followers)
        for iid in (i["instanceId"] for i in st["instances"] if i.get("node")):
            followers[iid].join(timeout=60)  # its container has exited: the stream ends
        cli.wait(timeout=60)
    finally:
        for f in followers.values():
            f.stop.set()
        if cli.poll() is None:
            cli.kill()
            cli.wait()
    took = time.monotonic() - started

    # Status: the counts and one entry per instance, on distinct nodes of its group's pool.
    assert (st["reason"], st["targetInstances"], st["minInstances"]) == ("Completed", example.target, example.min_ready)
    ran = sorted(i["instanceId"] for i in st["instances"])
    most_ready = max(r for _, r in seen)
    assert "RUNNING" in {p for p, _ in seen} and example.min_ready <= most_ready <= example.target, seen
    assert ran == list(range(len(ran))) and example.min_ready <= len(ran) <= example.target, st["instances"]
    by_id = {i["instanceId"]: i for i in st["instances"]}
    for iid, inst in by_id.items():
        assert (inst["group"], inst["host"]) == (example.groups[iid], f"algo-{iid + 1}"), inst
    placed = {iid: inst["node"] for iid, inst in by_id.items() if inst.get("node")}
    assert len(set(placed.values())) == len(placed) >= example.min_ready, placed  # one instance per node
    for iid, node in placed.items():
        assert node.startswith(example.pools[example.groups[iid]]), (iid, node)
    head = by_id[0]
    assert (head["phase"], head["exitCode"]) == ("Succeeded", 0), head
    if name == "sagemaker-hetero":  # every instance runs the script: every one succeeded
        assert all((i["phase"], i["exitCode"]) == ("Succeeded", 0) for i in by_id.values()), by_id

    # Logs: each instance that ran said who it is; the payload's output is in the head's (and the trainers').
    logs = {iid: f.text for iid, f in followers.items()}
    for iid in placed:
        _one(rf"^kubepool\[{iid}\]: {name}: instance {iid} \(algo-{iid + 1}, group {example.groups[iid]}\)", logs[iid])
    example.check(logs)
    cli_text = cli_log.read_text()
    assert cli.returncode == 0 and "score:" in cli_text, cli_text[-3000:]
    example.check({**logs, 0: cli_text})
    if env.backend == "pods":  # the pods stay until the job is deleted: logs are readable after DONE
        for iid in placed:
            assert job.get_logs(instance_id=iid, verbose=True).strip() == logs[iid].strip()
        got = subprocess.run([sys.executable, "-m", "kubepool.cli", "logs", name, "-n", ns],
                             capture_output=True, text=True, timeout=60)
        assert got.returncode == 0 and "score:" in got.stdout, got.stdout + got.stderr

    # Deleting what was applied leaves nothing behind.
    kubectl("delete", "-n", ns, "-f", str(path), "--wait=true", check=True)
    wait_for(lambda: not get_json(kubectl, ns, "pods", "-l", f"{naming.LABEL_JOB}={name}")["items"], 120,
             "no pods of the job left")
    if env.backend == "kuberay":
        wait_for(lambda: not get_json(kubectl, ns, "rayclusters")["items"], 60, "no RayCluster left")
        assert not get_json(kubectl, ns, "pods", "-l", f"{LABEL_CLUSTER}={name}")["items"]
    print(f"{example.file} on {env.backend}: DONE after {took:.0f}s, {_one(r'^score: .*$', logs[0])[0]}")


def _diagnostics(kubectl: Any, env: Env, job: str, st: dict[str, Any], followers: dict[int, LogFollower]) -> str:
    pods = kubectl("get", "pods", "-n", env.namespace, "-o", "wide").stdout
    # A failed instance's own log says why (a native abort prints its reason there); the others end it.
    failed = {i["instanceId"] for i in st.get("instances", []) if i.get("phase") == "Failed"}
    logs = "".join(f"\ninstance {iid}{' (failed)' if iid in failed else ''}:\n{f.text[-(4000 if iid in failed else 1500):]}"
                   for iid, f in followers.items())
    return f"status: {st}\npods:\n{pods}\ninstances' logs:{logs}\noperator:\n{env.operator.logs()[-3000:]}"
