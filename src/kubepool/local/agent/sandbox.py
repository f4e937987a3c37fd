"""The supervisor of one container run, started by the runner as a script (stdlib only, fast to start)
inside fresh mount and UTS namespaces: `unshare --mount --uts --propagation private python sandbox.py SPEC.json`.

It sets the pod's hostname, bind-mounts the container's volumes at their mount paths (only this pod sees them), checks the command
exists, forks the container process (dropping to runAsUser/runAsGroup/groups), becomes a child subreaper so
daemons the container leaves behind stay its descendants, forwards SIGTERM to them all, and when the main
process exits kills what is left (as a container's exit does) and writes `exit.json`:
{"exitCode", "reason", "message", "finishedAt"}. The spec (written by the runner):
{"argv", "env", "cwd", "hostname", "mounts": [{"source", "target", "readOnly", "optional"}], "keepPaths", "uid",
"gid", "groups", "exitFile", "logIndex"}. The container's output goes through this process into the log (its stdout), with
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


class RunFiles:
    """The run dir's files the supervisor writes, opened before any mount can hide the dir (a state dir
    under /tmp is hidden by the pod's own /tmp)."""

    def __init__(self, exit_file: str, index_path: str) -> None:
        self.dir_fd = os.open(os.path.dirname(exit_file), os.O_RDONLY | os.O_DIRECTORY)
        self.exit_name = os.path.basename(exit_file)
        self.index = open(index_path, "a")  # noqa: SIM115 - the relay thread writes it until the end

    def write_exit(self, code: int, reason: str, message: str = "") -> None:
        tmp = self.exit_name + ".tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644, dir_fd=self.dir_fd)
        with os.fdopen(fd, "w") as f:
            json.dump({"exitCode": code, "reason": reason, "message": message, "finishedAt": _now()}, f)
        os.replace(tmp, self.exit_name, src_dir_fd=self.dir_fd, dst_dir_fd=self.dir_fd)


def _mount(source: str, target: str, flags: int) -> None:
    if _libc.mount(source.encode(), target.encode(), None, flags, None) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {source} on {target}: {os.strerror(err)}")


def _open_sources(mounts: list[dict[str, Any]]) -> list[tuple[int, bool]]:
    """An O_PATH fd for every mount source, taken before anything is mounted: a mount (of /tmp, say) or an
    exposing tmpfs (over /root) may hide a later source."""
    return [(os.open(m["source"], os.O_PATH), os.path.isdir(m["source"])) for m in mounts]


def _bind_all(mounts: list[dict[str, Any]], opened: list[tuple[int, bool]]) -> None:
    for m, (fd, is_dir) in zip(mounts, opened, strict=True):
        target = m["target"]
        try:
            _mount_point(target, is_dir)
        except PermissionError:
            if m.get("optional"):  # an unprivileged agent cannot create /dev/termination-log: do without
                os.close(fd)
                continue
            raise
        _mount(f"/proc/self/fd/{fd}", target, MS_BIND | MS_REC)
        if m.get("readOnly"):
            _mount("", target, MS_BIND | MS_REMOUNT | MS_RDONLY)
        os.close(fd)


def _inside(path: str, top: str) -> bool:
    """`path` lies strictly below `top`."""
    return path.startswith(top.rstrip("/") + "/")


def keep_roots(paths: list[str]) -> list[str]:
    """The smallest set of absolute paths that covers `paths` (a path inside another is dropped)."""
    roots: list[str] = []
    for p in sorted({os.path.normpath(x) for x in paths}, key=len):
        if not any(p == r or _inside(p, r) for r in roots):
            roots.append(p)
    return sorted(roots)


def hidden_by_mounts(paths: list[str], targets: list[str]) -> list[str]:
    """The paths a mount at one of `targets` would hide. A mount exactly at a path replaces it on purpose."""
    return [p for p in paths if any(_inside(p, os.path.normpath(t)) for t in targets)]


