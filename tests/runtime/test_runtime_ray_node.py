"""This instance's `ray start` command line and Ray env (pure); start_node's attempts, held starts included, with a
stand-in for `ray start`."""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
from pathlib import Path

import pytest

from kubepool.contract import RAY_READY_FILE, Group, JobContract, RaySettings
from kubepool.runtime import ray_fence, ray_node
from kubepool.runtime.ray_node import NodeSpec, RayStartError, ray_env, start_args, start_node


def job(auth: str = "token") -> JobContract:
    return JobContract(
        job_name="j", namespace="ns", job_uid="u",
        groups=[Group(name="cpu", instance_type="t", count=1, cpus=2, memory_bytes=4 << 30), Group(name="gpu", instance_type="g", count=1, gpus=1)],
        target_instances=2, min_instances=2, ray=RaySettings(auth_mode=auth),
    )


def flags(argv: list[str]) -> dict[str, str]:
    return dict(a[2:].split("=", 1) for a in argv if a.startswith("--") and "=" in a)


def test_head_args() -> None:
    c = job()
    argv = start_args(c, c.identity(0), NodeSpec("10.0.0.5", "10.0.0.5", Path("/tmp/ray"), None, 0))
    f = flags(argv)
    assert "--head" in argv and "--block" in argv
    assert (f["node-ip-address"], f["port"], f["dashboard-host"], f["dashboard-port"]) == ("10.0.0.5", "6379", "10.0.0.5", "8265")
    assert (f["num-cpus"], f["num-gpus"], f["memory"], f["node-manager-port"]) == ("2", "0", str(4 << 30), "6380")
    assert (f["dashboard-agent-listen-port"], f["min-worker-port"], f["max-worker-port"]) == ("52365", "10002", "10999")
    assert json.loads(f["resources"]) == {"group:cpu": 1.0, "node_tag:head": 1.0}


def test_dashboard_off_is_a_head_flag() -> None:
    on = job()
    assert "--include-dashboard=false" not in start_args(on, on.identity(0), NodeSpec("10.0.0.5", "10.0.0.5", Path("/tmp/ray"), None, 0))
    off = on.model_copy(update={"ray": RaySettings(dashboard=False)})
    assert "--include-dashboard=false" in start_args(off, off.identity(0), NodeSpec("10.0.0.5", "10.0.0.5", Path("/tmp/ray"), None, 0))
    assert not any("dashboard" in a for a in start_args(off, off.identity(1), NodeSpec("10.0.0.6", "10.0.0.5", Path("/tmp/ray"), None, 0))
                   if not a.startswith("--dashboard-agent"))


def test_worker_args_with_port_offset_and_gpus() -> None:
    c = job()
    argv = start_args(c, c.identity(1), NodeSpec("10.0.0.6", "10.0.0.5", Path("/tmp/ray"), 1000, 1))
    f = flags(argv)
    assert "--head" not in argv and f["address"] == "10.0.0.5:6379"
    assert (f["num-gpus"], f["node-manager-port"], f["metrics-export-port"]) == ("1", "7380", "9080")
    assert (f["dashboard-agent-listen-port"], f["min-worker-port"], f["max-worker-port"]) == ("0", "0", "0")
    assert json.loads(f["resources"]) == {"group:gpu": 1.0, "node_tag:worker": 1.0}


def test_ray_env_auth() -> None:
    env = ray_env(job(), {"RAY_AUTH_TOKEN": "t" * 64})
    assert (env["RAY_AUTH_MODE"], env["RAY_USAGE_STATS_ENABLED"]) == ("token", "0")
    with pytest.raises(RayStartError, match="RAY_AUTH_TOKEN"):
        ray_env(job(), {})
    assert ray_env(job("disabled"), {"RAY_AUTH_MODE": "token"})["RAY_AUTH_MODE"] == "disabled"


def test_a_worker_gives_up_joining_once_the_head_is_done(tmp_path: Path) -> None:
    c = job()
    spec = NodeSpec("127.0.5.30", "127.0.5.31", tmp_path, None, 0)
    assert start_node(c, c.identity(1), spec, {}, time.monotonic() + 60, give_up=lambda: True) is None


# A stand-in for `ray start --block` through ray_fence: it records when it started (and its pid), waits held as
# the fence does, records its release, then comes up (Ray's ready file) and blocks until stopped.
FAKE_RAY = f"""
import os, sys, time
from pathlib import Path
temp = Path(next(a.split("=", 1)[1] for a in sys.argv if a.startswith("--temp-dir=")))
(temp / "started").write_text(f"{{time.monotonic()}} {{os.getpid()}}")
if os.environ.get("{ray_fence.ENV_HELD}") and sys.stdin.readline().strip() != "{ray_fence.GO}":
    sys.exit(0)
(temp / "released").write_text(str(time.monotonic()))
(temp / "{RAY_READY_FILE}").write_text("up")
time.sleep(600)
"""


@pytest.fixture()
def fake_ray(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    script = tmp_path / "fake_ray.py"
    script.write_text(FAKE_RAY)
    monkeypatch.setattr(ray_node, "ray_command", lambda: [sys.executable, str(script)])
    return tmp_path / "ray"


def free_loopback_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def test_a_worker_imports_ray_while_the_head_comes_up_and_starts_the_moment_it_answers(fake_ray: Path) -> None:
    """The worker's `ray start` is started held (Ray's import off the job's critical path) before the head's GCS
    answers, and let go only once it does."""
    head = "127.0.5.33"
    c = job().model_copy(update={"ray": RaySettings(gcs_port=free_loopback_port(head))})
    spec = NodeSpec("127.0.5.32", head, fake_ray, None, 0)
    got: list[object] = []
    t = threading.Thread(target=lambda: got.append(start_node(c, c.identity(1), spec, {}, time.monotonic() + 60)))
    t.start()
    time.sleep(1.5)
    with socket.create_server((head, c.ray.gcs_port)):
        answered = time.monotonic()
        t.join(30)
    node = got[0]
    try:
        assert node is not None
        started = float((fake_ray / "started").read_text().split()[0])
        released = float((fake_ray / "released").read_text())
        assert started < answered <= released, (started, answered, released)
    finally:
        node.stop()  # type: ignore[union-attr]


def test_a_held_start_is_stopped_when_the_worker_gives_up(fake_ray: Path) -> None:
    c = job().model_copy(update={"ray": RaySettings(gcs_port=free_loopback_port("127.0.5.35"))})
    spec = NodeSpec("127.0.5.34", "127.0.5.35", fake_ray, None, 0)
    until = time.monotonic() + 3.0  # the head finished before this worker's GCS look ever succeeded
    assert start_node(c, c.identity(1), spec, {}, time.monotonic() + 60, give_up=lambda: time.monotonic() > until) is None
    pid = int((fake_ray / "started").read_text().split()[1])
    assert not (fake_ray / "released").exists()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # stopped and reaped: no Ray left behind
