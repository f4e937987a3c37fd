"""Mutation check of kubepool's protections (`make mutants`; the unit level also runs in `make test` through
tests/operator/unit/test_mutants.py).

Each entry of hack/mutants/mutants.toml names one protection: a file, the exact text of the check, a text that
disables it, and the tests that must fail once it is disabled. For each entry this copies the repository (its
tracked and not-ignored files, as they are in the working tree) to a scratch directory once, writes the mutated
file there, runs the entry's tests against the copy (PYTHONPATH: the copy's src first), and puts the file back.
An entry with `in_tree = true` is also written into the repository itself
for its run (code that the local cluster's pods run: the node agents import kubepool from the repository), and
put back afterwards, also on Ctrl-C: leave the tree alone while `make mutants` runs. A mutation whose tests still pass survived: the protection is untested. The run fails when any survives, when
an entry's old text is not found exactly once (a stale entry), or when its tests do not pass unmutated.

    .venv/bin/python hack/mutants/run.py                  # every entry
    .venv/bin/python hack/mutants/run.py --level unit     # those that need no cluster
    .venv/bin/python hack/mutants/run.py --only NAME ...  # some entries
"""

from __future__ import annotations

import argparse
import importlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIST = ROOT / "hack" / "mutants" / "mutants.toml"
LEVELS = ("unit", "cluster")


@dataclass(frozen=True)
class Mutant:
    name: str
    file: str
    old: str
    new: str
    tests: tuple[str, ...]
    level: str
    why: str = ""
    in_tree: bool = False  # also mutate the repository itself: code the local nodes' pods run (they import kubepool from it)


def load(path: Path = LIST) -> list[Mutant]:
    """The entries, checked: unique names, a known level, tests named, old != new."""
    raw = tomllib.loads(path.read_text())
    out: list[Mutant] = []
    for entry in raw.get("mutant", []):
        m = Mutant(name=entry["name"], file=entry["file"], old=entry["old"], new=entry["new"],
                   tests=tuple(entry["tests"]), level=entry.get("level", "unit"), why=entry.get("why", ""),
                   in_tree=bool(entry.get("in_tree", False)))
        if m.level not in LEVELS or not m.tests or m.old == m.new:
            raise SystemExit(f"mutants.toml: entry {m.name!r}: level must be one of {LEVELS}, tests non-empty, "
                             "new different from old")
        out.append(m)
    names = [m.name for m in out]
    if len(set(names)) != len(names):
        raise SystemExit(f"mutants.toml: duplicate names {sorted({n for n in names if names.count(n) > 1})}")
    return out


def stale(m: Mutant, root: Path = ROOT) -> str:
    """Why the entry no longer applies to the tree ('' when its old text occurs exactly once)."""
    path = root / m.file
    if not path.is_file():
        return f"{m.file} does not exist"
    n = path.read_text().count(m.old)
    return "" if n == 1 else f"its old text occurs {n} times in {m.file} (must be exactly once)"


def copy_tree(dest: Path) -> None:
    """The working tree's tracked and not-ignored files (not git worktree: the copy holds uncommitted edits)."""
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           check=True, capture_output=True).stdout.decode().split("\0")
    for rel in filter(None, files):
        src = ROOT / rel
        if src.is_file() and not src.is_symlink():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    # The package's metadata (ignored, from the editable install): kubepool's __version__ reads it, and tests
    # that run a bare interpreter on the copy's src (tests/runtime/test_runtime_pip.py) find it there.
    for info in (ROOT / "src").glob("*.egg-info"):
        shutil.copytree(info, dest / "src" / info.name, dirs_exist_ok=True)


PYTEST_ARGS = ("-x", "-q", "-p", "no:cacheprovider", "-p", "no:randomly")
# Third-party packages the unit-level entries' tests import: loaded once here, before the forks, so each forked
# run starts with them (most of a run's second). Never kubepool's modules or the tests': each copy brings its own.
PRELOAD = ("pytest", "_pytest.python", "pytest_asyncio", "pytest_timeout", "xdist", "anyio", "pydantic", "kopf",
           "lightkube", "httpx", "aiohttp", "orjson", "yaml", "jsonpatch", "prometheus_client", "click", "rich",
           "cloudpickle", "boto3", "botocore", "moto", "responses", "flask", "sagemaker_training")


def _env(copy: Path) -> dict[str, str]:
    env = {"PYTHONPATH": os.pathsep.join([str(copy / "src"), str(copy / "tests")]), "PYTHONDONTWRITEBYTECODE": "1"}
    # The copy's cluster tests use the repository's test cluster, not a second one.
    env["KUBEPOOL_TEST_STATE_DIR"] = os.environ.get("KUBEPOOL_TEST_STATE_DIR", str(ROOT / ".kubepool-test"))
    return env


