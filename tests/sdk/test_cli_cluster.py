"""kubectl's habits against the local cluster's API server: `--kubeconfig` and `--context` on the CLI and a
`session` in the SDK pick the cluster (not KUBECONFIG's current context); `kubectl kubepool` runs the CLI as a
kubectl plugin; `version` reads the API versions the cluster serves."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubepool import cli, jobs

pytestmark = pytest.mark.cluster


@pytest.fixture
def two_contexts(cluster: Any, namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A kubeconfig whose current context is a cluster that does not answer; `ours` is the local cluster with
    the test's namespace. KUBECONFIG points nowhere, so only the flags can find the cluster."""
    config = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    ours = config["contexts"][0]["context"]
    config["clusters"].append({"name": "nowhere", "cluster": {"server": "https://127.0.0.1:9",
                                                               "insecure-skip-tls-verify": True}})
    config["contexts"] = [{"name": "ours", "context": {**ours, "namespace": namespace}},
                          {"name": "elsewhere", "context": {**ours, "cluster": "nowhere"}}]
    config["current-context"] = "elsewhere"
    path = tmp_path / "two-contexts"
    path.write_text(yaml.safe_dump(config))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    return path


def test_context_and_kubeconfig_pick_the_cluster(two_contexts: Path, namespace: str, compute_pool: Any,
                                                 tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pool = compute_pool("cpu", max_nodes=2)
    script = tmp_path / "a.py"
    script.write_text("print(1)\n")
    flags = ["--kubeconfig", str(two_contexts), "--context", "ours"]
    assert cli.main(["submit", str(script), "--pool", pool, "--name", "via-flags", *flags]) == 0
    assert capsys.readouterr().out.strip() == f"{namespace}/via-flags"  # the context's namespace
    assert cli.main(["list", "-o", "name", *flags]) == 0
    assert capsys.readouterr().out == "mljob.kubepool.dev/via-flags\n"
    # The file's current context, and a context it lacks, are refused with exit 5 (not the cluster above).
    assert cli.main(["list", "--kubeconfig", str(two_contexts)]) == 5
    assert "cannot reach the Kubernetes API" in capsys.readouterr().err
    assert cli.main(["list", "--kubeconfig", str(two_contexts), "--context", "nope"]) == 5
    assert "context 'nope' is not in the kubeconfig (it has: elsewhere, ours)" in capsys.readouterr().err
    # The SDK: a session made once, passed as Snowflake's `session=` / SageMaker's `sagemaker_session=`.
    session = jobs.connect(kubeconfig=two_contexts, context="ours")
    assert [r.name for r in jobs.list_jobs(session=session, as_list=True)] == ["via-flags"]
    job = jobs.submit_file(script, pool, name="via-session", session=session)
    assert jobs.get_job("via-session", session=session).id == job.id == f"{namespace}/via-session"
    jobs.delete_job("via-flags", session=session)
    assert [r.name for r in jobs.list_jobs(session=session, as_list=True)] == ["via-session"]


def test_kubectl_plugin_and_version(cluster: Any, crds: Any) -> None:
    bin_dir = Path(sys.executable).parent
    assert (bin_dir / "kubectl-kubepool").exists(), "the kubectl-kubepool entry point is not installed"
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.run([cluster.kubectl.binary, "kubepool", "version", "-o", "json"], capture_output=True,
                          text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert "kubepool.dev/v1alpha1" in doc["serverApiVersions"] and doc["clientVersion"]
    plugins = subprocess.run([cluster.kubectl.binary, "plugin", "list"], capture_output=True, text=True, env=env)
    assert str(bin_dir / "kubectl-kubepool") in plugins.stdout
