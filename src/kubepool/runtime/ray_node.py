"""This instance's Ray node: the `ray start` command line, its env (token auth), and its process.

The head runs `ray start --head` on the pod IP; workers join `<head>:<gcs>` and retry until the head answers
or the instances timeout passes. Each node runs `ray start --block` as a child process, so stopping this
node means signalling that child (never `ray stop`, which would kill every Ray on the machine).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from kubepool import contract, naming
from kubepool.contract import ENV_RAY_AUTH_MODE, ENV_RAY_AUTH_TOKEN, InstanceIdentity, JobContract
from kubepool.runtime import ray_fence

AUTH_TOKEN, AUTH_DISABLED = "token", "disabled"
STOP_GRACE_SECONDS = 15.0
GIVE_UP_CHECK_SECONDS = 2.0
GCS_POLL_SECONDS = 0.25  # a worker waiting for the head's GCS (one TCP connect per look)
RETRY_SECONDS = 2.0  # after a `ray start` that did not come up
ATTEMPT_SECONDS = 90.0  # Ray itself gives a raylet 30 s to register, after up to ~20 s for the GCS


class RayStartError(RuntimeError):
    """The node could not start or join the cluster."""


def ray_env(contract: JobContract, env: Mapping[str, str]) -> dict[str, str]:
    """Env for every Ray process and the payload's driver: the same auth mode everywhere (ray-runtime.md 1.2)."""
    out = dict(env)
    mode = AUTH_DISABLED if contract.ray.auth_mode == AUTH_DISABLED else AUTH_TOKEN
    if mode == AUTH_TOKEN and not out.get(ENV_RAY_AUTH_TOKEN):
        raise RayStartError(f"Ray token auth is on but {ENV_RAY_AUTH_TOKEN} is empty (the job's Secret is missing)")
    out[ENV_RAY_AUTH_MODE] = mode
    out["RAY_USAGE_STATS_ENABLED"] = "0"
    # A finished batch job has nothing to drain; Ray's default would hold every stop for 30 s.
    out.setdefault("RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S", "0")
    return out


def auth_token(env: Mapping[str, str]) -> str | None:
    """The job's Ray token in an env `ray_env` made; None when the job turned Ray auth off."""
    return env[ENV_RAY_AUTH_TOKEN] if env.get(ENV_RAY_AUTH_MODE) == AUTH_TOKEN else None


def detect_gpus() -> int:
    """GPUs this pod can see, counted as SageMaker does (`nvidia-smi --list-gpus`); 0 without a driver."""
    if shutil.which("nvidia-smi") is None:
        return 0
    try:
        out = subprocess.run(["nvidia-smi", "--list-gpus"], capture_output=True, text=True, timeout=30, check=True).stdout
    except (subprocess.SubprocessError, OSError):
        return 0
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))


def node_ports(offset: int | None) -> dict[str, int]:
    """Per-node ports. In a pod (no offset) all fixed, so a NetworkPolicy can name them. Instances sharing one
    host's network (an offset) shift the fixed ones apart and let the OS pick the agent's HTTP port and the
    worker ports (0): a shifted 52365 or worker range would soon leave the port space or overlap a neighbour's."""
    shift = offset or 0
    ports = {
        "node-manager-port": naming.RAY_NODE_MANAGER_PORT + shift,
        "object-manager-port": naming.RAY_OBJECT_MANAGER_PORT + shift,
        "dashboard-agent-grpc-port": naming.RAY_DASHBOARD_AGENT_GRPC_PORT + shift,
        "runtime-env-agent-port": naming.RAY_RUNTIME_ENV_AGENT_PORT + shift,
        "metrics-export-port": naming.RAY_METRICS_EXPORT_PORT + shift,
    }
    if offset is None:
        return ports | {
            "dashboard-agent-listen-port": naming.RAY_DASHBOARD_AGENT_LISTEN_PORT,
            "min-worker-port": naming.RAY_MIN_WORKER_PORT,
            "max-worker-port": naming.RAY_MAX_WORKER_PORT,
        }
    return ports | {"dashboard-agent-listen-port": 0, "min-worker-port": 0, "max-worker-port": 0}


def custom_resources(me: InstanceIdentity) -> dict[str, float]:
    """Lets payloads place work on a group (`group:<name>`) or on the head/workers (Snowflake's node_tag)."""
    role = naming.ROLE_HEAD if me.is_head else naming.ROLE_WORKER
    return {f"group:{me.group}": 1.0, f"node_tag:{role}": 1.0}


@dataclass(frozen=True)
class NodeSpec:
    pod_ip: str
    head_ip: str
    temp_dir: Path
    port_offset: int | None  # set only where instances share one host's network
    gpus: int


def start_args(contract: JobContract, me: InstanceIdentity, spec: NodeSpec) -> list[str]:
    group = contract.group_of(me.group)
    args = ["start", "--block", "--disable-usage-stats", f"--node-ip-address={spec.pod_ip}", f"--temp-dir={spec.temp_dir}"]
    if me.is_head:
        args += [
            "--head",
            f"--port={contract.ray.gcs_port}",
            f"--ray-client-server-port={contract.ray.client_port}",
            f"--dashboard-host={spec.pod_ip}",
            f"--dashboard-port={contract.ray.dashboard_port}",
        ]
        if not contract.ray.dashboard:
            args.append("--include-dashboard=false")  # Ray still runs a minimal dashboard process, without the UI
    else:
        args.append(f"--address={spec.head_ip}:{contract.ray.gcs_port}")
    args += [f"--{k}={v}" for k, v in node_ports(spec.port_offset).items()]
    args += [f"--num-cpus={group.whole_cpus}", f"--num-gpus={spec.gpus}"]
    if group.memory_bytes:
        args.append(f"--memory={group.memory_bytes}")
    if contract.ray.object_store_memory_bytes:
        args.append(f"--object-store-memory={contract.ray.object_store_memory_bytes}")
    args.append(f"--resources={json.dumps(custom_resources(me), sort_keys=True)}")
    return args