def pytest(copy: Path, tests: tuple[str, ...], timeout: float) -> tuple[int, str]:
    try:
        proc = subprocess.run([sys.executable, "-m", "pytest", *PYTEST_ARGS, *tests], cwd=copy,
                              env=os.environ | _env(copy), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return 124, f"timed out after {timeout:.0f}s"
    return proc.returncode, proc.stdout[-3000:] + proc.stderr[-2000:]


def preload() -> None:
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a package missing here is imported (or missed) by the run itself
            pass


def _forked_child(copy: Path, tests: tuple[str, ...], out: Path) -> None:
    """In the forked child: the same run as `pytest` above, in this process's already loaded interpreter."""
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.SIG_DFL)
    rc = 3
    try:
        os.chdir(copy)
        # Bytecode is written (unlike `pytest` above): `_Mutated` gives every mutated file an mtime of its own, so
        # no run reads another's compiled modules.
        os.environ.update({k: v for k, v in _env(copy).items() if k != "PYTHONDONTWRITEBYTECODE"})
        os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
        sys.dont_write_bytecode = False
        # As `python -m pytest` in the copy: the copy's directory, src and tests first, this script's own not at all.
        here = str(Path(__file__).resolve().parent)
        sys.path[:] = [str(copy), str(copy / "src"), str(copy / "tests"), *(p for p in sys.path if p not in ("", here))]
        fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        import pytest as _pytest_main

        rc = int(_pytest_main.main([*PYTEST_ARGS, *tests]))
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(rc)


def _fork(copy: Path, tests: tuple[str, ...]) -> int:
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        _forked_child(copy, tests, copy / ".mutant-out")
    return pid


def _wait(pid: int, started: float, timeout: float) -> int:
    """The forked run's exit code; 124 once it outlived `timeout` (killed)."""
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() - started > timeout:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return 124
        time.sleep(0.05)


def _verdict(m: Mutant, rc: int, out: str, took: float) -> str:
    if rc == 1:
        r = f"killed ({took:.0f}s)"
    elif rc == 0:
        r = f"SURVIVED ({took:.0f}s): {', '.join(m.tests)} passed with it"
    else:  # 2: collection error, 4/5: tests not found, 124: timeout
        r = f"ERROR rc={rc} ({took:.0f}s): {out[-1500:]}"
    print(f"[mutants {time.strftime('%H:%M:%S')}] {m.name}: {r.splitlines()[0]}", flush=True)
    return r


class _Mutated:
    """`m` written into `path` for one run, then the original put back with its own mtime. The mutated file gets an
    mtime no other run used: Python's and pytest's compiled files are checked by mtime and size, and a mutation
    can keep the size, so each run compiles the module it reads."""

    runs = 0

    def __init__(self, path: Path, m: Mutant) -> None:
        self.path, self.text, self.stat = path, path.read_text(), path.stat()
        _Mutated.runs += 1
        path.write_text(self.text.replace(m.old, m.new))
        t = self.stat.st_mtime + 3600 + _Mutated.runs
        os.utime(path, (t, t))

    def restore(self) -> None:
        self.path.write_text(self.text)
        os.utime(self.path, ns=(self.stat.st_atime_ns, self.stat.st_mtime_ns))


def forked(mutants: list[Mutant], copies: list[Path], timeout: float) -> dict[str, str]:
    """Unit-level entries, each run in a child forked from this process (`preload` ran, the copies' modules
    compiled by the baseline run): as many at a time as there are copies. No threads: a fork copies only the thread
    that calls it."""
    result: dict[str, str] = {}
    todo = list(mutants)
    free = list(copies)
    running: dict[int, tuple[Mutant, Path, _Mutated, float]] = {}  # pid -> entry, copy, its change, started
    try:
        while todo or running:
            while todo and free:
                m, c = todo.pop(0), free.pop(0)
                change = _Mutated(c / m.file, m)
                running[_fork(c, m.tests)] = (m, c, change, time.monotonic())
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                now = time.monotonic()
                for p, (_m, _c, _t, started) in running.items():
                    if now - started > timeout:
                        os.kill(p, signal.SIGKILL)
                time.sleep(0.05)
                continue
            m, c, change, started = running.pop(pid)
            change.restore()
            took = time.monotonic() - started
            killed = os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL and took > timeout
            out = f"timed out after {timeout:.0f}s" if killed else (c / ".mutant-out").read_text(errors="replace")
            result[m.name] = _verdict(m, 124 if killed else os.waitstatus_to_exitcode(status), out[-5000:], took)
            free.append(c)
    finally:
        for p in running:
            os.kill(p, signal.SIGKILL)
        for p, (_m, _c, change, _t) in running.items():
            os.waitpid(p, 0)
            change.restore()
    return result


