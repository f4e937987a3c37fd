"""Ray's auxiliary processes yield the CPU to its critical path. A node's `ray start` also starts the
dashboard (and its modules and per-node agent), the log monitor and the autoscaler monitor; on a few cores they
compete with the GCS, the raylets and the joining workers, and the dashboard alone cost ~5 s of a 3-instance
job's start on 2 shared cores (bench/README.md, P3). Each is reniced as it appears; nothing is stopped, and the
GCS, raylets, runtime-env agent and Ray workers keep their priority. Raising one's own processes' niceness needs
no privilege."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

# Substrings of an auxiliary process's command line (or its process title, which Ray sets for dashboard modules).
AUXILIARY = ("/ray/dashboard/", "ray-dashboard-", "/ray/_private/log_monitor.py", "/ray/autoscaler/_private/monitor.py")
NICENESS = 10
SCAN_SECONDS = 0.1
PROC = Path("/proc")


def is_auxiliary(cmdline: str) -> bool:
    return any(marker in cmdline for marker in AUXILIARY)


def group_members(pgid: int, proc: Path = PROC) -> Iterator[tuple[int, str]]:
    """(pid, command line) of the live processes in process group `pgid`."""
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            # pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses, so split after the last ")".
            if int(stat.rsplit(")", 1)[1].split()[2]) != pgid:
                continue
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile, or not ours to read
        yield int(entry.name), cmdline


class Deprioritizer:
    """Renices the auxiliary processes of one process group (a node's `ray start` session) while it runs, until
    `stop`: Ray's dashboard modules appear after the node is up."""

    def __init__(self, pgid: int) -> None:
        self.pgid = pgid
        self.done: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ray-niceness", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def scan(self) -> None:
        for pid, cmdline in group_members(self.pgid):
            if pid in self.done or not is_auxiliary(cmdline):
                continue
            self.done.add(pid)
            try:
                if os.getpriority(os.PRIO_PROCESS, pid) < NICENESS:
                    os.setpriority(os.PRIO_PROCESS, pid, NICENESS)
            except OSError:
                pass  # exited meanwhile

    def _run(self) -> None:
        while not self._stop.wait(SCAN_SECONDS):
            self.scan()
