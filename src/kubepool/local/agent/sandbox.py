"""The supervisor of one container run, started by the runner as a script (stdlib only, fast to start)
inside fresh mount and UTS namespaces: `unshare --mount --uts --propagation private python sandbox.py SPEC.json`.

It sets the pod's hostname, bind-mounts the container's volumes at their mount paths (only this pod sees them), checks the command
exists, forks the container process (dropping to runAsUser/runAsGroup/groups), becomes a child subreaper so
daemons the container leaves behind stay its descendants, forwards SIGTERM to them all, and when the main
process exits kills what is left (as a container's exit does) and writes `exit.json`:
{"exitCode", "reason", "message", "finishedAt"}. The spec (written by the runner):
{"argv", "env", "cwd", "hostname", "mounts": [{"source", "target", "readOnly", "optional"}], "uid", "gid", "groups",
"exitFile", "logIndex"}. The container's output goes through this process into the log (its stdout), with
the line index `logIndex` beside it.
"""

from __future__ import annotations

import ctypes
import datetime
import json
import os
import shutil
import signal
import sys
import threading
import time
from typing import Any

MS_RDONLY, MS_REMOUNT, MS_BIND, MS_REC = 1, 32, 4096, 16384
PR_SET_CHILD_SUBREAPER = 36
START_ERROR_CODE = 128
RELAY_DRAIN_S = 5.0

_libc = ctypes.CDLL(None, use_errno=True)


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _write_exit(path: str, code: int, reason: str, message: str = "") -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"exitCode": code, "reason": reason, "message": message, "finishedAt": _now()}, f)
    os.replace(tmp, path)


def _mount(source: str, target: str, flags: int) -> None:
    if _libc.mount(source.encode(), target.encode(), None, flags, None) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {source} on {target}: {os.strerror(err)}")


def _bind_all(mounts: list[dict[str, Any]]) -> None:
    # Open every source before mounting anything: a mount (of /tmp, say) may hide a later source.
    opened = [(os.open(m["source"], os.O_PATH), os.path.isdir(m["source"])) for m in mounts]
    for m, (fd, is_dir) in zip(mounts, opened, strict=True):
        target = m["target"]
        try:
            if is_dir:
                os.makedirs(target, exist_ok=True)
            elif not os.path.exists(target):
                os.makedirs(os.path.dirname(target), exist_ok=True)
                open(target, "a").close()
        except PermissionError:
            if m.get("optional"):  # an unprivileged agent cannot create /dev/termination-log: do without
                os.close(fd)
                continue
            raise
        _mount(f"/proc/self/fd/{fd}", target, MS_BIND | MS_REC)
        if m.get("readOnly"):
            _mount("", target, MS_BIND | MS_REMOUNT | MS_RDONLY)
        os.close(fd)


