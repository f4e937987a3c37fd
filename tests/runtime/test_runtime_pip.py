"""pipRequirements in the runtime, with the real pip: installed into a private prefix from a wheelhouse (no
index), importable by a process started with the returned environment, the image's own packages left alone;
a requirement pip cannot satisfy raises PipInstallFailed with pip's last lines."""

from __future__ import annotations

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
