"""The benchmarks' private local cluster and their API client.

A cluster of its own (state dir under /var/tmp, ports shifted past the default cluster's and the tests') so that
thousands of benchmark pods never disturb the tests or the shared `.kubepool/` cluster. Fake nodes (kwok)
carry the scale runs; local process nodes are added later for the latency run. `BenchCluster.down` stops it.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from kubepool.local import components, controlplane, kwok, layout, processes
from kubepool.local.layout import Layout, Ports

ROOT = Path(__file__).resolve().parents[1]
# Not under /tmp: a local node mounts each pod's own emptyDir at /tmp, which would hide the node's state dir
# (the pod's log and exit files) from the pod's sandbox process.
STATE_DIR = Path(os.environ.get("KUBEPOOL_BENCH_STATE_DIR", "/var/tmp/kubepool-bench"))
LOG_DIR = STATE_DIR.with_name(STATE_DIR.name + "-logs")  # controller logs; outlives the cluster
PORT_OFFSETS = (4100, 4200, 4300, 4400)  # the default cluster uses 0; tests pick random offsets
FAKE_POOL_LABEL = {"kubepool.dev/node-pool": "fake"}
COMPLETE_ENV = "BENCH_COMPLETE"  # jobs whose head pods the completion stage below moves to Succeeded
COMPLETE_AFTER_MS = 2000
# The cluster's processes by their /proc comm (15 characters at most), for `BenchCluster.component_cpu`.
COMPONENTS = ("kube-apiserver", "etcd", "kube-scheduler", "kube-controller", "kwok")


def head_exit_stage(name: str, env: str, exit_code: int, delay_ms: int, jitter_ms: int | None = None) -> str:
    """A kwok Stage: a Running kubepool head pod whose container has env `env`=true ends `delay_ms` later (up to
    `jitter_ms`, uniformly, when given) with `exit_code`: Succeeded for 0, else Failed."""
    jitter = f"\n    jitterDurationMilliseconds: {jitter_ms}" if jitter_ms else ""
    return f"""apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: {name}
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchLabels:
      kubepool.dev/role: head
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'DoesNotExist'
    - key: '.status.phase'
      operator: 'In'
      values: ['Running']
    - key: '.spec.containers.[].env.[] | select( .name == "{env}" ) | .value'
      operator: 'In'
      values: ['true']
  delay:
    durationMilliseconds: {delay_ms}{jitter}
  next:
    statusTemplate: |
      {{{{ $now := Now }}}}
      containerStatuses:
      {{{{ range .spec.containers }}}}
      - image: {{{{ .image | Quote }}}}
        name: {{{{ .name | Quote }}}}
        ready: false
        restartCount: 0
        started: false
        state:
          terminated:
            exitCode: {exit_code}
            finishedAt: {{{{ $now | Quote }}}}
            reason: {"Completed" if exit_code == 0 else "Error"}
            startedAt: {{{{ $now | Quote }}}}
      {{{{ end }}}}
      phase: {"Succeeded" if exit_code == 0 else "Failed"}