def descendants(root: int) -> list[int]:
    """Every process below `root` (a container may start daemons in new sessions). Lives here because this
    script imports nothing of kubepool; the runner imports it from here."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _signal_all(sig: int) -> None:
    for pid in descendants(os.getpid()):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def _expose(path: str) -> None:
    """Make `path` reachable for an unprivileged container user: an ancestor directory others cannot
    traverse (/root holding a pyenv Python, say) is covered, in this namespace only, by a tmpfs that holds
    just the next component of the path, bind-mounted from the original."""
    parts = [p for p in os.path.realpath(path).split("/") if p]
    for i in range(len(parts) - 1):
        parent = "/" + "/".join(parts[:i])
        if os.stat(parent).st_mode & 0o001:
            continue
        child = os.path.join(parent, parts[i])
        fd = os.open(child, os.O_PATH)
        is_dir = os.path.isdir(child)
        _mount_fs("tmpfs", parent, "mode=0755")
        if is_dir:
            os.mkdir(child)
        else:
            open(child, "a").close()
        _mount(f"/proc/self/fd/{fd}", child, MS_BIND | MS_REC)
        os.close(fd)


def _mount_fs(fstype: str, target: str, options: str) -> None:
    if _libc.mount(fstype.encode(), target.encode(), fstype.encode(), 0, options.encode()) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {fstype} on {target}: {os.strerror(err)}")


def _relay(src: int, index_path: str) -> None:
    """Copy the container's output to the log (this process's stdout), noting in the index file where each
    line starts and when it was read: `<byte offset> <unix ns>` per line, for `--timestamps` and `--since`."""
    at_line_start = True
    with open(index_path, "a") as index:
        while chunk := os.read(src, 65536):
            now = time.time_ns()
            offset = os.fstat(1).st_size
            starts = [0] if at_line_start else []
            pos = chunk.find(b"\n")
            while pos != -1 and pos + 1 < len(chunk):
                starts.append(pos + 1)
                pos = chunk.find(b"\n", pos + 1)
            at_line_start = chunk.endswith(b"\n")
            # Index first: a reader that sees a line in the log finds its time.
            index.write("".join(f"{offset + s} {now}\n" for s in starts))
            index.flush()
            view = memoryview(chunk)
            while view:
                view = view[os.write(1, view) :]


def _exec_child(spec: dict[str, Any], argv: list[str], env: dict[str, str], report: int, output: int) -> None:
    try:
        os.dup2(output, 1)
        os.dup2(output, 2)
        os.close(output)
        if spec.get("groups") is not None or spec.get("gid") is not None:
            os.setgroups([int(g) for g in spec.get("groups") or []])
        if spec.get("gid") is not None:
            os.setgid(int(spec["gid"]))
        if spec.get("uid") is not None:
            os.setuid(int(spec["uid"]))
        if spec.get("cwd"):
            os.chdir(spec["cwd"])
        os.execvpe(argv[0], argv, env)
    except OSError as e:
        # The run dir may not be writable for the container user: the supervisor writes exit.json.
        os.write(report, f"exec: {argv[0]!r}: {e.strerror}".encode())
    os._exit(START_ERROR_CODE)


def main(spec_path: str) -> int:
    with open(spec_path) as f:
        spec: dict[str, Any] = json.load(f)
    argv, env, exit_file = spec["argv"], spec["env"], spec["exitFile"]
    try:
        if spec.get("uid") not in (None, 0):
            for path in (sys.executable, sys.base_prefix, sys.prefix):
                _expose(path)
        if spec.get("hostname"):
            name = spec["hostname"].encode()
            if _libc.sethostname(name, len(name)) != 0:
                raise OSError(ctypes.get_errno(), "sethostname")
        _bind_all(spec.get("mounts") or [])
        if spec.get("cwd"):
            os.makedirs(spec["cwd"], exist_ok=True)
    except OSError as e:
        _write_exit(exit_file, START_ERROR_CODE, "StartError", f"mounting volumes: {e}")
        return START_ERROR_CODE
    found = (
        os.access(argv[0], os.X_OK)
        if "/" in argv[0]
        else shutil.which(argv[0], path=env.get("PATH")) is not None
    )
    if not found:
        msg = f'exec: "{argv[0]}": executable file not found in $PATH' if "/" not in argv[0] else f'exec: "{argv[0]}": no such file or not executable'  # fmt: skip
        _write_exit(exit_file, START_ERROR_CODE, "StartError", msg)
        return START_ERROR_CODE
    _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    report_r, report_w = os.pipe()  # close-on-exec: EOF without data means the exec worked
    output_r, output_w = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(report_r)
        os.close(output_r)
        _exec_child(spec, argv, env, report_w, output_w)
    signal.signal(signal.SIGTERM, lambda *_: _signal_all(signal.SIGTERM))
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.close(report_w)
    os.close(output_w)
    relay = threading.Thread(target=_relay, args=(output_r, spec["logIndex"]))
    relay.start()
    exec_error = os.read(report_r, 4096).decode("utf-8", "replace")
    os.close(report_r)
    status = 0
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            break
        except InterruptedError:
            continue
        if pid == child:
            break
    # What the main process left behind dies with the container.
    _signal_all(signal.SIGKILL)
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            break
    relay.join(RELAY_DRAIN_S)  # every writer is gone: the relay reaches EOF
    if exec_error:
        _write_exit(exit_file, START_ERROR_CODE, "StartError", exec_error)
        return START_ERROR_CODE
    code = os.waitstatus_to_exitcode(status)
    code = 128 - code if code < 0 else code
    reason = "Completed" if code == 0 else "Error"
    _write_exit(exit_file, code, reason)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
