"""The job's pipRequirements, installed by every instance before anything else starts (Ray, the payload), into a
job-private prefix: never into the image's environment. Two pip runs: a dry run that resolves the requirements
against the image's packages (`--report`: what is missing or asked for in another version), then an install of
exactly those distributions into the prefix with `--ignore-installed --no-deps`, so a pin of a package the image
has (`numpy<2`, `xgboost==2.1.4`) is installed beside the image's copy instead of uninstalling it (which would
change the image's environment where it is writable, and fail with Errno 13 where it is not). The prefix then
goes first on PYTHONPATH (and PATH) of everything the instance starts, so the job's version wins. The index,
extra indexes and wheelhouse come in pip's own variables, which the operator sets (controller/builders/pip.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

PIP_TAIL_LINES = 12  # of pip's output, in the failure message
PIP_TIMEOUT_SECONDS = 900
REPORT_NAME = "resolved.json"


class PipInstallFailed(Exception):
    """pip could not install the requirements; the message ends with pip's last lines."""


def site_dir(prefix: Path) -> Path:
    """Where `pip install --prefix` puts pure and platform packages for this interpreter."""
    return Path(sysconfig.get_path("purelib", vars={"base": str(prefix), "platbase": str(prefix)}))


def _pip(*args: str) -> list[str]:
    return [sys.executable, "-m", "pip", "install", "--no-input", "--disable-pip-version-check", *args]


def resolve_command(requirements: Sequence[str], report: Path, requirement_files: Sequence[Path] = ()) -> list[str]:
    """pip's resolution against the installed packages, written as an installation report; installs nothing.
    Requirement files (a SageMaker source dir's requirements.txt) are the one option; requirements never are."""
    files = [arg for f in requirement_files for arg in ("--requirement", str(f))]
    return _pip("--dry-run", "--quiet", "--report", str(report), *files, "--", *requirements)


def install_command(pinned: Sequence[str], prefix: Path) -> list[str]:
    """Exactly the resolved distributions into the prefix; none of the image's is looked at, so none is removed."""
    return _pip("--prefix", str(prefix), "--ignore-installed", "--no-deps", "--no-warn-script-location",
                "--no-warn-conflicts", "--", *pinned)


def pinned(report: Mapping[str, Any]) -> list[str]:
    """The report's "install" list as requirements that name one distribution each: `name==version` from an
    index or wheelhouse, `name @ url` (at the resolved commit for a VCS) for a direct reference."""
    out = []
    for item in report.get("install", []):
        name, version = item["metadata"]["name"], item["metadata"]["version"]
        info = item.get("download_info") or {}
        if not item.get("is_direct"):
            out.append(f"{name}=={version}")
        elif "vcs_info" in info:
            vcs = info["vcs_info"]
            out.append(f"{name} @ {vcs['vcs']}+{info['url']}@{vcs['commit_id']}")
        else:
            out.append(f"{name} @ {info['url']}")
    return out


def env_with(prefix: Path, env: Mapping[str, str]) -> dict[str, str]:
    """`env` with the prefix's packages first on PYTHONPATH and its scripts first on PATH (once: a second install
    into the same prefix, pipRequirements then a source dir's requirements.txt, adds nothing)."""
    out = dict(env)
    for var, first in (("PYTHONPATH", str(site_dir(prefix))), ("PATH", str(prefix / "bin"))):
        rest = [p for p in env.get(var, "").split(":") if p and p != first]
        out[var] = ":".join([first, *rest])
    return out


def _run(cmd: list[str], env: Mapping[str, str], what: str, cwd: Path | None = None) -> list[str]:
    proc = subprocess.run(cmd, env=dict(env), capture_output=True, text=True, timeout=PIP_TIMEOUT_SECONDS,
                          check=False, cwd=cwd)
    output = (proc.stdout + proc.stderr).strip().splitlines()
    if proc.returncode != 0:
        tail = "\n".join(output[-PIP_TAIL_LINES:])
        raise PipInstallFailed(f"pip install {what} failed (exit {proc.returncode}):\n{tail}")
    return output


def install(requirements: Sequence[str], prefix: Path, env: Mapping[str, str], requirement_files: Sequence[Path] = (),
            cwd: Path | None = None) -> tuple[dict[str, str], str]:
    """Install `requirements` (and those of `requirement_files`, whose relative entries pip reads from `cwd`);
    returns the environment that sees them and what pip did. Raises PipInstallFailed."""
    prefix.mkdir(parents=True, exist_ok=True)
    # The resolution sees the prefix too: an instance run again in the same pod does not install twice.
    # pip writes its cache under HOME: the pod's HOME is a scratch volume, never shared with other jobs.
    seen = env_with(prefix, env)
    report = prefix / REPORT_NAME
    what = " ".join([*(f"-r {f.name}" for f in requirement_files), *requirements])
    _run(resolve_command(requirements, report, requirement_files), seen, what, cwd)
    todo = pinned(json.loads(report.read_text()))
    if not todo:
        return seen, "every requirement was already in the image"
    output = _run(install_command(todo, prefix), seen, " ".join(todo))
    installed = [line for line in output if line.startswith("Successfully installed")]
    return seen, installed[-1] if installed else f"installed {' '.join(todo)}"
