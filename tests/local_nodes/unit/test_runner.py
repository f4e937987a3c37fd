"""The sandbox supervisor and runner on this machine, without a cluster: private mounts per run, hostname,
exit codes, start errors, and stopping a container with everything it spawned."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from kubepool.local.agent import runner

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mount namespaces with bind mounts need root")


def spec(argv: list[str], **extra: Any) -> dict[str, Any]:
    return {
        "argv": argv,
        "env": {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"},
        "cwd": None,
        "mounts": [],
        **extra,
    }


async def test_private_mounts_hostname_and_exit_code(tmp_path: Path) -> None:
    vol = tmp_path / "vol"
    vol.mkdir()
    (vol / "contract.json").write_text("{}")
    target = f"/etc/kubepool-runner-test-{os.getpid()}"
    code = f"import os,socket; print(os.listdir({target!r}), socket.gethostname()); raise SystemExit(3)"
    run = await runner.start(
        tmp_path / "run",
        spec(
            ["python", "-c", code],
            hostname="algo-7",
            mounts=[{"source": str(vol), "target": target, "readOnly": True}],
        ),
    )
    info = await run.wait()
    assert info["exitCode"] == 3 and info["reason"] == "Error"
    assert (run.dir / runner.LOG).read_text().strip() == "['contract.json'] algo-7"
    offset, ns = (run.dir / runner.LOG_INDEX).read_text().split()  # one line, at offset 0, written just now
    assert offset == "0" and abs(int(ns) / 1e9 - time.time()) < 60
    assert os.listdir(target) == []  # only the container saw the volume
    os.rmdir(target)


async def test_missing_command_is_a_start_error(tmp_path: Path) -> None:
    run = await runner.start(tmp_path / "run", spec(["no-such-command-kubepool"]))
    info = await run.wait()
    assert info["exitCode"] == 128 and info["reason"] == "StartError"
    assert "executable file not found" in info["message"]


async def test_stop_kills_daemons_in_new_sessions(tmp_path: Path) -> None:
    pidfile = tmp_path / "daemon.pid"
    code = (
        "import subprocess,time,sys;"
        f"p=subprocess.Popen(['sleep','300'], start_new_session=True); open({str(pidfile)!r},'w').write(str(p.pid));"
        "time.sleep(300)"
    )
    run = await runner.start(tmp_path / "run", spec(["python", "-c", code]))
    deadline = time.monotonic() + 10
    while not pidfile.exists() or not pidfile.read_text():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    daemon = int(pidfile.read_text())
    await run.stop(grace_s=5)
    assert not run.alive()
    time.sleep(0.2)
    with pytest.raises(ProcessLookupError):
        os.kill(daemon, 0)
    assert run.exit_info()["exitCode"] == 143  # SIGTERM, handled within the grace period


async def test_find_adopts_a_live_run(tmp_path: Path) -> None:
    run = await runner.start(tmp_path / "run", spec(["sleep", "30"]))
    found = runner.find(run.dir)
    assert found is not None and found.proc is None and found.alive()
    await found.stop(grace_s=1)
    await run.wait()
    assert not found.alive()


def test_latest_run(tmp_path: Path) -> None:
    assert runner.latest_run(tmp_path / "none") is None
    for n in ("0", "1", "10"):
        (tmp_path / n).mkdir()
    assert runner.latest_run(tmp_path) == (10, tmp_path / "10")


async def test_a_checkout_under_the_pods_own_tmp_stays_visible(tmp_path: Path) -> None:
    """A clone in /tmp: the pod's /tmp volume covers the run dir and what the pod runs from (`keepPaths`);
    the container still runs from there, and the supervisor still writes its exit file and log index."""
    image = tmp_path / "checkout" / "src"
    image.mkdir(parents=True)
    (image / "hello.py").write_text("import os; print('hello from', os.getcwd(), os.path.exists('/tmp/mine'))")
    pod_tmp = tmp_path / "pod-tmp"
    pod_tmp.mkdir()
    (pod_tmp / "mine").write_text("")
    run = await runner.start(
        tmp_path / "checkout" / ".kubepool" / "run",
        spec(["python", str(image / "hello.py")], cwd=str(image), keepPaths=[str(image)],
             mounts=[{"source": str(pod_tmp), "target": "/tmp"}]),
    )
    info = await run.wait()
    log = (run.dir / runner.LOG).read_text()
    assert info["exitCode"] == 0, log
    # The pod's own /tmp (its file), and the checkout inside it. (When this test's own venv lives under /tmp too,
    # the pod's /tmp also shows the mount point that re-binds it: docs/local-nodes.md.)
    assert log.strip() == f"hello from {image} True"
    assert (run.dir / runner.LOG_INDEX).read_text().split()[0] == "0"


async def test_a_non_root_user_reaches_paths_below_private_directories(tmp_path: Path) -> None:
    """A clone in a home others cannot traverse (/root): an unprivileged container user still runs from it
    and reads every kept path below the same private directory, next to the Python it runs."""
    home = tmp_path / "home"
    (home / "clone" / "src").mkdir(parents=True)
    (home / "clone" / "data").mkdir()
    (home / "clone" / "data" / "x.txt").write_text("42")
    (home / "clone" / "secret.txt").write_text("not kept")
    script = home / "clone" / "src" / "main.py"
    script.write_text(
        "import os,sys; print(os.getuid(), open(sys.argv[1]).read(), os.path.exists(sys.argv[2]))"
    )
    home.chmod(0o700)
    (home / "clone").chmod(0o700)
    keep = [str(home / "clone" / "src"), str(home / "clone" / "data")]
    run = await runner.start(
        tmp_path / "run",
        spec(["python", str(script), str(home / "clone" / "data" / "x.txt"), str(home / "clone" / "secret.txt")],
             keepPaths=keep, uid=1000, gid=1000, groups=[1000]),
    )
    info = await run.wait()
    log = (run.dir / runner.LOG).read_text()
    assert info["exitCode"] == 0, log
    assert log.strip() == "1000 42 False"  # only the kept paths are shown, not their private siblings