def _expose_all(paths: list[str]) -> None:
    """Make `paths` reachable for an unprivileged container user. Each ancestor directory that others cannot
    traverse (/root holding a pyenv Python and a clone, say) is covered, in this namespace only, by one tmpfs
    holding just the children that lead to `paths`, each bind-mounted from the original. Top-down, so a
    covered directory's children are opened through the mounts made above them."""
    split = [[c for c in p.split("/") if c] for p in paths]
    for depth in range(max((len(s) for s in split), default=0)):
        leads: dict[str, set[str]] = {}
        for parts in split:
            if len(parts) > depth:
                leads.setdefault("/" + "/".join(parts[:depth]), set()).add(parts[depth])
        for parent, children in sorted(leads.items()):
            if os.stat(parent).st_mode & 0o001:
                continue
            opened = [(c, os.open(os.path.join(parent, c), os.O_PATH)) for c in sorted(children)]
            kinds = [os.path.isdir(f"/proc/self/fd/{fd}") for _, fd in opened]
            _mount_fs("tmpfs", parent, "mode=0755")
            for (child, fd), is_dir in zip(opened, kinds, strict=True):
                _mount_at(fd, os.path.join(parent, child), is_dir)


def _mount_point(target: str, is_dir: bool) -> None:
    if is_dir:
        os.makedirs(target, exist_ok=True)
    elif not os.path.exists(target):
        os.makedirs(os.path.dirname(target), exist_ok=True)
        open(target, "a").close()


def _mount_at(fd: int, target: str, is_dir: bool) -> None:
    """Bind what `fd` names at `target`, creating the mount point (and its parents) first."""
    _mount_point(target, is_dir)
    _mount(f"/proc/self/fd/{fd}", target, MS_BIND | MS_REC)
    os.close(fd)


def _prepare_view(spec: dict[str, Any]) -> None:
    """The container's view of the host: its volumes at their mount paths, and the host paths it runs from
    (`keepPaths`: the Python environment, the source it imports, its home) where they are on the host, even
    when they sit under a volume's mount path (a clone in /tmp under the pod's own /tmp) or below a directory
    its user cannot traverse (a clone or pyenv in /root)."""
    mounts = spec.get("mounts") or []
    wanted = [*(spec.get("keepPaths") or []), sys.executable, sys.base_prefix, sys.prefix]  # the Python it runs
    keep = keep_roots([os.path.realpath(p) for p in wanted if os.path.exists(p)])
    sources = _open_sources(mounts)
    if spec.get("uid") not in (None, 0):
        _expose_all(keep)
    hidden = hidden_by_mounts(keep, [m["target"] for m in mounts])
    again = [(p, os.open(p, os.O_PATH), os.path.isdir(p)) for p in hidden]
    _bind_all(mounts, sources)
    for path, fd, is_dir in again:
        try:
            _mount_at(fd, path, is_dir)
        except OSError as e:
            top = max((m["target"] for m in mounts if _inside(path, os.path.normpath(m["target"]))), key=len)
            raise OSError(e.errno, f"the volume at {top} hides {path}, which this local node's pods run from, "
                                   f"and {path} cannot be shown inside it: {e.strerror}") from e


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


def _mount_fs(fstype: str, target: str, options: str) -> None:
    if _libc.mount(fstype.encode(), target.encode(), fstype.encode(), 0, options.encode()) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {fstype} on {target}: {os.strerror(err)}")


def _relay(src: int, index: Any) -> None:
    """Copy the container's output to the log (this process's stdout), noting in the index file where each
    line starts and when it was read: `<byte offset> <unix ns>` per line, for `--timestamps` and `--since`."""
    at_line_start = True
    with index:
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
    argv, env = spec["argv"], spec["env"]
    files = RunFiles(spec["exitFile"], spec["logIndex"])
    try:
        if spec.get("hostname"):
            name = spec["hostname"].encode()
            if _libc.sethostname(name, len(name)) != 0:
                raise OSError(ctypes.get_errno(), "sethostname")
        _prepare_view(spec)
        if spec.get("cwd"):
            os.makedirs(spec["cwd"], exist_ok=True)
    except OSError as e:
        files.write_exit(START_ERROR_CODE, "StartError", f"mounting volumes: {e}")
        return START_ERROR_CODE
    found = (
        os.access(argv[0], os.X_OK)
        if "/" in argv[0]
        else shutil.which(argv[0], path=env.get("PATH")) is not None
    )
    if not found:
        msg = f'exec: "{argv[0]}": executable file not found in $PATH' if "/" not in argv[0] else f'exec: "{argv[0]}": no such file or not executable'  # fmt: skip
        files.write_exit(START_ERROR_CODE, "StartError", msg)
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
    relay = threading.Thread(target=_relay, args=(output_r, files.index))
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
        files.write_exit(START_ERROR_CODE, "StartError", exec_error)
        return START_ERROR_CODE
    code = os.waitstatus_to_exitcode(status)
    code = 128 - code if code < 0 else code
    reason = "Completed" if code == 0 else "Error"
    files.write_exit(code, reason)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