def ray_command() -> list[str]:
    """`ray`: this interpreter's Ray (its `ray` script beside it) through ray_fence, so a venv's Ray is used even
    when it is not on PATH; else the `ray` on PATH, unpatched. -P: the working directory is not on sys.path."""
    if Path(sys.executable).with_name("ray").exists():
        return [sys.executable, "-P", "-m", "kubepool.runtime.ray_fence"]
    return ["ray"]


def held_start_possible() -> bool:
    """Whether `ray start` goes through ray_fence here, which alone can be started held."""
    return ray_command()[0] == sys.executable


def gcs_answers(host: str, port: int, timeout: float = 2.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


class RayNode:
    """One `ray start --block` child process."""

    def __init__(self, argv: list[str], env: Mapping[str, str], temp_dir: Path) -> None:
        self.argv = argv
        self.env = dict(env)
        self.temp_dir = temp_dir
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, held: bool = False) -> None:
        """Start `ray start`; `held`: Ray imported, then waiting for `release` (ray_fence's held start)."""
        self.temp_dir.mkdir(parents=True, exist_ok=True)
        (self.temp_dir / contract.RAY_READY_FILE).unlink(missing_ok=True)
        env = self.env | ({ray_fence.ENV_HELD: "1"} if held else {})
        # Its own process group, so `stop` can remove everything this node started.
        self.proc = subprocess.Popen([*ray_command(), *self.argv], env=env, start_new_session=True,
                                     stdin=subprocess.PIPE if held else None)

    def release(self) -> None:
        """Let a held start go on; a start that was not held (or has exited) is left as it is."""
        if self.proc is None or self.proc.stdin is None:
            return
        try:
            self.proc.stdin.write(f"{ray_fence.GO}\n".encode())
            self.proc.stdin.close()
        except BrokenPipeError:
            pass  # it exited meanwhile: wait_ready sees that
        self.proc.stdin = None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait_ready(self, deadline: float, give_up: Callable[[], bool]) -> bool:
        """True once the node is up; False if `ray start` exited, the deadline passed or `give_up` said so."""
        next_check = time.monotonic() + GIVE_UP_CHECK_SECONDS
        while time.monotonic() < deadline:
            if (self.temp_dir / contract.RAY_READY_FILE).exists():
                return True
            if not self.alive():
                return False
            if time.monotonic() >= next_check:
                if give_up():
                    return False
                next_check = time.monotonic() + GIVE_UP_CHECK_SECONDS
            time.sleep(0.2)
        return False

    def stop(self) -> None:
        """SIGTERM `ray start --block`, which stops this node's processes in order; then kill whatever is left
        in its process group (a start that failed or hung leaves a raylet behind)."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(STOP_GRACE_SECONDS)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()


def start_node(
    contract: JobContract,
    me: InstanceIdentity,
    spec: NodeSpec,
    env: Mapping[str, str],
    deadline: float,
    give_up: Callable[[], bool] = lambda: False,
) -> RayNode | None:
    """Start the head, or join it as a worker, retrying until the node is up or `deadline` (monotonic) passes.
    Each attempt is bounded: on a loaded machine `ray start` can fail and linger instead of exiting.
    None when `give_up` says so first (a worker whose head already finished the job). A worker's `ray start`
    waits held (Ray imported) while the head's GCS does not answer, and goes on the moment it does."""
    argv = start_args(contract, me, spec)
    node: RayNode | None = None  # the attempt under way (held, for a worker waiting for the head)
    try:
        while not give_up():
            pause = GCS_POLL_SECONDS  # the head's GCS is not up yet: look again soon, it is on the critical path
            if node is not None and not node.alive():  # a held start that died: a fresh one on the next look
                node.stop()
                node, pause = None, RETRY_SECONDS
            elif me.is_head or gcs_answers(spec.head_ip, contract.ray.gcs_port):
                pause = RETRY_SECONDS
                if node is None:
                    node = RayNode(argv, env, spec.temp_dir)
                    node.start()
                node.release()
                if node.wait_ready(min(deadline, time.monotonic() + ATTEMPT_SECONDS), give_up):
                    ready, node = node, None
                    return ready
                node.stop()
                node = None
                print("kubepool: ray start did not come up; retrying until the deadline", flush=True)
            elif node is None and held_start_possible():
                node = RayNode(argv, env, spec.temp_dir)
                node.start(held=True)
            if time.monotonic() >= deadline:
                what = "the head" if me.is_head else f"joining {spec.head_ip}:{contract.ray.gcs_port}"
                raise RayStartError(f"Ray did not start ({what}) before the deadline; see the Ray output above")
            time.sleep(pause)
        return None
    finally:
        if node is not None:  # given up, past the deadline, or SIGTERM while starting: leave no Ray behind
            node.stop()
