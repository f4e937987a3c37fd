"""`kubepool local` from a `pip install`, not a checkout: the wheel carries the binaries' build recipe and the
node config, and an installed package keeps its cluster in the user's state directory. The wheel is built from
this tree, unpacked outside it, and its own `kubepool local up` brings a cluster up from a directory that is
no checkout (this venv supplies the dependencies).

The release's wheel the way a user gets it: `pip install kubepool-<version>.whl` into a fresh venv outside the
checkout, its `kubepool local up`, the chart installed from an OCI registry (the CNCF distribution registry, TLS)
and a job to DONE, with the venv's own `kubepool` CLI.

Marked `clone` with the fresh-clone tests (minutes): `pytest -m "not clone"` skips them locally."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
import tomllib
import zipfile
from importlib import metadata
from pathlib import Path

import pytest
import yaml

from kubepool.local import layout, registry

pytestmark = [pytest.mark.clone, pytest.mark.cluster, pytest.mark.timeout(900)]
SLOT = 5


def test_kubepool_local_up_from_the_wheel(tmp_path: Path) -> None:
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                            str(tmp_path / "dist"), str(layout.REPO_ROOT)], capture_output=True, text=True, timeout=600)
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
    probe = subprocess.run([sys.executable, "-c", "import kubepool.local.layout as c; print(c.__file__, c.IN_CHECKOUT, "
                            "c.DEFAULT_STATE_DIR)"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert probe.stdout.split() == [str(site / "kubepool/local/layout.py"), "False",
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


def _fresh_venv(base: Path) -> Path:
    """A venv of its own with kubepool from the wheel (pip install), its dependencies borrowed from this venv
    (a .pth naming its site-packages, read after the venv's own: no second download of torch and Ray)."""
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    [purelib] = venv.glob("lib/python*/site-packages")
    (purelib / "zz-borrowed-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    # The borrowed packages' commands the runtime runs (`ray start`), as pip writes a console script.
    for ep in metadata.distribution("ray").entry_points.select(group="console_scripts", name="ray"):
        module, func = ep.value.split(":")
        script = venv / "bin" / ep.name
        script.write_text(f"#!{venv / 'bin' / 'python'}\nimport sys\nfrom {module} import {func}\nsys.exit({func}())\n")
        script.chmod(0o755)
    return venv


def test_wheel_in_a_fresh_venv_installs_the_oci_chart_and_runs_a_job() -> None:
    version = tomllib.loads((layout.REPO_ROOT / "pyproject.toml").read_text())["project"]["version"]
    # Under /tmp as a newcomer's scratch dir, readable by the chart's non-root operator (uid 65532).
    base = Path(tempfile.mkdtemp(prefix="kubepool-pip-", dir="/tmp"))
    base.chmod(0o755)
    reg: registry.LocalRegistry | None = None
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBEPOOL_", "KUBECONFIG", "PYTHONPATH"))}
    env.update(XDG_STATE_HOME=str(base / "state"), KUBEPOOL_CACHE=str(Path.home() / ".cache" / "kubepool"))
    venv = _fresh_venv(base)
    kubepool = [str(venv / "bin" / "kubepool")]
    try:
        built = subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(base / "dist"),
                                str(layout.REPO_ROOT)], capture_output=True, text=True, timeout=600)
        assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
        [wheel] = (base / "dist").glob(f"kubepool-{version}-*.whl")
        pip = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "--no-deps", str(wheel)], env=env,
                             capture_output=True, text=True, timeout=300)
        assert pip.returncode == 0, pip.stderr
        where = subprocess.run([str(venv / "bin" / "python"), "-c", "import kubepool; print(kubepool.__file__, kubepool.__version__)"],
                               cwd=base, env=env, capture_output=True, text=True, check=True).stdout.split()
        assert where == [str(next(venv.glob("lib/python*/site-packages")) / "kubepool" / "__init__.py"), version]

        up = subprocess.run([*kubepool, "local", "up", "--slot", str(SLOT)], cwd=base, env=env, capture_output=True,
                            text=True, timeout=900)
        assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
        lay = layout.Layout.load(base / "state" / "kubepool")
        assert lay is not None
        env["KUBECONFIG"] = str(lay.kubeconfig)

        # The release's chart, pushed as `make release` pushes it, installed from oci://.
        reg = registry.start(base / "registry", say=lambda _: None)
        helm, ca = lay.bin("helm"), ("--ca-file", str(reg.ca_file))
        for args in (["package", str(layout.REPO_ROOT / "charts" / "kubepool"), "-d", str(base / "dist")],
                     ["push", str(base / "dist" / f"kubepool-{version}.tgz"), f"oci://{reg.host}/kubepool/charts", *ca]):
            proc = subprocess.run([helm, *args], env=env, capture_output=True, text=True, timeout=120)
            assert proc.returncode == 0, proc.stderr
        subprocess.run([lay.bin("kubectl"), "create", "namespace", "ml"], env=env, check=True, capture_output=True)
        install = subprocess.run([helm, "install", "kubepool", f"oci://{reg.host}/kubepool/charts/kubepool", "--version",
                                  version, *ca, "-n", "kubepool-system", "--create-namespace", "--wait", "--timeout", "300s",
                                  "--set", f"image.repository={reg.host}/kubepool/operator",
                                  "--set", "operator.watchNamespaces={ml}", "--set", "operator.warmCapacity=false",
                                  "--set", "pools[0].name=cpu-pool", "--set", "pools[0].spec.instanceFamily=CPU_X64_S",
                                  "--set", "pools[0].spec.nodeSelector.kubepool\\.dev/node-pool=cpu"],
                                 env=env, capture_output=True, text=True, timeout=360)
        assert install.returncode == 0, install.stderr[-3000:]
        job = {"apiVersion": "kubepool.dev/v1alpha1", "kind": "MLJob", "metadata": {"name": "hello"},
               "spec": {"computePool": "cpu-pool", "targetInstances": 1, "mode": "parallel",  # no Ray head to wait for
                        "entrypoint": {"command": ["python", "-c", "import kubepool; print('hello from', kubepool.__version__)"]}}}
        subprocess.run([lay.bin("kubectl"), "apply", "-n", "ml", "-f", "-"], input=yaml.safe_dump(job), env=env,
                       check=True, capture_output=True, text=True)
        deadline, phase = time.monotonic() + 300, None
        while phase not in ("DONE", "FAILED", "CANCELLED") and time.monotonic() < deadline:
            time.sleep(1)
            got = subprocess.run([lay.bin("kubectl"), "get", "mljob", "hello", "-n", "ml", "-o", "json"], env=env,
                                 capture_output=True, text=True, timeout=60)
            phase = json.loads(got.stdout or "{}").get("status", {}).get("phase")
        logs = subprocess.run([lay.bin("kubectl"), "logs", "-n", "ml", "-l", "kubepool.dev/job=hello", "--tail=-1"],
                              env=env, capture_output=True, text=True).stdout
        assert phase == "DONE", f"hello ended {phase}:\n{logs[-3000:]}"
        assert f"hello from {version}" in logs, logs
        # The venv's own CLI sees it too.
        listed = subprocess.run([*kubepool, "list", "-n", "ml"], cwd=base, env=env, capture_output=True, text=True,
                                timeout=60)
        assert listed.returncode == 0 and "hello" in listed.stdout and "DONE" in listed.stdout, listed.stdout + listed.stderr
    finally:
        if reg is not None:
            reg.stop()
        subprocess.run([*kubepool, "local", "down"], cwd=base, env=env, capture_output=True, text=True, timeout=300)
        shutil.rmtree(base, ignore_errors=True)
