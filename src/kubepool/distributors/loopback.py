"""A real multi-node Ray cluster on one machine: one `ray start --block` per loopback IP (127.x.y.z).

Owns starting and stopping those nodes for tests, benchmarks and local demos. Each node gets its own
`--temp-dir` and its own ports, so several clusters (other IP ranges) can share the host; stopping kills
only the processes of the sessions this object started, never Ray processes by name.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

# Ray's defaults are chatty and unsafe for a shared host: no usage reports, no token auth on loopback.
RAY_NODE_ENV = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
_PORTS_PER_NODE = 6
_WORKER_PORT_SPAN = 200


def free_port() -> int:
    """An ephemeral port free right now on every address: some servers (Ray's GCS, torch's TCPStore)
    bind all addresses, so a port free on our loopback IP alone could still clash with another cluster."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


def _free_worker_range() -> int:
    """Start of a window of `_WORKER_PORT_SPAN` ports below the ephemeral range whose ends are free."""
    for _ in range(50):
        base = random.randrange(12000, 30000 - _WORKER_PORT_SPAN)
        try:
            for p in (base, base + _WORKER_PORT_SPAN - 1):
                with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                    s.bind(("", p))
        except OSError:
            continue
        return base
    raise RuntimeError("no free worker port window")


def _session_pids(sid: int) -> list[int]:
    """Processes of session `sid` (field 6 of /proc/<pid>/stat), i.e. what one `ray start` spawned."""
    pids: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if int(fields[3]) == sid:
            pids.append(int(entry.name))
    return pids


@dataclass
class LoopbackRayCluster:
    """Ray nodes on `ips` (the first is the head) with `num_cpus` logical CPUs each."""

    ips: Sequence[str]
    num_cpus: int = 2
    num_gpus: int = 0  # GPUs each node advertises to Ray's scheduler (none need exist: Ray trusts the number)
    object_store_bytes: int = 200 * 1024 * 1024
    include_dashboard: bool = False
    gcs_port: int = 0
    _procs: list[subprocess.Popen[bytes]] = field(default_factory=list, init=False, repr=False)
    _dirs: list[str] = field(default_factory=list, init=False, repr=False)

    @property
    def address(self) -> str:
        return f"{self.ips[0]}:{self.gcs_port}"

    def start(self, timeout: float = 60.0) -> LoopbackRayCluster:
        """Launch the head, wait for its GCS port, then launch the other nodes (they join on their own)."""
        self.gcs_port = self.gcs_port or free_port()
        try:
            self._procs.append(self._start_node(self.ips[0], head=True))
            self._wait_for_port(timeout)
            self._procs += [self._start_node(ip, head=False) for ip in self.ips[1:]]
        except BaseException:
            self.stop()
            raise
        return self

    def connect(self, timeout: float = 90.0) -> None:
        """`ray.init` this process as a driver and wait until every node is alive."""
        import ray

        os.environ.update(RAY_NODE_ENV)  # the driver must agree with the nodes on auth
        ray.init(address=self.address, log_to_driver=False)
        deadline = time.monotonic() + timeout
        while sum(n["Alive"] for n in ray.nodes()) < len(self.ips):
            self._check_alive()
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(self.ips)} Ray nodes not alive after {timeout}s; logs under {self._dirs}")
            time.sleep(0.3)

    def _start_node(self, ip: str, *, head: bool) -> subprocess.Popen[bytes]:
        tmp = tempfile.mkdtemp(prefix=f"kpray-{ip.replace('.', '-')}-", dir="/tmp")
        self._dirs.append(tmp)
        ports = [free_port() for _ in range(_PORTS_PER_NODE)]
        wbase = _free_worker_range()
        ray_bin = str(Path(sys.executable).with_name("ray"))
        cmd = [
            ray_bin, "start", "--block", "--disable-usage-stats",
            f"--node-ip-address={ip}", f"--temp-dir={tmp}", f"--num-cpus={self.num_cpus}", f"--num-gpus={self.num_gpus}",
            f"--object-store-memory={self.object_store_bytes}",
            f"--node-manager-port={ports[0]}", f"--object-manager-port={ports[1]}",
            f"--dashboard-agent-grpc-port={ports[2]}", f"--dashboard-agent-listen-port={ports[3]}",
            f"--metrics-export-port={ports[4]}", f"--runtime-env-agent-port={ports[5]}",
            f"--min-worker-port={wbase}", f"--max-worker-port={wbase + _WORKER_PORT_SPAN - 1}",
        ]  # fmt: skip
        if head:
            cmd += ["--head", f"--port={self.gcs_port}", f"--include-dashboard={str(self.include_dashboard).lower()}"]
            cmd += [f"--ray-client-server-port={free_port()}"]
            if self.include_dashboard:
                cmd += [f"--dashboard-host={ip}", f"--dashboard-port={free_port()}"]
        else:
            cmd += [f"--address={self.address}"]
        log = open(Path(tmp) / "ray-start.log", "wb")  # noqa: SIM115 - owned by the child for its lifetime
        env = {**os.environ, **RAY_NODE_ENV}
        return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)

    def _check_alive(self) -> None:
        for p, d in zip(self._procs, self._dirs, strict=True):
            if p.poll() is not None:
                raise RuntimeError(f"ray start exited with {p.returncode}; see {d}/ray-start.log")

    def _wait_for_port(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._check_alive()
            try:
                socket.create_connection((self.ips[0], self.gcs_port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.2)
        raise TimeoutError(f"Ray head GCS {self.address} not listening after {timeout}s")

    def stop(self) -> None:
        """SIGTERM every process of our sessions, then SIGKILL what is left; remove the temp dirs."""
        sids = [p.pid for p in self._procs]  # start_new_session: session id == the ray start pid
        for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 2.0)):
            pids = [pid for sid in sids for pid in _session_pids(sid)]
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline and any(_session_pids(s) for s in sids):
                time.sleep(0.1)
        for p in self._procs:
            try:
                p.wait(timeout=1)
            except subprocess.TimeoutExpired:
                pass
        self._procs.clear()
        for d in self._dirs:
            shutil.rmtree(d, ignore_errors=True)
        self._dirs.clear()

    def __enter__(self) -> LoopbackRayCluster:
        self.start()
        try:
            self.connect()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *_: object) -> None:
        import ray

        ray.shutdown()
        self.stop()
