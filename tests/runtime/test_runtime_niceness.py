"""Ray's auxiliary processes (dashboard, its modules and agent, log and autoscaler monitors) are reniced so the
GCS, raylets and workers keep the CPU while a job starts; real processes in their own process group."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kubepool.runtime import niceness

SITE = "/venv/lib/python3.11/site-packages"


@pytest.mark.parametrize(("cmdline", "auxiliary"), [
    (f"python -u {SITE}/ray/dashboard/dashboard.py --host=0.0.0.0", True),
    (f"python -u {SITE}/ray/dashboard/agent.py --node-ip-address=10.0.0.2", True),
    ("ray-dashboard-ReportHead-0 (/venv/bin/python)", True),
    (f"python -u {SITE}/ray/_private/log_monitor.py --session-dir=/tmp/ray", True),
    (f"python -u {SITE}/ray/autoscaler/_private/monitor.py --logs-dir=/tmp", True),
    (f"{SITE}/ray/core/src/ray/gcs/gcs_server --gcs_server_port=6379", False),
    (f"{SITE}/ray/core/src/ray/raylet/raylet --node_ip_address=10.0.0.2", False),
    (f"python -u {SITE}/ray/_private/runtime_env/agent/main.py", False),
    ("ray::IDLE", False),
    ("/venv/bin/ray start --head --block", False),
])  # fmt: skip
def test_only_auxiliary_processes_match(cmdline: str, auxiliary: bool) -> None:
    assert niceness.is_auxiliary(cmdline) is auxiliary


# The leader's own command line must not match: the member's path is joined at run time.
LEADER = """
import subprocess, sys, time
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "/ray/" + "dashboard/dashboard.py"])
time.sleep(60)
"""


@pytest.fixture
def leader() -> Iterator[subprocess.Popen[bytes]]:
    """A session leader standing in for `ray start`, which starts one dashboard-like process in its group."""
    proc = subprocess.Popen([sys.executable, "-c", LEADER, "gcs_server"], start_new_session=True)
    try:
        yield proc
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_renices_the_groups_auxiliary_processes_only(leader: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 10
    members: dict[int, str] = {}
    while len(members) < 2 and time.monotonic() < deadline:
        members = dict(niceness.group_members(leader.pid))
        time.sleep(0.05)
    [member] = [pid for pid, cmd in members.items() if pid != leader.pid and "dashboard" in cmd]
    before = os.getpriority(os.PRIO_PROCESS, leader.pid)
    d = niceness.Deprioritizer(leader.pid)
    d.start()
    try:
        while os.getpriority(os.PRIO_PROCESS, member) < niceness.NICENESS and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        d.stop()
    assert os.getpriority(os.PRIO_PROCESS, member) == max(before, niceness.NICENESS)
    assert os.getpriority(os.PRIO_PROCESS, leader.pid) == before


def test_unreadable_or_vanished_entries_are_skipped(tmp_path: Path) -> None:
    (tmp_path / "self").mkdir()  # not a pid
    ok = tmp_path / "41"
    ok.mkdir()
    (ok / "stat").write_text("41 (python (x) y) S 1 7 7 0")
    (ok / "cmdline").write_bytes(b"python\0/ray/dashboard/agent.py\0")
    gone = tmp_path / "42"
    gone.mkdir()  # no stat: exited between the listing and the read
    assert list(niceness.group_members(7, tmp_path)) == [(41, "python /ray/dashboard/agent.py ")]
