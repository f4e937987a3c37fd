"""The controllers under test as local processes: the kubepool operator (kopf) and the KubeRay operator (Go),
each started fresh for a run, with its peak RSS and CPU seconds read from /proc."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench import stats
from bench.cluster import ROOT, BenchCluster, free_port

KUBERAY_BUILD = ROOT / "hack" / "kuberay" / "build.sh"
STARTUP_TIMEOUT_S = 90.0
# Ports 0: the shared machine already has an operator on 8080/9090; the benchmark needs neither endpoint.
KOPF_FLOOR_READY = "kopf floor configured"  # bench.kopffloor.READY (not imported: it registers kopf handlers)
KUBEPOOL_ENV = {"KUBEPOOL_OPERATOR_METRICS_PORT": "0", "KUBEPOOL_OPERATOR_LIVENESS_PORT": "0"}


@dataclass(frozen=True)
class Usage:
    rss_mib: float
    peak_rss_mib: float
    cpu_s: float


def usage(pid: int) -> Usage:
    status = Path(f"/proc/{pid}/status").read_text()
    stat = Path(f"/proc/{pid}/stat").read_text()
    return Usage(
        rss_mib=stats.proc_status_kib(status, "VmRSS") / 1024,
        peak_rss_mib=stats.proc_status_kib(status, "VmHWM") / 1024,
        cpu_s=stats.proc_cpu_seconds(stat, os.sysconf("SC_CLK_TCK")),
    )


@dataclass
class Controller:
    """One controller process; `start` returns once it serves, `stop` ends it (and only it)."""

    name: str
    argv: list[str]
    env: dict[str, str]
    log_path: Path
    proc: subprocess.Popen[bytes] | None = field(default=None, init=False)

    def start(self, settle: bool = True) -> None:
        """Start it; return once it serves and (with `settle`) once its start-up CPU is over."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)  # a shared temp dir: someone may have cleaned it
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(self.argv, env=self.env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not self.ready():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{self.name} did not start; see {self.log_path}")
            time.sleep(0.3)
        if settle:
            self.settle()

    def settle(self, quiet_s: float = 2.0, timeout: float = 120.0) -> None:
        """Wait until the controller has used < 5% CPU for `quiet_s`: its start-up (listing, resuming every
        existing object) must be over before the clock starts."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            before = self.usage().cpu_s
            time.sleep(quiet_s)
            if self.usage().cpu_s - before < 0.05 * quiet_s:
                return

    def ready(self) -> bool:
        raise NotImplementedError

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def usage(self) -> Usage:
        return usage(self.pid)

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None


class KubepoolOperator(Controller):
    """`python -m kubepool.controller --all-namespaces --standalone`, default settings (INFO logging)."""

    def __init__(self, bench: BenchCluster, log_path: Path, extra_env: dict[str, str] | None = None) -> None:
        super().__init__("kubepool", [sys.executable, "-m", "kubepool.controller", "--all-namespaces", "--standalone"],
                         {**bench.env(), **KUBEPOOL_ENV, **(extra_env or {})}, log_path)
        self._seen = 0

    def start(self, settle: bool = True) -> None:
        self._seen = self.log_path.read_text(errors="replace").count("kubepool operator configured") if self.log_path.exists() else 0
        super().start(settle)

    def ready(self) -> bool:
        return self.log_path.read_text(errors="replace").count("kubepool operator configured") > self._seen


class KopfFloor(Controller):
    """`python -m bench.kopffloor`: P1's jobs' pods created by the least kopf operator (its docstring)."""

    def __init__(self, bench: BenchCluster, log_path: Path, pod_spec: dict[str, object],
                 writes_pools: Mapping[str, Any] | None = None) -> None:
        env = {**bench.env(), "KOPF_FLOOR_POD_SPEC": json.dumps(pod_spec)}
        if writes_pools is not None:  # the kopf writes floor: kubepool's writes for each job (bench/kopffloor.py)
            env["KOPF_FLOOR_WRITES_POOLS"] = json.dumps(writes_pools)
        super().__init__("kopf-floor", [sys.executable, "-m", "bench.kopffloor"], env, log_path)
        self._seen = 0

    def start(self, settle: bool = True) -> None:
        self._seen = self.log_path.read_text(errors="replace").count(KOPF_FLOOR_READY) if self.log_path.exists() else 0
        super().start(settle)

    def ready(self) -> bool:
        return self.log_path.read_text(errors="replace").count(KOPF_FLOOR_READY) > self._seen


def kuberay_dir() -> Path:
    """hack/kuberay/build.sh prints the cache dir (bin/ray-operator, crds/); a no-op when built."""
    out = subprocess.run(["bash", str(KUBERAY_BUILD)], capture_output=True, text=True, check=True).stdout
    return Path(out.strip().splitlines()[-1])


class KubeRayOperator(Controller):
    """The real KubeRay operator binary with its shipped defaults (qps 100, burst 200, reconcile-concurrency 1)."""

    def __init__(self, bench: BenchCluster, log_path: Path, home: Path) -> None:
        self.probe_port = free_port()
        argv = [str(home / "bin" / "ray-operator"), f"--kubeconfig={bench.lay.kubeconfig}",
                "--enable-leader-election=false", f"--metrics-addr=127.0.0.1:{free_port()}",
                f"--health-probe-bind-address=127.0.0.1:{self.probe_port}"]
        super().__init__("kuberay", argv, bench.env(), log_path)

    def ready(self) -> bool:
        try:
            return httpx.get(f"http://127.0.0.1:{self.probe_port}/readyz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False


def install_kuberay_crds(bench: BenchCluster, home: Path) -> None:
    bench.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(home / "crds"))
    bench.wait_established("rayclusters.ray.io")
