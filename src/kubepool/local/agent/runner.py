"""Container processes: start one run of a container under the sandbox supervisor, wait for it, stop it
(SIGTERM, grace, SIGKILL of its process group and every descendant) and find runs again after an agent
restart. A run's files live in its run dir `containers/<name>/<restartCount>/`: `spec.json`, `log`
(stdout+stderr), `log.idx` (when each log line was written), `pid` ("<pid> <start ticks> <startedAt>"),
`exit.json` (written by the sandbox), `termination-log`."""

from __future__ import annotations

import asyncio
import datetime
import json
import os
import shutil
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubepool.local.agent.sandbox import descendants

SANDBOX = Path(__file__).with_name("sandbox.py")
SPEC, LOG, LOG_INDEX, PID, EXIT = "spec.json", "log", "log.idx", "pid", "exit.json"
TERMINATION_LOG, AGENT_STOPPED = "termination-log", "agent-stopped"
POLL_S = 0.25


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _start_ticks(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] == "Z" else int(fields[19])


def _kill(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


@dataclass
class Run:
    """One run of a container: the sandbox supervisor's pid (also its process group id)."""

    dir: Path
    pid: int
    ticks: int | None
    started_at: str
    proc: asyncio.subprocess.Process | None = None

    def alive(self) -> bool:
        if self.proc is not None:
            return self.proc.returncode is None
        return self.ticks is not None and _start_ticks(self.pid) == self.ticks

    async def wait(self) -> dict[str, Any]:
        """The run's exit: {"exitCode", "reason", "message", "finishedAt"}."""
        if self.proc is not None:
            await self.proc.wait()
        else:
            while self.alive():
                await asyncio.sleep(POLL_S)
        return self.exit_info()

    def exit_info(self) -> dict[str, Any]:
        path = self.dir / EXIT
        if path.exists():
            info: dict[str, Any] = json.loads(path.read_text())
            return info
        # The supervisor itself was killed (SIGKILL after the grace period, or by someone else).
        return {"exitCode": 137, "reason": "Error", "message": "", "finishedAt": now()}

    async def stop(self, grace_s: float) -> None:
        """SIGTERM to the container, SIGKILL to all of it after `grace_s`."""
        if not self.alive():
            return
        # The supervisor forwards SIGTERM once to every process of the container, daemons included.
        _kill([self.pid], signal.SIGTERM)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(grace_s, 0)
        while self.alive() and loop.time() < deadline:
            await asyncio.sleep(0.1)
        if self.alive():
            _kill([*descendants(self.pid), -self.pid], signal.SIGKILL)
            _kill([self.pid], signal.SIGKILL)
        if self.proc is not None:
            await self.proc.wait()
        else:
            while self.alive():
                await asyncio.sleep(0.05)


def sandbox_argv(spec_path: Path) -> list[str]:
    """The supervisor's command: in its own mount and UTS namespaces (a user namespace too when not root)."""
    unshare = shutil.which("unshare") or "unshare"
    ns = ["--mount", "--uts", "--propagation", "private"] if os.geteuid() == 0 else ["--user", "--map-root-user", "--mount", "--uts", "--propagation", "private"]  # fmt: skip
    return [unshare, *ns, "--", sys.executable, "-I", str(SANDBOX), str(spec_path)]


async def start(run_dir: Path, spec: dict[str, Any]) -> Run:
    """Start one run. `spec` is the sandbox spec minus `exitFile` (the runner owns the run dir's files)."""
    # A run dir that exists was stopped with its agent: start over, appending to its log.
    run_dir.mkdir(parents=True, exist_ok=True)
    for stale in (PID, EXIT, TERMINATION_LOG, AGENT_STOPPED):
        (run_dir / stale).unlink(missing_ok=True)
    message = run_dir / TERMINATION_LOG
    message.touch()
    message.chmod(0o666)  # the container may run as any user
    spec = {**spec, "exitFile": str(run_dir / EXIT), "logIndex": str(run_dir / LOG_INDEX)}
    (run_dir / SPEC).write_text(json.dumps(spec))
    with open(run_dir / LOG, "ab") as log:
        proc = await asyncio.create_subprocess_exec(
            *sandbox_argv(run_dir / SPEC),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=log,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,  # its own process group: stopping the pod kills the group
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        )
    ticks = _start_ticks(proc.pid)
    started = now()
    (run_dir / PID).write_text(f"{proc.pid} {ticks} {started}")
    return Run(dir=run_dir, pid=proc.pid, ticks=ticks, started_at=started, proc=proc)


def find(run_dir: Path) -> Run | None:
    """The run recorded in `run_dir` (alive or not), from a previous agent process."""
    try:
        pid_s, ticks_s, started = (run_dir / PID).read_text().split()
    except (OSError, ValueError):
        return None
    return Run(
        dir=run_dir, pid=int(pid_s), ticks=None if ticks_s == "None" else int(ticks_s), started_at=started
    )


def latest_run(container_dir: Path) -> tuple[int, Path] | None:
    """(restartCount, run dir) of the newest run of a container."""
    runs = (
        [int(p.name) for p in container_dir.glob("*") if p.name.isdigit()] if container_dir.is_dir() else []
    )
    if not runs:
        return None
    n = max(runs)
    return n, container_dir / str(n)
