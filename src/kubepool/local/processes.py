"""The cluster's processes: how one is started, told healthy, stopped, and brought up with others (`ensure`).

Each process leads its own process group and is known by its pid file, "<pid> <start time in ticks>", so a
recycled pid is never taken for it (nor signalled)."""

from __future__ import annotations

import os
import signal
import ssl
import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import httpx

from kubepool.local.flags import etcd_url
from kubepool.local.layout import ClusterError, Layout, Log


@dataclass(frozen=True)
class Component:
    name: str
    argv: list[str]
    health_url: str | None  # None: alive is healthy (its readiness shows elsewhere, e.g. Node Ready)
    startup_timeout: float = 60.0
    # A running process whose command line differs (new flags or binaries) is restarted by `up`. Not for
    # agents: restarting one restarts its pods, which only the agent's owner should decide.
    restart_on_change: bool = True


def _ssl_context(lay: Layout, url: str) -> ssl.SSLContext | bool:
    if not url.startswith("https://"):
        return True
    for server, client in ((lay.apiserver_url, "admin"), (etcd_url(lay), "apiserver-etcd-client")):
        if url.startswith(server):
            ctx = ssl.create_default_context(cafile=str(lay.pki.ca_cert))
            ctx.load_cert_chain(str(lay.pki.cert(client)), str(lay.pki.key(client)))
            return ctx
    return False  # kcm/scheduler serve a self-signed cert on loopback; /healthz is all we ask of them


def healthy(lay: Layout, comp: Component) -> bool:
    if not alive(lay, comp.name):
        return False
    if comp.health_url is None:
        return True
    try:
        r = httpx.get(comp.health_url, verify=_ssl_context(lay, comp.health_url), timeout=2.0)
    except (httpx.HTTPError, ssl.SSLError, OSError):
        return False
    return r.status_code == 200


def _read_pid_file(lay: Layout, name: str) -> tuple[int, int] | None:
    """(pid, start time in clock ticks) from `pids/<name>.pid`."""
    try:
        pid, ticks = lay.pid(name).read_text().split()
        return int(pid), int(ticks)
    except (FileNotFoundError, ValueError):
        return None


def read_pid(lay: Layout, name: str) -> int | None:
    entry = _read_pid_file(lay, name)
    return entry[0] if entry else None


def _start_ticks(pid: int) -> int | None:
    """The process's start time (/proc/<pid>/stat field 22), None when it is gone or a zombie."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] in ("Z", "X") else int(fields[19])


def alive(lay: Layout, name: str) -> bool:
    """The process `up` started for `name` still runs: pid and start time match, so a recycled pid never
    counts (and is never signalled)."""
    entry = _read_pid_file(lay, name)
    return entry is not None and _start_ticks(entry[0]) == entry[1]


def running_argv(lay: Layout, name: str) -> list[str] | None:
    pid = read_pid(lay, name)
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes() if pid is not None else b""
    except OSError:
        return None
    return raw.decode(errors="replace").split("\0")[:-1] or None


def log_tail(lay: Layout, name: str, lines: int = 20) -> str:
    try:
        text = lay.log(name).read_text(errors="replace")
    except FileNotFoundError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


def start(lay: Layout, comp: Component) -> subprocess.Popen[bytes]:
    lay.log(comp.name).parent.mkdir(parents=True, exist_ok=True)
    lay.pid(comp.name).parent.mkdir(parents=True, exist_ok=True)
    with lay.log(comp.name).open("ab") as log:
        log.write(f"\n==== {time.strftime('%H:%M:%S')} start: {' '.join(comp.argv)}\n".encode())
        log.flush()
        # A new session makes the process its own group leader: `down` signals the whole group, and the
        # process survives the `up` command that started it.
        proc = subprocess.Popen(
            comp.argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            cwd=lay.state_dir, start_new_session=True,
        )
    ticks = _start_ticks(proc.pid)
    tmp = lay.pid(comp.name).with_suffix(".tmp")
    tmp.write_text(f"{proc.pid} {ticks if ticks is not None else -1}\n")
    tmp.replace(lay.pid(comp.name))  # atomic: a reader never sees an empty pid file
    return proc


def stop(lay: Layout, name: str, timeout: float = 10.0) -> bool:
    """Stop the process group of `name` if its process is still the one `up` started; True when it was."""
    ours = alive(lay, name)
    pid = read_pid(lay, name)
    lay.pid(name).unlink(missing_ok=True)
    if pid is None or not ours:
        return False
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and _start_ticks(pid) is not None:
        time.sleep(0.1)
    try:
        os.killpg(pid, signal.SIGKILL)  # stragglers in the group, or a process that ignored SIGTERM
    except ProcessLookupError:
        pass
    return True


def wait_healthy(lay: Layout, comps: Iterable[Component]) -> list[Component]:
    """Wait until each component is healthy or has died or timed out; return the ones that failed."""
    pending = list(comps)
    start_t = time.monotonic()
    while pending:
        pending = [c for c in pending if not healthy(lay, c)]
        if not pending:
            break
        failed = [c for c in pending if not alive(lay, c.name) or time.monotonic() - start_t > c.startup_timeout]
        if failed:
            return failed
        time.sleep(0.2)
    return []


def _exit_reason(proc: subprocess.Popen[bytes] | None) -> str:
    code = None if proc is None else proc.poll()
    if code is None:
        return "still running"
    return f"killed by signal {-code}" if code < 0 else f"exited with code {code}"


def ensure(lay: Layout, comps: list[Component], say: Log) -> None:
    """Bring the components up together: reuse healthy ones, wait for starting ones, restart broken ones."""
    procs: dict[str, subprocess.Popen[bytes]] = {}  # what this call started, to tell how it died
    for c in comps:
        # A changed command line restarts the process healthy or not: an apiserver still pointed at the old
        # etcd flags is never healthy again, and waiting for it would only time out.
        if c.restart_on_change and alive(lay, c.name) and running_argv(lay, c.name) not in (None, c.argv):
            say(f"  {c.name}: command line changed, restarting")
            stop(lay, c.name)
            procs[c.name] = start(lay, c)
        elif healthy(lay, c):
            say(f"  {c.name}: running (reused)")
        elif alive(lay, c.name):
            say(f"  {c.name}: running, waiting for it to become healthy")
        else:
            procs[c.name] = start(lay, c)
            say(f"  {c.name}: started")
    for attempt in (1, 2):
        failed = wait_healthy(lay, comps)
        if not failed:
            return
        if attempt == 2:
            f = failed[0]
            raise ClusterError(
                f"{f.name} did not become healthy ({_exit_reason(procs.get(f.name))}); "
                f"last lines of {lay.log(f.name)}:\n{log_tail(lay, f.name)}"
            )
        for c in failed:
            say(f"  {c.name}: not healthy ({_exit_reason(procs.get(c.name))}), restarting")
            stop(lay, c.name)
            procs[c.name] = start(lay, c)

