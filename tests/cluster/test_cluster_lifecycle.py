"""`kubepool local up/down/status` on a second, throwaway cluster (own state dir, free ports, no local nodes),
so killing and stopping things never disturbs the shared cluster."""

from __future__ import annotations

import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kubepool.local import controlplane
from kubepool.local.controlplane import Layout, Ports

pytestmark = pytest.mark.cluster


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _free_port_offset() -> int:
    """A port offset whose ports are all free; random, so concurrent test sessions rarely pick the same one."""
    offsets = list(range(1000, 9000, 100))
    random.shuffle(offsets)
    for off in offsets:
        if all(_free(p) for p in vars(Ports().shifted(off)).values()):
            return off
    raise RuntimeError("no free port range for a second cluster")


def local(*args: str) -> subprocess.CompletedProcess[str]:
    # The session's KUBEPOOL_* defaults (state dir, ports, nodes) must not leak into the spare cluster.
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBEPOOL_")}
    proc = subprocess.run(
        [sys.executable, "-m", "kubepool.local.cli", *args],
        capture_output=True, text=True, timeout=180, env=env,
    )
    print(proc.stdout, proc.stderr)
    return proc


@pytest.fixture(scope="module")
def spare(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("spare")
    nodes = root / "nodes.yaml"
    nodes.write_text("nodes: []\n")
    state = root / "state"
    try:
        up = local("up", "--state-dir", str(state), "--nodes-config", str(nodes),
                   "--port-offset", str(_free_port_offset()))
        assert up.returncode == 0, up.stderr
        m = re.search(r"ready in ([\d.]+)s", up.stdout)
        assert m, up.stdout
        print(f"fresh up took {m.group(1)}s")
        assert float(m.group(1)) < 60  # target is < 20 s; leave room for a loaded CI machine
        assert f"export KUBECONFIG={state / 'kubeconfig'}" in up.stdout
        yield state
    finally:  # also after a failed `up`: never leave half a cluster running
        local("down", "--state-dir", str(state))


def _pids(state: Path) -> dict[str, int]:
    lay = Layout.load(state)
    assert lay is not None
    return {n: pid for n in [*controlplane.CONTROL_PLANE, "kwok"] if (pid := controlplane.read_pid(lay, n))}


def test_up_again_reuses_the_running_cluster(spare: Path) -> None:
    before = _pids(spare)
    again = local("up", "--state-dir", str(spare))
    assert again.returncode == 0, again.stderr
    assert again.stdout.count("(reused)") == 5
    assert _pids(spare) == before
    assert local("status", "--state-dir", str(spare)).returncode == 0


def test_status_reports_a_crashed_component_and_up_repairs_it(spare: Path) -> None:
    pid = _pids(spare)["kube-scheduler"]
    os.killpg(pid, signal.SIGKILL)
    lay = Layout.load(spare)
    assert lay is not None
    deadline = time.monotonic() + 10
    while controlplane.alive(lay, "kube-scheduler"):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    st = local("status", "--state-dir", str(spare))
    assert st.returncode == 1
    line = next(ln for ln in st.stdout.splitlines() if "kube-scheduler" in ln)
    assert "CRASHED" in line
    assert "logs/kube-scheduler.log" in st.stdout and "start:" in st.stdout  # the log tail is shown
    assert re.search(r"etcd\s+healthy", st.stdout)

    repaired = local("up", "--state-dir", str(spare))
    assert repaired.returncode == 0, repaired.stderr
    assert "kube-scheduler: started" in repaired.stdout
    assert "nodes: none configured" in repaired.stdout  # the cluster keeps its own node config
    assert local("status", "--state-dir", str(spare)).returncode == 0


def test_down_stops_everything_and_is_idempotent(spare: Path) -> None:
    pids = _pids(spare)
    assert len(pids) == 5
    first = local("down", "--state-dir", str(spare))
    assert first.returncode == 0, first.stderr
    assert not spare.exists()
    for name, pid in pids.items():
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split(")")[-1][:3], name
    second = local("down", "--state-dir", str(spare))
    assert second.returncode == 0 and "nothing to stop" in second.stdout
    st = local("status", "--state-dir", str(spare))
    assert st.returncode == 1 and "no local cluster" in st.stdout
