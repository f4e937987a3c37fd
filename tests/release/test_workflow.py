"""The release workflow for the project's public home (.github/workflows/release.yaml): actionlint (built from its
Go module by hack/actionlint/build.sh, cached) finds nothing, and the workflow runs `make release` on a tag."""

from __future__ import annotations

import subprocess

import yaml

from kubepool.local.buildscript import run_build_script
from kubepool.local.layout import REPO_ROOT

WORKFLOWS = REPO_ROOT / ".github" / "workflows"


def test_workflows_pass_actionlint() -> None:
    actionlint = run_build_script(REPO_ROOT / "hack" / "actionlint" / "build.sh", lambda _: None) / "actionlint"
    files = sorted(str(p) for p in WORKFLOWS.glob("*.y*ml"))
    assert files
    proc = subprocess.run([str(actionlint), "-no-color", *files], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_tag_runs_make_release_and_publishes_the_wheel() -> None:
    wf = yaml.safe_load((WORKFLOWS / "release.yaml").read_text())
    assert wf[True]["push"]["tags"] == ["v*"]  # YAML 1.1 reads the key `on` as True
    steps = [s for job in wf["jobs"].values() for s in job["steps"]]
    assert any("make release REGISTRY=ghcr.io/kubepool" in s.get("run", "") for s in steps)
    values = yaml.safe_load((REPO_ROOT / "charts/kubepool/values.yaml").read_text())
    assert values["image"]["repository"] == "ghcr.io/kubepool/operator"  # where the workflow publishes it
    assert any(s.get("uses", "").startswith("pypa/gh-action-pypi-publish@") for s in steps)