"""


# A Running head pod of a churn job (env BENCH_COMPLETE=true) succeeds 2 s later.
COMPLETE_STAGE = head_exit_stage("bench-head-complete", COMPLETE_ENV, 0, COMPLETE_AFTER_MS)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def nodes_config(process_nodes: int) -> dict[str, Any]:
    """Local process nodes on 127.0.9.x and 127.24x (the slots of `kubepool local up` use other addresses)."""
    return {"nodes": [
        {"name": f"bench-node-{i}", "ip": f"127.0.9.{i}", "podCIDR": f"127.24{i}.0.0/16",
         "capacity": {"cpu": "4", "memory": "16Gi", "pods": "110"},
         "labels": {"kubepool.dev/node-pool": "bench-local"}, "taints": []}
        for i in range(1, process_nodes + 1)
    ]}  # fmt: skip


def _write_nodes_config(state_parent: Path, process_nodes: int) -> Path:
    path = state_parent / f"kubepool-bench-nodes-{process_nodes}.yaml"
    path.write_text(yaml.safe_dump(nodes_config(process_nodes), sort_keys=False))
    return path


def cli_up(state_dir: Path, process_nodes: int, fake_nodes: int, port_offset: int) -> float:
    """`kubepool local up` as a user runs it (cached binaries); returns its wall time in seconds."""
    cfg = _write_nodes_config(state_dir.parent, process_nodes)
    env = {**os.environ, "KUBEPOOL_STATE_DIR": str(state_dir), "KUBEPOOL_PORT_OFFSET": str(port_offset),
           "KUBEPOOL_NODES_CONFIG": str(cfg)}
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "kubepool.local.cli", "up", "--fake-nodes", str(fake_nodes)],
                          env=env, capture_output=True, text=True, cwd=ROOT)
    if proc.returncode != 0:
        raise RuntimeError(f"kubepool local up failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return time.perf_counter() - t


def cli_down(state_dir: Path) -> None:
    subprocess.run([sys.executable, "-m", "kubepool.local.cli", "down", "--state-dir", str(state_dir)],
                   capture_output=True, text=True, cwd=ROOT)


@dataclass
class BenchCluster:
    """The private cluster: its layout, and helpers that the benchmark parts share."""

    lay: Layout
    up_seconds: float

    @classmethod
    def up(cls, fake_nodes: int, process_nodes: int = 0, state_dir: Path = STATE_DIR) -> BenchCluster:
        """A fresh cluster (a leftover one in `state_dir` is removed first, so `up` is timed from nothing) with
        the kubepool CRDs and, with fake nodes, the completion stage."""
        cli_down(state_dir)
        offset = next((o for o in PORT_OFFSETS if Ports().shifted(o).free()), None)
        if offset is None:
            raise RuntimeError(f"no free port offset among {PORT_OFFSETS}")
        seconds = cli_up(state_dir, process_nodes, fake_nodes, offset)
        lay = Layout.load(state_dir.resolve())
        assert lay is not None
        bench = cls(lay, seconds)
        bench.wait_nodes_ready(fake_nodes, [str(n["name"]) for n in nodes_config(process_nodes)["nodes"]])
        if fake_nodes:
            bench.install_stages({"bench-head-complete": COMPLETE_STAGE})
        bench.install_crds(ROOT)
        return bench

    def install_crds(self, tree: Path) -> None:
        """The kubepool CRDs of a source tree (its `crds/`), applied and Established."""
        self.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(tree / "crds"))
        self.wait_established("mljobs.kubepool.dev", "computepools.kubepool.dev")

    def wait_established(self, *crds: str, timeout: float = 60) -> None:
        """Polls: `kubectl wait --for=condition=Established` fails outright on a CRD with no conditions yet."""
        deadline = time.monotonic() + timeout
        def established(crd: str) -> bool:
            conditions = json.loads(self.kubectl("get", f"crd/{crd}", "-o", "json")).get("status", {}).get("conditions")
            return any(c["type"] == "Established" and c["status"] == "True" for c in conditions or [])

        for crd in crds:
            while not established(crd):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"CRD {crd} not Established after {timeout:.0f} s")
                time.sleep(0.5)

    def down(self) -> None:
        cli_down(self.lay.state_dir)

    def component_cpu(self) -> dict[str, float]:
        """CPU seconds so far of this cluster's processes (COMPONENTS), by component: read before and after a timed
        run, it shows where the machine's cores went."""
        out = dict.fromkeys(COMPONENTS, 0.0)
        tick = os.sysconf("SC_CLK_TCK")
        mine = str(self.lay.state_dir)
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                stat = (proc / "stat").read_text()
                comm = stat[stat.index("(") + 1:stat.rindex(")")]
                if comm not in out or mine not in (proc / "cmdline").read_text(errors="replace"):
                    continue
            except (OSError, ValueError):  # gone meanwhile
                continue
            fields = stat[stat.rindex(")") + 2:].split()
            out[comm] += (int(fields[11]) + int(fields[12])) / tick  # utime + stime
        return out

    def kubectl(self, *args: str, stdin: str | None = None) -> str:
        return self.lay.kubectl(*args, stdin=stdin, timeout=600)

    def wait_nodes_ready(self, fake_nodes: int, process_nodes: list[str], timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while True:
            ready = controlplane.node_readiness(self.lay)
            fake = sum(v for n, v in ready.items() if n.startswith("kwok-node-"))
            if fake >= fake_nodes and all(ready.get(n) for n in process_nodes):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"nodes not Ready after {timeout:.0f} s: {fake}/{fake_nodes} fake, {ready}")
            time.sleep(1)

    def install_stages(self, stages: dict[str, str]) -> None:
        """kwok reads its stages at start: append ours (name: Stage document) to the config `up` wrote, then
        restart kwok."""
        path = kwok.config_path(self.lay)
        text = path.read_text()
        todo = [doc for name, doc in stages.items() if f"name: {name}\n" not in text]
        if todo:
            path.write_text(text.rstrip("\n") + "".join("\n---\n" + doc for doc in todo))
        processes.stop(self.lay, kwok.NAME)
        processes.ensure(self.lay, [components.kwok_component(self.lay)], say=lambda _: None)

    def ssl_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.lay.pki.ca_cert))
        ctx.load_cert_chain(str(self.lay.pki.cert("admin")), str(self.lay.pki.key("admin")))
        return ctx

    def client(self, connections: int = 64) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            base_url=self.lay.apiserver_url, verify=self.ssl_context(), timeout=httpx.Timeout(60.0),
            limits=httpx.Limits(max_connections=connections, max_keepalive_connections=connections),
        )

    def env(self) -> dict[str, str]:
        return {**os.environ, "KUBECONFIG": str(self.lay.kubeconfig)}

    # --- namespaces -----------------------------------------------------------------------------------------
    def create_namespace(self, name: str) -> None:
        self.kubectl("create", "namespace", name)

    def delete_namespaces(self, names: Iterable[str], timeout: float = 600) -> float:
        """Delete and wait until they are gone (pods included); returns the seconds it took."""
        names = list(names)
        t = time.perf_counter()
        self.kubectl("delete", "namespace", *names, "--ignore-not-found", "--wait=false")
        deadline = time.monotonic() + timeout
        while any(self.kubectl("get", "namespace", n, "--ignore-not-found", "-o", "name").strip() for n in names):
            if time.monotonic() > deadline:
                raise RuntimeError(f"namespaces {names} still there after {timeout:.0f} s")
            time.sleep(1)
        return time.perf_counter() - t


