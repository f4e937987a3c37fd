"""pipRequirements in the runtime, with the real pip: installed into a private prefix from a wheelhouse (no
index), importable by a process started with the returned environment, the image's own packages left alone;
a requirement pip cannot satisfy raises PipInstallFailed with pip's last lines."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kubepool.runtime import pip
from support.wheels import PROBE, PROBE_MODULE, build_probe_wheel


def test_installs_into_the_prefix_only(tmp_path: Path) -> None:
    house = tmp_path / "wheelhouse"
    build_probe_wheel(house)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PIP_FIND_LINKS": str(house), "PIP_NO_INDEX": "1"}
    # pydantic is in the image (this venv): pip must leave it there, not copy it into the prefix.
    new_env, done = pip.install([PROBE, "pydantic"], tmp_path / "pip", env)
    assert done.startswith("Successfully installed") and PROBE in done and "pydantic" not in done
    out = subprocess.run([sys.executable, "-c", f"import {PROBE_MODULE}, pydantic; print({PROBE_MODULE}.ANSWER, "
                          f"{PROBE_MODULE}.__file__)"], env=new_env, capture_output=True, text=True, check=True).stdout
    answer, where = out.split()
    assert answer == "42" and where.startswith(str(tmp_path / "pip"))
    assert not list((tmp_path / "pip").rglob("pydantic*"))
    # Without the returned env the image's interpreter does not see it: nothing leaked into its environment.
    assert subprocess.run([sys.executable, "-c", f"import {PROBE_MODULE}"], env=env, capture_output=True).returncode != 0


def test_a_requirement_pip_cannot_satisfy_fails_with_pips_words(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PIP_FIND_LINKS": str(tmp_path), "PIP_NO_INDEX": "1"}
    with pytest.raises(pip.PipInstallFailed, match="kubepool-not-a-package") as err:
        pip.install(["kubepool-not-a-package==9"], tmp_path / "pip", env)
    assert "No matching distribution found" in str(err.value)


def _probe_answer(python: Path, env: dict[str, str]) -> str:
    return subprocess.run([str(python), "-c", f"import {PROBE_MODULE}; print({PROBE_MODULE}.ANSWER)"], env=env,
                          capture_output=True, text=True, check=True).stdout.strip()


def test_a_pin_of_a_package_the_image_has_wins_for_the_job_and_leaves_the_image_alone(tmp_path: Path) -> None:
    """The image (a venv of its own, so this test's removes nothing real) has probe 0.1; the job pins 0.2. pip
    alone would uninstall the image's 0.1 (or fail with Errno 13 on a read-only image): the job sees 0.2, the
    image keeps 0.1."""
    house = tmp_path / "wheelhouse"
    old = build_probe_wheel(house, version="0.1", answer="41")
    build_probe_wheel(house, version="0.2", answer="42")
    image = tmp_path / "image"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(image)], check=True)
    python = image / "bin" / "python"
    src = str(Path(pip.__file__).parents[2])  # kubepool itself, as the image has it
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PIP_FIND_LINKS": str(house), "PIP_NO_INDEX": "1",
           "PYTHONPATH": src}
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", str(old)], env=env, check=True)
    assert _probe_answer(python, env) == "41"
    run = ("import json, sys; from pathlib import Path; from kubepool.runtime import pip; "
           f"print(json.dumps(pip.install(['{PROBE}==0.2'], Path(sys.argv[1]), dict(__import__('os').environ))))")
    out = subprocess.run([str(python), "-c", run, str(tmp_path / "pip")], env=env, capture_output=True, text=True,
                         check=True).stdout
    new_env, done = json.loads(out)
    assert f"{PROBE}-0.2" in done, done
    assert _probe_answer(python, new_env) == "42"  # the job's pin wins
    assert _probe_answer(python, env) == "41"  # the image's copy is still there, untouched
    # Run again in the same pod (same prefix): nothing new to install.
    again = json.loads(subprocess.run([str(python), "-c", run, str(tmp_path / "pip")], env=env, capture_output=True,
                                      text=True, check=True).stdout)
    assert again[1] == "every requirement was already in the image"


def test_pinned_names_each_resolved_distribution_once() -> None:
    """The dry run's report, as pip documents it, to the second run's requirements."""
    report = {"install": [
        {"metadata": {"name": "numpy", "version": "1.26.4"}, "is_direct": False,
         "download_info": {"url": "https://files/numpy.whl", "archive_info": {}}},
        {"metadata": {"name": "probe", "version": "1.0"}, "is_direct": True,
         "download_info": {"url": "https://git.example/probe", "vcs_info": {"vcs": "git", "commit_id": "abc"}}},
        {"metadata": {"name": "local", "version": "2"}, "is_direct": True,
         "download_info": {"url": "file:///w/local-2.whl", "archive_info": {}}},
    ]}
    assert pip.pinned(report) == ["numpy==1.26.4", "probe @ git+https://git.example/probe@abc",
                                  "local @ file:///w/local-2.whl"]
