"""The job's pipRequirements, installed by every instance before anything else starts (Ray, the payload), into a
job-private prefix: never into the image's environment. pip sees the image's packages (`--prefix`, not
`--target`), so it installs only what is missing or asked for in another version; the prefix then goes first on
PYTHONPATH (and PATH) of everything the instance starts. The index, extra indexes and wheelhouse come in pip's
own variables, which the operator sets (controller/builders/pip.py)."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from collections.abc import Mapping, Sequence
from pathlib import Path

PIP_TAIL_LINES = 12  # of pip's output, in the failure message
PIP_TIMEOUT_SECONDS = 900


class PipInstallFailed(Exception):
    """pip could not install the requirements; the message ends with pip's last lines."""


def site_dir(prefix: Path) -> Path:
    """Where `pip install --prefix` puts pure and platform packages for this interpreter."""
    return Path(sysconfig.get_path("purelib", vars={"base": str(prefix), "platbase": str(prefix)}))


def command(requirements: Sequence[str], prefix: Path) -> list[str]:
    return [sys.executable, "-m", "pip", "install", "--prefix", str(prefix), "--no-input",
            "--disable-pip-version-check", "--no-warn-script-location", "--", *requirements]  # never options


def env_with(prefix: Path, env: Mapping[str, str]) -> dict[str, str]:
    """`env` with the prefix's packages first on PYTHONPATH and its scripts first on PATH."""
    path = [str(site_dir(prefix))] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    bins = [str(prefix / "bin")] + ([env["PATH"]] if env.get("PATH") else [])
    return {**env, "PYTHONPATH": ":".join(path), "PATH": ":".join(bins)}


def install(requirements: Sequence[str], prefix: Path, env: Mapping[str, str]) -> tuple[dict[str, str], str]:
    """Install `requirements`; returns the environment that sees them and what pip did. Raises PipInstallFailed."""
    prefix.mkdir(parents=True, exist_ok=True)
    # pip writes its cache under HOME: the pod's HOME is a scratch volume, never shared with other jobs.
    proc = subprocess.run(command(requirements, prefix), env=dict(env), capture_output=True, text=True,
                          timeout=PIP_TIMEOUT_SECONDS, check=False)
    output = (proc.stdout + proc.stderr).strip().splitlines()
    if proc.returncode != 0:
        tail = "\n".join(output[-PIP_TAIL_LINES:])
        raise PipInstallFailed(f"pip install {' '.join(requirements)} failed (exit {proc.returncode}):\n{tail}")
    installed = [line for line in output if line.startswith("Successfully installed")]
    return env_with(prefix, env), installed[-1] if installed else "every requirement was already in the image"