# --- API helpers (async) ------------------------------------------------------------------------------------
async def bounded(concurrency: int, calls: Iterable[Callable[[], Awaitable[Any]]]) -> list[Any]:
    """Run the calls with at most `concurrency` in flight, in order of the iterable."""
    sem = asyncio.Semaphore(concurrency)

    async def one(call: Callable[[], Awaitable[Any]]) -> Any:
        async with sem:
            return await call()

    return await asyncio.gather(*(one(c) for c in calls))


async def create(client: httpx.AsyncClient, path: str, body: dict[str, Any]) -> None:
    r = await client.post(path, json=body)
    if r.status_code >= 300:
        raise RuntimeError(f"POST {path} {body['metadata']['name']}: {r.status_code} {r.text[:300]}")


async def metrics_text(client: httpx.AsyncClient) -> str:
    r = await client.get("/metrics")
    r.raise_for_status()
    return r.text


Handler = Callable[[str, dict[str, Any], float], None]


async def watch(client: httpx.AsyncClient, path: str, on_event: Handler, params: dict[str, str] | None = None) -> None:
    """List then watch `path` forever (cancel the task to stop), calling on_event(type, object, arrival time)
    with wall-clock arrival times; re-lists when the watch expires."""
    params = dict(params or {})
    while True:
        r = await client.get(path, params=params)
        r.raise_for_status()
        doc = r.json()
        now = time.time()
        for item in doc["items"]:
            on_event("ADDED", item, now)
        rv = doc["metadata"]["resourceVersion"]
        expired = False
        while not expired:
            q = {**params, "watch": "1", "resourceVersion": rv, "allowWatchBookmarks": "true", "timeoutSeconds": "240"}
            async with client.stream("GET", path, params=q, timeout=httpx.Timeout(None, connect=30)) as resp:
                async for line in resp.aiter_lines():
                    if not line:
                        continue
                    ev = json.loads(line)
                    obj = ev["object"]
                    if ev["type"] == "ERROR":
                        expired = True  # 410 Gone: re-list
                        break
                    rv = obj["metadata"]["resourceVersion"]
                    if ev["type"] != "BOOKMARK":
                        on_event(ev["type"], obj, time.time())


def describe_machine() -> dict[str, Any]:
    """CPU, cores, memory, OS, Python and Kubernetes versions: printed beside every result."""
    import platform

    cpuinfo = Path("/proc/cpuinfo").read_text().splitlines()
    cpu = next((ln.split(":", 1)[1].strip() for ln in cpuinfo if ln.startswith("model name")), "?")
    meminfo = Path("/proc/meminfo").read_text().splitlines()
    mem_kib = int(next(ln.split()[1] for ln in meminfo if ln.startswith("MemTotal")))
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gib": mem_kib // 2**20, "os": platform.platform(),
            "python": platform.python_version(), "kubernetes": layout.kube_version(),
            "load_avg_at_start": [round(x, 2) for x in os.getloadavg()]}


def machine_line(m: dict[str, Any]) -> str:
    return (f"Machine: {m['cpu']}, {m['cores']} cores (shared with other work; load average at start "
            f"{m['load_avg_at_start'][0]}), {m['memory_gib']} GiB, {m['os']}; Python {m['python']}, "
            f"Kubernetes {m['kubernetes']} (local control plane on loopback).")
