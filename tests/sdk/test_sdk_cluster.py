"""The SDK and CLI against the local cluster's API server, without the operator: MLJob creation, payload
ConfigMap ownership, the API server's own validation, RBAC refusals, watch timeouts, list/cancel/delete."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubepool import cli, jobs
from kubepool.jobs.payload import MANIFEST_KEY
from kubepool.kube.errors import Invalid
from kubepool.kube.sync import Kube

pytestmark = [pytest.mark.cluster, pytest.mark.api]


@pytest.fixture
def pool(compute_pool: Any) -> str:
    name: str = compute_pool("cpu", max_nodes=3)
    return name


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "proj" / "pkg").mkdir(parents=True)
    (tmp_path / "proj" / "main.py").write_text("from pkg import util\nprint(util.X)\n")
    (tmp_path / "proj" / "pkg" / "__init__.py").write_text("")
    (tmp_path / "proj" / "pkg" / "util.py").write_text("X = 'util'\n")
    (tmp_path / "proj" / "blob.bin").write_bytes(b"\x00\xff" * 10)
    return tmp_path / "proj"


def test_submit_creates_job_and_owned_payload(kubectl: Any, namespace: str, pool: str, project: Path) -> None:
    job = jobs.submit_directory(project, pool, entrypoint="main.py", target_instances=3, min_instances=2,
                                namespace=namespace, args=["--x", 1], env_vars={"MODE": "test"})
    obj = kubectl.json("get", "mljob", job.name, "-n", namespace)
    spec = obj["spec"]
    assert (spec["computePool"], spec["targetInstances"], spec["minInstances"]) == (pool, 3, 2)
    assert spec["code"] == {"configMap": f"{job.name}-payload"} and spec["args"] == ["--x", "1"]
    cm = kubectl.json("get", "configmap", f"{job.name}-payload", "-n", namespace)
    (owner,) = cm["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("MLJob", job.name, obj["metadata"]["uid"])
    manifest = json.loads(cm["data"][MANIFEST_KEY])
    assert sorted(e["path"] for e in manifest["files"].values()) == ["blob.bin", "main.py", "pkg/__init__.py", "pkg/util.py"]
    assert "blob.bin" in cm["binaryData"]
    assert job.status == "PENDING" and job.target_instances == 3 and job.min_instances == 2


def test_api_server_validation_is_reported(namespace: str, pool: str, tmp_path: Path) -> None:
    script = tmp_path / "a.py"
    script.write_text("")
    job = jobs.submit_file(script, pool, namespace=namespace, target_instances=2)
    body = Kube(namespace).get_job(job.name)
    spec = body.spec.model_copy(update={"min_instances": 5})  # skips the SDK's own check on purpose
    bad = body.model_copy(update={"spec": spec, "metadata": {"name": "bad-job"}})
    with pytest.raises(Invalid, match="minInstances must not exceed targetInstances"):
        Kube(namespace).create_job(bad)


def test_unknown_pool_and_limits(namespace: str, pool: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "a.py"
    script.write_text("")
    with pytest.raises(jobs.PoolNotFound):
        jobs.submit_file(script, "no-such-pool", namespace=namespace)
    assert cli.main(["submit", str(script), "--pool", pool, "-n", namespace, "--instances", "5",
                     "--min-instances", "4"]) == 2
    assert "max_nodes (3)" in capsys.readouterr().err
    assert json.loads(_cli_json(capsys, ["list", "-n", namespace, "-o", "json"]))["items"] == []


def _cli_json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert cli.main(argv) == 0
    return capsys.readouterr().out


def test_wait_timeout_cancel_list_delete(kubectl: Any, namespace: str, pool: str, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "a.py"
    script.write_text("")
    job = jobs.submit_file(script, pool, namespace=namespace, name="idle")
    with pytest.raises(TimeoutError):
        job.wait(2)  # nothing runs it: no operator here
    assert cli.main(["wait", "idle", "-n", namespace, "--timeout", "1"]) == 124
    rows = json.loads(_cli_json(capsys, ["list", "-n", namespace, "-o", "json"]))["items"]
    assert [(r["metadata"]["name"], r["spec"]["computePool"]) for r in rows] == [("idle", pool)]
    assert cli.main(["cancel", f"{namespace}/idle"]) == 0
    assert kubectl.json("get", "mljob", "idle", "-n", namespace)["spec"]["cancel"] is True
    jobs.delete_job(job)
    assert cli.main(["status", "idle", "-n", namespace]) == 3


def test_forbidden_is_one_line(kubectl: Any, cluster: Any, namespace: str, pool: str, tmp_path: Path,
                               monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    kubectl("create", "serviceaccount", "nobody", "-n", namespace, check=True)
    token = kubectl("create", "token", "nobody", "-n", namespace, check=True).stdout.strip()
    config = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    config["users"] = [{"name": u["name"], "user": {"token": token}} for u in config["users"]]
    for ctx in config["contexts"]:
        ctx["context"]["namespace"] = namespace
    (tmp_path / "kubeconfig").write_text(yaml.safe_dump(config))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "kubeconfig"))
    script = tmp_path / "a.py"
    script.write_text("")
    assert cli.main(["submit", str(script), "--pool", pool]) == 4
    err = capsys.readouterr().err
    assert err.startswith("kubepool: error: create MLJob") and "forbidden" in err and err.count("\n") == 1
