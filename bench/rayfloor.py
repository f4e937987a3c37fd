"""P3's floor: a bare 3-node Ray cluster formed on this machine, with no Kubernetes, operator or runtime.

What kubepool's P3 job does on its critical path, done by hand: the head's `ray start --head --block`, each
worker polling the head's GCS port and then running `ray start --block --address=...` (the runtime's own
schedule), then a driver that connects and waits until it sees every node alive. The time from the first
`ray start` to the driver seeing all nodes is the floor that P3 (submit → payload start) is divided by.
Ray's defaults otherwise (dashboard included, as in P3's default job), and token auth with a fresh token, as
every kubepool job's Ray has. Stated, not left to Ray: with the mode unset, a `~/.ray/auth_token` left on the
machine turns auth on in the head's GCS alone, and the driver is refused. Every process runs in its own
session and is stopped by killing that session, never with `ray stop` (which would stop every Ray on the
machine).
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

NODE_IP = "127.0.0.1"
PORT_BASE = 41000  # clear of the local clusters' slots and of the bench's own ranges
PORT_STRIDE = 20
READY_FILE = "ray_current_cluster"  # `ray start` writes it into its --temp-dir once the node is up
GCS_POLL_S = 0.25
TIMEOUT_S = 120.0
DRIVER = """import sys, time, ray
ray.init(address=sys.argv[1], logging_level="ERROR")
while sum(n["Alive"] for n in ray.nodes()) < int(sys.argv[2]):
    time.sleep(0.05)
print(time.time(), flush=True)
"""


def _ray() -> str:
    local = Path(sys.executable).with_name("ray")
    return str(local) if local.exists() else "ray"


def start_args(index: int, temp_dir: Path) -> list[str]:
    """`ray start` for node `index` (0: the head), its fixed ports apart from every other node's."""
    base = PORT_BASE + PORT_STRIDE * index
    args = ["start", "--block", "--disable-usage-stats", f"--node-ip-address={NODE_IP}", f"--temp-dir={temp_dir}",
            "--num-cpus=1", f"--node-manager-port={base + 1}", f"--object-manager-port={base + 2}",
            f"--dashboard-agent-grpc-port={base + 3}", f"--runtime-env-agent-port={base + 4}",
            f"--metrics-export-port={base + 5}", "--dashboard-agent-listen-port=0", "--min-worker-port=0",
            "--max-worker-port=0"]  # fmt: skip
    if index == 0:
        return [*args, "--head", f"--port={PORT_BASE}", f"--ray-client-server-port={PORT_BASE + 6}",
                f"--dashboard-host={NODE_IP}", f"--dashboard-port={PORT_BASE + 7}"]  # fmt: skip
    return [*args, f"--address={NODE_IP}:{PORT_BASE}"]


def _gcs_answers() -> bool:
    try:
        with socket.create_connection((NODE_IP, PORT_BASE), timeout=1.0):
            return True
    except OSError:
        return False


def _wait(what: str, done: Callable[[], bool], procs: list[subprocess.Popen[bytes]], deadline: float) -> None:
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError(f"Ray floor: {what} not reached in {TIMEOUT_S:.0f} s")
        if any(p.poll() is not None for p in procs):
            raise RuntimeError(f"Ray floor: a `ray start` exited (code {[p.poll() for p in procs]}) before {what}")
        time.sleep(GCS_POLL_S)


def node_env() -> dict[str, str]:
    """The environment of every process of one floor: its nodes and its driver share a fresh token."""
    return os.environ | {"RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}


def form(nodes: int = 3) -> float:
    """Seconds from the head's `ray start` until a driver sees `nodes` alive nodes."""
    env = node_env()
    procs: list[subprocess.Popen[bytes]] = []
    with tempfile.TemporaryDirectory(prefix="kubepool-rayfloor-") as tmp:
        dirs = [Path(tmp) / f"n{i}" for i in range(nodes)]
        for d in dirs:
            d.mkdir()
        log = open(Path(tmp) / "ray.log", "wb")  # noqa: SIM115 - closed below, after the processes
        t0 = time.time()  # the driver prints its own wall clock
        deadline = time.monotonic() + TIMEOUT_S
        try:
            procs.append(subprocess.Popen([_ray(), *start_args(0, dirs[0])], env=env, start_new_session=True,
                                          stdout=log, stderr=subprocess.STDOUT))  # fmt: skip
            _wait("the head's GCS answering", _gcs_answers, procs, deadline)
            for i in range(1, nodes):
                procs.append(subprocess.Popen([_ray(), *start_args(i, dirs[i])], env=env, start_new_session=True,
                                              stdout=log, stderr=subprocess.STDOUT))  # fmt: skip
            _wait("the head up", (dirs[0] / READY_FILE).exists, procs, deadline)
            seen = subprocess.run([sys.executable, "-c", DRIVER, f"{NODE_IP}:{PORT_BASE}", str(nodes)], env=env,
                                  capture_output=True, text=True, timeout=TIMEOUT_S, check=False)  # fmt: skip
            if seen.returncode != 0:
                raise RuntimeError(f"Ray floor: the driver failed: {seen.stderr[-1000:]}")
            return float(seen.stdout.split()[-1]) - t0
        except RuntimeError as e:
            log.flush()
            tail = (Path(tmp) / "ray.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"{e}; the Ray output's end:\n{tail}") from e
        finally:
            for p in reversed(procs):
                _stop(p)
            log.close()


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


if __name__ == "__main__":
    print(f"{form():.2f} s")
