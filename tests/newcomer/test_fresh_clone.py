"""`make demo`'s job path from a fresh clone where newcomers put one: a directory under /tmp (every local pod
mounts its own /tmp over it) and a home that other users cannot traverse (the operator and instance pods run as
non-root users). Each clone gets its own venv (this venv's packages, the clone's own source), its own local
cluster in the clone's `.kubepool/` on a slot of its own, the chart, and the 3-instance XGBoost job to DONE;
then the README's quick start runs, as written, on the first clone's cluster.

Marked `clone` (a few minutes each): `pytest -m "not clone"` skips them locally; `make test` runs them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from readme import block

from kubepool.local import layout

pytestmark = [pytest.mark.clone, pytest.mark.cluster, pytest.mark.timeout(1200)]
REPO = layout.REPO_ROOT
SLOTS = {"tmp": 2, "private-home": 3}
OPERATOR_UID = 65532  # the chart's runAsUser


def _base(where: str) -> Path:
    if where == "tmp":  # as `git clone ... /tmp/x` makes it: others may traverse it
        base = Path(tempfile.mkdtemp(prefix="kubepool-clone-", dir="/tmp"))
        base.chmod(0o755)
        return base
    base = Path(tempfile.mkdtemp(prefix=".kubepool-clone-", dir=Path.home()))
    home = Path.home()
    if home.stat().st_mode & 0o001:  # a home others can traverse: the clone's own parent is private
        base.chmod(0o700)
    return base


def _venv(clone: Path) -> Path:
    """The clone's own venv as `make venv` makes it, without reinstalling torch: this venv hard-linked into
    the clone, its scripts pointed at the clone's interpreter, its editable kubepool at the clone's source."""
    here, there = Path(sys.prefix), clone / ".venv"
    subprocess.run(["cp", "-al", str(here), str(there)], check=True)
    for script in (there / "bin").iterdir():
        if script.is_file() and not script.is_symlink() and script.read_bytes().startswith(f"#!{here}/".encode()):
            fresh = script.with_name(script.name + ".new")  # a new file: the hard link stays this venv's
            fresh.write_bytes(script.read_bytes().replace(str(here).encode(), str(there).encode(), 1))
            fresh.chmod(script.stat().st_mode)
            fresh.replace(script)
    [purelib] = there.glob("lib/python*/site-packages")
    editable = list(purelib.glob("__editable__*kubepool*"))
    assert editable, f"no editable install of kubepool in {here}"
    for f in editable:
        f.unlink()
    (purelib / "kubepool-clone.pth").write_text(f"{clone / 'src'}\n")
    return there / "bin" / "python"


def _container_uids(state_dir: Path, namespace: str) -> dict[str, set[int]]:
    """pod name -> the uids of its live containers' processes (the supervisors' children), read from /proc."""
    out: dict[str, set[int]] = {}
    for pid_file in state_dir.glob("nodes/*/pods/*/containers/*/*/pid"):
        meta = json.loads((pid_file.parents[3] / "pod.json").read_text())
        if meta["namespace"] != namespace:
            continue
        supervisor = int(pid_file.read_text().split()[0])
        children = Path(f"/proc/{supervisor}/task/{supervisor}/children")
        if not children.exists():
            continue
        for child in children.read_text().split():
            status = Path(f"/proc/{child}/status").read_text()
            uid = int(next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1])
            out.setdefault(meta["name"], set()).add(uid)
    return out


@pytest.fixture
def clones() -> Iterator[dict[str, tuple[Path, int]]]:
    """One fresh clone per location; each one's cluster is stopped and its directory removed at the end."""
    made: dict[str, tuple[Path, int]] = {}
    try:
        for where, slot in SLOTS.items():
            base = _base(where)
            dest = base / "kubepool"
            made[where] = (dest, slot)
            subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", str(REPO), str(dest)], check=True)
        yield made
    finally:
        for dest, _ in made.values():
            py = dest / ".venv" / "bin" / "python"
            if py.exists():
                subprocess.run([str(py), "-m", "kubepool.local.cli", "down", "--state-dir", str(dest / ".kubepool")],
                               capture_output=True, text=True, timeout=180)
            shutil.rmtree(dest.parent, ignore_errors=True)


def _demo(dest: Path, slot: int) -> str:
    py = _venv(dest)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBEPOOL_", "KUBECONFIG"))}
    env.update(KUBEPOOL_SLOT=str(slot), PYTHONDONTWRITEBYTECODE="1")
    log = dest.parent / "demo.log"
    with log.open("w") as out:
        code = subprocess.run([str(py), "-m", "kubepool.demo"], cwd=dest, env=env, stdout=out,
                              stderr=subprocess.STDOUT, timeout=1000).returncode
    text = log.read_text()
    assert code == 0, f"make demo's job path failed from a clone in {dest}:\n" + "\n".join(text.splitlines()[-150:])
    return text


def test_demo_job_from_fresh_clones_side_by_side(clones: dict[str, tuple[Path, int]]) -> None:
    """The second demo runs while the first one's cluster and operator are still up on the same host, as
    `make test` runs beside `make demo`'s cluster."""
    for where, (dest, slot) in clones.items():
        text = _demo(dest, slot)
        assert "ended DONE" in text and "result: score:" in text, f"{where}:\n{text[-3000:]}"
        assert f"state in {dest / '.kubepool'}" in text  # the clone's own cluster, not another one
        # The head's log is its payload's output, without Ray's start-up banner; a worker's log has no launcher
        # banners, so it comes back whole, as Snowflake's log extraction returns it (tests/sdk/unit/test_logs.py).
        head = text.split("===== instance 0", 1)[1].split("===== instance 1", 1)[0]
        assert "score:" in head and "Ray runtime started" not in head, head
        # The operator really runs as the chart's non-root user, from a checkout it could not reach unaided.
        uids = _container_uids(dest / ".kubepool", "kubepool-system")
        operator = {name: u for name, u in uids.items() if name.startswith("kubepool-")}
        assert operator and all(u == {OPERATOR_UID} for u in operator.values()), (where, uids)
        if where == "tmp":
            _quick_start(dest)


def _quick_start(dest: Path) -> None:
    """The README's quick start, line by line as a newcomer pastes it, in the clone after `make demo`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBEPOOL_", "KUBECONFIG", "VIRTUAL_ENV"))}
    proc = subprocess.run(["bash", "-euo", "pipefail", "-c", block("Quick start")], cwd=dest, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"the README's quick start failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    assert "2 nodes" in proc.stdout and "DONE" in proc.stdout, proc.stdout[-3000:]
