"""`kubepool local up/down/status` on a second, throwaway cluster (own state dir, free ports, no local nodes),
so killing and stopping things never disturbs the shared cluster."""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kubepool.local import components, processes
from kubepool.local.layout import Layout
from support.spare_cluster import local, spare_cluster

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def spare(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with spare_cluster(tmp_path_factory.mktemp("spare")) as state:
        yield state


def _pids(state: Path) -> dict[str, int]:
    lay = Layout.load(state)
    assert lay is not None
    return {n: pid for n in [*components.CONTROL_PLANE, "kwok"] if (pid := processes.read_pid(lay, n))}


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
    while processes.alive(lay, "kube-scheduler"):
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
