"""kubectl's habits against the local cluster's API server: `--kubeconfig` and `--context` on the CLI and a
`session` in the SDK pick the cluster (not KUBECONFIG's current context); a KUBECONFIG of several files is
merged as kubectl merges it; `-o jsonpath/custom-columns/name` print what kubectl prints; the CRDs' scale
subresource, categories and columns; `kubectl kubepool` runs the CLI as a kubectl plugin; `version` reads the
API versions the cluster serves."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubepool import cli, jobs, naming
from kubepool.kube import kubeconfig

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


def _beside(entry: dict[str, Any], data_key: str, path_key: str, directory: Path, name: str) -> None:
    """Moves an embedded credential into a file of `directory`, named relatively (as kubectl resolves it: from
    the kubeconfig file's own directory)."""
    if data_key in entry:
        (directory / name).write_bytes(base64.b64decode(entry.pop(data_key)))
        entry[path_key] = name


def test_kubeconfig_files_merged_as_kubectl_merges_them(cluster: Any, namespace: str, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    config = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    a_dir, b_dir, elsewhere = tmp_path / "a", tmp_path / "b", tmp_path / "cwd"
    for d in (a_dir, b_dir, elsewhere):
        d.mkdir()
    real_cluster, real_user = config["clusters"][0]["cluster"], config["users"][0]["user"]
    _beside(real_cluster, "certificate-authority-data", "certificate-authority", a_dir, "ca.crt")
    _beside(real_user, "client-certificate-data", "client-certificate", a_dir, "client.crt")
    _beside(real_user, "client-key-data", "client-key", a_dir, "client.key")
    nowhere = {"server": "https://127.0.0.1:9", "insecure-skip-tls-verify": True}
    a = {"apiVersion": "v1", "kind": "Config", "clusters": [{"name": "local", "cluster": real_cluster}],
         "users": [{"name": "me", "user": real_user}],
         "contexts": [{"name": "ours", "context": {"cluster": "local", "user": "me", "namespace": namespace}}]}
    # B names the same cluster, user and context (A's win, whole) and sets the current context (A sets none).
    b = {"apiVersion": "v1", "kind": "Config", "current-context": "ours",
         "clusters": [{"name": "local", "cluster": nowhere}, {"name": "far", "cluster": nowhere}],
         "users": [{"name": "me", "user": {"token": "t"}}],
         "contexts": [{"name": "ours", "context": {"cluster": "far", "user": "me", "namespace": "wrong"}},
                      {"name": "elsewhere", "context": {"cluster": "far", "user": "me"}}]}
    (a_dir / "config").write_text(yaml.safe_dump(a))
    (b_dir / "config").write_text(yaml.safe_dump(b))
    env_value = os.pathsep.join([str(tmp_path / "missing"), str(a_dir / "config"), str(b_dir / "config")])
    env = {**os.environ, "KUBECONFIG": env_value}

    def kubectl(*args: str) -> str:
        proc = subprocess.run([cluster.kubectl.binary, *args], capture_output=True, text=True, env=env,
                              cwd=elsewhere, timeout=60)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    theirs = json.loads(kubectl("config", "view", "--merge", "--raw", "-o", "json"))
    ours = kubeconfig.load(kubeconfig.files_of(env_value), resolve=False)  # paths as the files write them
    assert ours is not None
    for section in ("clusters", "users", "contexts"):
        assert {e["name"]: e for e in ours[section]} == {e["name"]: e for e in theirs[section]}, section
    assert ours["current-context"] == theirs["current-context"] == kubectl("config", "current-context").strip()
    # The CLI reaches the cluster through the merged files, from another directory (A's relative paths resolved
    # from A's directory), in A's context's namespace.
    monkeypatch.setenv("KUBECONFIG", env_value)
    monkeypatch.chdir(elsewhere)
    assert cli.main(["list", "-o", "jsonpath={.kind}"]) == 0
    assert capsys.readouterr().out == "List"
    assert cli.main(["list", "--context", "elsewhere"]) == 5


def test_outputs_are_kubectls(kubectl: Any, namespace: str, compute_pool: Any, tmp_path: Path,
                              capsys: pytest.CaptureFixture[str]) -> None:
    pool = compute_pool("cpu", max_nodes=2)
    script = tmp_path / "a.py"
    script.write_text("print(1)\n")
    for name, queue in (("beta", "team-q"), ("alpha", "other-q")):
        assert cli.main(["-n", namespace, "submit", str(script), "--pool", pool, "--name", name, "--queue", queue,
                         "--label", f"app={name}", "--instances", "2"]) == 0
    capsys.readouterr()
    outputs = [
        "jsonpath={.items[*].metadata.name}",
        "jsonpath={range .items[*]}{.metadata.name}{'\\t'}{.metadata.labels}{'\\n'}{end}",
        'jsonpath={.items[?(@.metadata.labels.app=="beta")].spec.targetInstances}',
        "custom-columns=NAME:.metadata.name,APP:.metadata.labels.app,POOL:.spec.computePool,PHASE:.status.phase",
        "name",
    ]
    for fmt in outputs:
        want = kubectl("get", "mljobs", "-n", namespace, "-o", fmt, check=True).stdout
        assert cli.main(["list", "-n", namespace, "-o", fmt]) == 0
        got = capsys.readouterr().out
        assert got == want or (fmt == "name" and sorted(got.split()) == sorted(want.split())), fmt
    labels = kubectl.json("get", "mljob", "alpha", "-n", namespace)["metadata"]["labels"]
    assert (labels[naming.LABEL_KUEUE_QUEUE], labels["app"]) == ("other-q", "alpha")
    want = kubectl("get", "mljob", "alpha", "-n", namespace, "-o", "jsonpath={.spec}", check=True).stdout
    assert cli.main(["status", "alpha", "-n", namespace, "-o", "jsonpath={.spec}"]) == 0
    assert json.loads(capsys.readouterr().out) == json.loads(want)


def test_crd_scale_subresource_categories_and_columns(kubectl: Any, operator: Any, namespace: str,
                                                      compute_pool: Any, tmp_path: Path) -> None:
    pool = compute_pool("cpu", max_nodes=4, suspend=True)  # a suspended pool: the job waits, nothing runs
    script = tmp_path / "a.py"
    script.write_text("print(1)\n")
    assert cli.main(["submit", str(script), "--pool", pool, "--name", "scaled", "-n", namespace, "--instances", "2",
                     "--min-instances", "1"]) == 0
    scale_path = f"/apis/{naming.GROUP}/{naming.VERSION}/namespaces/{namespace}/mljobs/scaled/scale"
    deadline = time.monotonic() + 60
    while not (scale := json.loads(kubectl("get", "--raw", scale_path, check=True).stdout))["status"].get("selector"):
        assert time.monotonic() < deadline, f"the operator wrote no status.selector: {scale}"
        time.sleep(0.5)
    assert scale["status"]["selector"] == f"{naming.LABEL_JOB}=scaled" and scale["spec"]["replicas"] == 2
    kubectl("scale", "mljob", "scaled", "-n", namespace, "--replicas=3", check=True)
    assert kubectl.json("get", "mljob", "scaled", "-n", namespace)["spec"]["targetInstances"] == 3
    assert "mljob.kubepool.dev/scaled" in kubectl("get", "all", "-n", namespace, "-o", "name", check=True).stdout
    header, row = kubectl("get", "computepool", pool, check=True).stdout.splitlines()
    at = header.index("SUSPENDED")  # columns are aligned; an empty cell (no status yet) would shift a split()
    assert row[at:].split()[0] == "true", f"{header}\n{row}"
