"""This instance's `ray start` command line and Ray env (pure)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from kubepool.contract import Group, JobContract, RaySettings
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
