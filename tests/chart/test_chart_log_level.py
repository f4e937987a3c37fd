"""`operator.logLevel` changes what the operator logs, not only its arguments: the chart's own container
arguments for `warning` and `debug` start the operator, which runs a job to DONE either way; at `warning` its
log has no INFO or DEBUG line, at `debug` it has DEBUG lines."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from support.operator_cluster import Operator, mljob, wait_phase

pytestmark = pytest.mark.cluster
LEVEL = re.compile(r"\[(DEBUG|INFO|WARNING|ERROR) *\]")


def _operator_args(render: Any, level: str) -> tuple[str, ...]:
    [dep] = [d for d in render("--set", f"operator.logLevel={level}") if d["kind"] == "Deployment"]
    [c] = dep["spec"]["template"]["spec"]["containers"]
    return tuple(c["args"])


@pytest.mark.parametrize("level", ["warning", "debug"])
def test_log_level_reaches_the_operators_log(level: str, render: Any, cluster: Any, kubectl: Any, crds: None,
                                             namespace: str, compute_pool: Any, tmp_path: Path) -> None:
    args = _operator_args(render, level)
    assert f"--log-level={level}" in args
    op = Operator(cluster.kubeconfig, namespace, tmp_path / "operator.log", standalone=False, verbose=False, args=args)
    op.start(wait=False)
    try:
        pool = compute_pool("cpu", max_nodes=1)
        job = mljob("levels", computePool=pool, mode="parallel", entrypoint={"command": ["true"]})
        kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(job), check=True)
        st = wait_phase(kubectl, namespace, "levels", {"DONE", "FAILED"}, 180, op)
        assert st["phase"] == "DONE", st
    finally:
        op.stop()
    seen = set(LEVEL.findall(op.logs()))
    if level == "warning":
        assert not seen & {"DEBUG", "INFO"}, op.logs()[-3000:]
    else:
        assert "DEBUG" in seen, op.logs()[-3000:]
