"""Snowflake's stages, code bundles and job definitions with their Kubernetes meaning (no cluster): what each
creates, what a run of it is, and the refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fakes import FakeKube

from kubepool import jobs, naming
from kubepool.jobs.bundles import TEMPLATE_KEY
from kubepool.jobs.definitions import cli_arguments
from kubepool.jobs.payload import MANIFEST_KEY


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "train.py").write_text("import sys\nprint(sys.argv[1:])\n")
    (tmp_path / "proj" / "util.py").write_text("")
    return tmp_path / "proj"


def test_submit_from_stage_runs_code_already_in_the_cluster(fake_kube: FakeKube) -> None:
    job = jobs.submit_from_stage("pvc://team-code/projects/a", "cpu", entrypoint="train.py", stage_name="@ignored",
                                 args=["--x", "1"], target_instances=2)
    spec = fake_kube.jobs[("team", job.name)].spec
    assert spec.code is not None and spec.code.persistent_volume_claim is not None
    assert (spec.code.persistent_volume_claim.claim_name, spec.code.persistent_volume_claim.sub_path) == ("team-code", "projects/a")
    assert (spec.entrypoint.file, spec.args, spec.target_instances) == ("train.py", ["--x", "1"], 2)
    assert not fake_kube.configmaps  # nothing uploaded
    cm = jobs.submit_from_stage("configmap://scripts", "cpu", entrypoint=["python", "run.py"])
    assert fake_kube.jobs[("team", cm.name)].spec.code.config_map == "scripts"  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="copy an S3 prefix to a volume"):
        jobs.submit_from_stage("s3://bucket/code", "cpu", entrypoint="train.py")


def test_a_code_bundle_is_stored_once_and_backs_many_jobs(fake_kube: FakeKube, project: Path) -> None:
    bundle = jobs.register_code_bundle(project, "cpu", "pvc://results/runs", stage_name="@s", name="trainer",
                                       pip_requirements=["tqdm"], target_instances=2, env_vars={"MODE": "x"})
    assert bundle.name == "team/trainer" and repr(bundle) == "MLCodeBundle('team/trainer')"
    cm = fake_kube.configmaps[("team", "trainer")]
    assert cm.metadata.labels[naming.LABEL_STORED_PAYLOAD] == naming.STORED_CODE_BUNDLE  # type: ignore[index,union-attr]
    assert not cm.metadata.ownerReferences  # type: ignore[union-attr]  # outlives every job run from it
    assert set(json.loads(cm.data[MANIFEST_KEY])["files"]) == {"train.py", "util.py"}  # type: ignore[index]
    first = jobs.register_job_from_code_bundle(bundle, entrypoint="train.py", args=["a"])
    second = jobs.register_job_from_code_bundle("trainer", entrypoint="train.py")
    for job in (first, second):
        spec = fake_kube.jobs[("team", job.name)].spec
        assert spec.code is not None and spec.code.config_map == "trainer"
        assert (spec.pip_requirements, spec.target_instances, [e.name for e in spec.env]) == (["tqdm"], 2, ["MODE"])
        assert spec.output is not None and spec.output.persistent_volume_claim.claim_name == "results"  # type: ignore[union-attr]
    assert fake_kube.jobs[("team", first.name)].spec.args == ["a"]
    assert ("team", f"{first.name}-payload") not in fake_kube.configmaps  # no per-job copy of the code
    with pytest.raises(ValueError, match="'missing.py' is not a file of code bundle team/trainer"):
        jobs.register_job_from_code_bundle(bundle, entrypoint="missing.py")
    jobs.register_code_bundle(project, "cpu", name="trainer")  # registering again replaces it
    assert "replace_configmap trainer" in fake_kube.calls
    bundle.delete()
    assert ("team", "trainer") not in fake_kube.configmaps
    with pytest.raises(ValueError, match="no code-bundle team/trainer"):
        jobs.register_job_from_code_bundle("trainer", entrypoint="train.py")


def test_a_bundle_never_deletes_another_configmap(fake_kube: FakeKube, project: Path) -> None:
    jobs.submit_file(project / "train.py", "cpu", name="plain")  # its payload ConfigMap: not a bundle
    with pytest.raises(ValueError, match="is not a code-bundle"):
        jobs.delete_code_bundle("plain-payload")
    assert ("team", "plain-payload") in fake_kube.configmaps


def test_cli_arguments() -> None:
    assert cli_arguments(["pos", "--lr", "0.1", "--verbose"], ["a"], {"lr": 0.5, "epochs": 3}) == \
        ["a", "pos", "--lr", "0.5", "--verbose", "--epochs", "3"]
    assert cli_arguments(None, [1, 2], {}) == ["1", "2"]


def test_a_job_definition_runs_once_per_call(fake_kube: FakeKube, project: Path) -> None:
    d = jobs.MLJobDefinition.register(project, "cpu", "@stage", name="nightly", entrypoint="train.py",
                                      arg_protocol=jobs.ArgProtocol.CLI, default_args=["--lr", "0.1"], target_instances=2)
    cm = fake_kube.configmaps[("team", "nightly")]
    assert cm.metadata.labels[naming.LABEL_STORED_PAYLOAD] == naming.STORED_JOB_DEFINITION  # type: ignore[index,union-attr]
    assert json.loads(cm.data[TEMPLATE_KEY])["targetInstances"] == 2  # type: ignore[index]
    a, b = d("x", lr=0.5), d()
    assert a.name != b.name and a.name.startswith("nightly-")
    assert fake_kube.jobs[("team", a.name)].spec.args == ["x", "--lr", "0.5"]
    assert fake_kube.jobs[("team", b.name)].spec.args == ["--lr", "0.1"]
    assert fake_kube.jobs[("team", a.name)].spec.code.config_map == "nightly"  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="exists: pass overwrite=True"):
        jobs.MLJobDefinition.register(project, "cpu", "@stage", name="nightly", entrypoint="train.py")
    jobs.MLJobDefinition.register(project, "cpu", "@stage", name="nightly", entrypoint="train.py", overwrite=True)
    plain = jobs.MLJobDefinition(project, "cpu", name="plain", entrypoint="train.py")
    with pytest.raises(ValueError, match="keyword arguments are not supported"):
        plain(lr=1)
    with pytest.raises(ValueError, match="PICKLE passes Python arguments to a function"):
        jobs.MLJobDefinition(project, "cpu", arg_protocol="pickle")
    with pytest.raises(ValueError, match="entrypoint None is not a file"):
        jobs.MLJobDefinition(project, "cpu", name="two-files")()  # two top-level .py files: name one
    d.delete()
    assert ("team", "nightly") not in fake_kube.configmaps


def square(x: int) -> int:
    return x * x


def test_a_function_definition_ships_each_calls_arguments(fake_kube: FakeKube) -> None:
    d = jobs.MLJobDefinition(square, "cpu", arg_protocol=jobs.ArgProtocol.PICKLE)
    job = d(7)
    spec = fake_kube.jobs[("team", job.name)].spec
    assert spec.entrypoint.function == "main" and spec.code.config_map == f"{job.name}-payload"  # type: ignore[union-attr]
    assert ("team", f"{job.name}-payload") in fake_kube.configmaps