def restore_crds() -> None:
    """The tests applied the copy's mutated CRD to the shared test cluster: the repository's goes back."""
    kubectl = Path.home() / ".cache" / "kubepool"
    found = sorted(kubectl.glob("k8s/*/bin/kubectl"))
    env = dict(os.environ, KUBECONFIG=str(Path(os.environ.get("KUBEPOOL_TEST_STATE_DIR", ROOT / ".kubepool-test"))
                                          / "kubeconfig"))
    if found:
        subprocess.run([str(found[-1]), "apply", "--server-side", "--force-conflicts", "-f", str(ROOT / "crds")],
                       env=env, capture_output=True, timeout=120)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # the finally blocks put every mutated file back


def _one(m: Mutant, copy: Path, timeout: float) -> str:
    """Apply `m` in `copy` (and in the repository too when `in_tree`), run its tests, put the files back."""
    paths = [copy / m.file, *([ROOT / m.file] if m.in_tree else [])]
    originals = [p.read_text() for p in paths]
    started = time.monotonic()
    try:
        for p, text in zip(paths, originals, strict=True):
            p.write_text(text.replace(m.old, m.new))
        rc, out = pytest(copy, m.tests, timeout)
    finally:
        for p, text in zip(paths, originals, strict=True):
            p.write_text(text)
        if m.level == "cluster" and m.file.startswith("crds/"):
            restore_crds()
    return _verdict(m, rc, out, time.monotonic() - started)


def check(mutants: list[Mutant], timeout: float, jobs: int = 1) -> dict[str, str]:
    """name -> 'killed' | 'SURVIVED' | 'STALE: ...' | 'BASELINE FAILED: ...' | 'ERROR rc=N: ...'. Unit-level
    entries run `jobs` at a time, each in its own copy; cluster-level ones one at a time (they share a cluster)."""
    result: dict[str, str] = {}
    todo = []
    for m in mutants:
        why = stale(m)
        if why:
            result[m.name] = f"STALE: {why}"
        else:
            todo.append(m)
    if not todo:
        return result
    with tempfile.TemporaryDirectory(prefix="kubepool-mutants-") as tmp:
        copies = [Path(tmp) / str(i) for i in range(max(1, jobs))]
        copy_tree(copies[0])
        preload()
        # The tests as they are must pass, else a failure under a mutation proves nothing. The unit level's run is
        # forked as its entries' runs are, and compiles the copy's modules for them (copied with it below).
        for level in LEVELS:
            tests = tuple(dict.fromkeys(t for m in todo if m.level == level for t in m.tests))
            if not tests:
                continue
            if level == "unit":
                rc = _wait(_fork(copies[0], tests), time.monotonic(), timeout * 3)
                out = (copies[0] / ".mutant-out").read_text(errors="replace")
            else:
                rc, out = pytest(copies[0], tests, timeout * 3)
            if rc != 0:
                for m in todo:
                    if m.level == level:
                        result[m.name] = f"BASELINE FAILED (rc={rc}): {out[-1500:]}"
        for extra in copies[1:]:
            shutil.copytree(copies[0], extra)
        unit = [m for m in todo if m.name not in result and m.level == "unit" and not m.in_tree]
        result.update(forked(unit, copies, timeout))
        for m in todo:
            if m.name not in result:
                result[m.name] = _one(m, copies[0], timeout)
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--level", choices=(*LEVELS, "all"), default="all")
    ap.add_argument("--only", nargs="*", default=None, help="entry names")
    ap.add_argument("--timeout", type=float, default=900, help="seconds per mutant's test run")
    ap.add_argument("--list", action="store_true", help="print the entries and exit")
    ap.add_argument("--file", type=Path, default=LIST, help="another list of entries (trying new ones)")
    ap.add_argument("--jobs", type=int, default=2, help="unit-level entries run this many at a time")
    args = ap.parse_args(argv)
    mutants = [m for m in load(args.file) if args.level in ("all", m.level) and (args.only is None or m.name in args.only)]
    if args.only:
        unknown = set(args.only) - {m.name for m in mutants}
        if unknown:
            print(f"unknown entries: {sorted(unknown)}", file=sys.stderr)
            return 2
    if args.list:
        for m in mutants:
            print(f"{m.level:7} {m.name:40} {m.file}")
        return 0
    signal.signal(signal.SIGTERM, _interrupt)
    started = time.monotonic()
    result = check(mutants, args.timeout, args.jobs)
    bad = {n: r for n, r in result.items() if not r.startswith("killed")}
    print(f"\n{len(result)} mutants, {len(result) - len(bad)} killed, {len(bad)} not "
          f"({time.monotonic() - started:.0f}s)")
    for name, r in bad.items():
        print(f"  {name}: {r}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
