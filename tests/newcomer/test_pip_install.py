"""`kubepool local` from a `pip install`, not a checkout: the wheel carries the binaries' build recipe and the
node config, and an installed package keeps its cluster in the user's state directory. The wheel is built from
this tree, unpacked outside it, and its own `kubepool local up` brings a cluster up from a directory that is
no checkout (this venv supplies the dependencies).

Marked `clone` with the fresh-clone tests (a minute): `pytest -m "not clone"` skips it locally."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from kubepool.local import controlplane

pytestmark = [pytest.mark.clone, pytest.mark.cluster, pytest.mark.timeout(900)]
SLOT = 5


def test_kubepool_local_up_from_the_wheel(tmp_path: Path) -> None:
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                            str(tmp_path / "dist"), str(controlplane.REPO_ROOT)], capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr[-3000:]
    [wheel] = (tmp_path / "dist").glob("kubepool-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"kubepool/local/k8sbin/build.sh", "kubepool/local/k8sbin/versions.env", "kubepool/local/k8sbin/etcd/main.go",
            "kubepool/local/k8sbin/kubernetes/go.mod", "kubepool/local/nodes.yaml"} <= names
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    (site / "kubepool/local/k8sbin/build.sh").chmod(0o755)  # zip extraction drops modes; pip keeps them
    home = tmp_path / "home"
    env = {**os.environ, "PYTHONPATH": str(site), "XDG_STATE_HOME": str(home / "state"),
           "KUBEPOOL_CACHE": str(Path.home() / ".cache" / "kubepool")}
    env.pop("KUBEPOOL_STATE_DIR", None)
    cli = [sys.executable, "-m", "kubepool.local.cli"]
    where = subprocess.run([*cli, "--help"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert where.returncode == 0, where.stderr
    probe = subprocess.run([sys.executable, "-c", "import kubepool.local.controlplane as c; print(c.__file__, c.IN_CHECKOUT, "
                            "c.DEFAULT_STATE_DIR)"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert probe.stdout.split() == [str(site / "kubepool/local/controlplane.py"), "False",
                                    str(home / "state" / "kubepool")], probe.stdout + probe.stderr
    try:
        up = subprocess.run([*cli, "up", "--slot", str(SLOT)], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=600)
        assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
        kubeconfig = home / "state" / "kubepool" / "kubeconfig"
        assert kubeconfig.is_file(), up.stdout[-2000:]
        status = subprocess.run([*cli, "status"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        assert status.returncode == 0 and "Ready" in status.stdout, status.stdout + status.stderr
    finally:
        subprocess.run([*cli, "down"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
