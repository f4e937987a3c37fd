"""Snowflake's runtime_environment and imports, mapped to the job's image and payload (no cluster)."""

from __future__ import annotations

import json
import sys
import zipfile
from pathlib import Path

import pytest
from fakes import FakeKube, pool

from kubepool import jobs
from kubepool.jobs.options import RUNTIME_TAG_ENV, import_files, resolve_image, with_tag
from kubepool.jobs.payload import MANIFEST_KEY


def test_with_tag() -> None:
    assert with_tag("reg:5000/team/rt:1.0", "2.0") == "reg:5000/team/rt:2.0"
    assert with_tag("team/rt", "2.0") == "team/rt:2.0"
    assert with_tag("team/rt:1@sha256:" + "a" * 64, "2.0") == "team/rt:2.0"


def test_resolve_image(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(RUNTIME_TAG_ENV, raising=False)
    never = lambda: pytest.fail("the pool is read only for a tag")  # noqa: E731
    assert resolve_image(None, None, never) is None
    assert resolve_image("mine:1", None, never) == "mine:1"
    assert resolve_image(None, "reg/team/rt:3", never) == "reg/team/rt:3"
    assert resolve_image(None, "1.7.1", lambda: "team/gpu:1.0") == "team/gpu:1.7.1"
    with pytest.raises(ValueError, match="is a tag, and the compute pool names no image"):
        resolve_image(None, "1.7.1", lambda: None)
    with pytest.raises(ValueError, match="not both"):
        resolve_image("mine:1", "1.7.1", never)
    monkeypatch.setenv(RUNTIME_TAG_ENV, "9")
    assert resolve_image(None, None, lambda: "team/rt:1") == "team/rt:9"


def test_import_files_place_each_by_its_module_path(tmp_path: Path) -> None:
    (tmp_path / "lib" / "pkg" / "sub").mkdir(parents=True)
    (tmp_path / "lib" / "pkg" / "__init__.py").write_text("")
    (tmp_path / "lib" / "pkg" / "sub" / "m.py").write_text("X = 1\n")
    (tmp_path / "u.py").write_text("Y = 2\n")
    with zipfile.ZipFile(tmp_path / "z.zip", "w") as z:
        z.writestr("zmod.py", "Z = 3\n")
    files = import_files([tmp_path / "lib" / "pkg", (str(tmp_path / "u.py"), "team.u"), (tmp_path / "z.zip",),
                          (tmp_path / "lib" / "pkg", "a.pkg")])
    assert sorted(f.path for f in files) == ["a/pkg/__init__.py", "a/pkg/sub/m.py", "pkg/__init__.py",
                                             "pkg/sub/m.py", "team/u.py", "z.zip"]
    with pytest.raises(ValueError, match="must end with the source's name 'u'"):
        import_files([(str(tmp_path / "u.py"), "team.other")])
    for hostile in ("..u", "a/../u", "a..u", " "):
        with pytest.raises(ValueError, match="not a dotted module path"):
            import_files([(str(tmp_path / "u.py"), hostile)])
    with pytest.raises(FileNotFoundError):
        import_files([tmp_path / "missing"])
    # Laid out as the runtime lays out a payload (its dir and zips on sys.path), each imports by its path.
    root = tmp_path / "payload"
    for f in files:
        (root / f.path).parent.mkdir(parents=True, exist_ok=True)
        (root / f.path).write_bytes(f.content)
    code = "import sys; sys.path[:0] = [sys.argv[1], sys.argv[1] + '/z.zip']; " \
           "import pkg.sub.m, a.pkg.sub.m, team.u, zmod; print(pkg.sub.m.X + team.u.Y + zmod.Z)"
    import subprocess

    out = subprocess.run([sys.executable, "-c", code, str(root)], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "6", out.stderr


def test_submit_with_imports_and_runtime_environment(fake_kube: FakeKube, tmp_path: Path) -> None:
    script = tmp_path / "main.py"
    script.write_text("import helpers\n")
    (tmp_path / "helpers.py").write_text("")
    fake_kube.pools["gpu"] = pool("gpu", 2, "GPU_NV_S", image="team/rt:1.0-cuda")
    job = jobs.submit_file(script, "gpu", imports=[tmp_path / "helpers.py"], runtime_environment="1.1-cuda")
    stored = fake_kube.jobs[("team", job.name)]
    assert stored.spec.image == "team/rt:1.1-cuda"
    manifest = json.loads(fake_kube.configmaps[("team", f"{job.name}-payload")].data[MANIFEST_KEY])  # type: ignore[index]
    assert set(manifest["files"]) == {"main.py", "helpers.py"}
    with pytest.raises(ValueError, match="would replace files of the payload: main.py"):
        jobs.submit_file(script, "gpu", imports=[script])


# --- Snowflake's keyword options: each honoured with its effect, or refused (#38 item 1) -----------------------
def _spec(fake_kube: FakeKube, job: jobs.MLJob) -> object:
    return fake_kube.jobs[(job.namespace, job.name)]


def test_num_instances_raises_target_instances_as_snowflakes(fake_kube: FakeKube, tmp_path: Path) -> None:
    script = tmp_path / "t.py"
    script.write_text("print(1)\n")
    job = jobs.submit_file(script, "cpu", num_instances=3)
    assert _spec(fake_kube, job).spec.target_instances == 3  # type: ignore[attr-defined]
    job = jobs.submit_file(script, "cpu", target_instances=4, num_instances=3)  # Snowflake: the larger
    assert _spec(fake_kube, job).spec.target_instances == 4  # type: ignore[attr-defined]


def test_additional_payloads_are_imports(fake_kube: FakeKube, tmp_path: Path) -> None:
    (tmp_path / "helpers.py").write_text("X = 1\n")
    script = tmp_path / "t.py"
    script.write_text("import helpers\n")
    job = jobs.submit_file(script, "cpu", additional_payloads=[str(tmp_path / "helpers.py")])
    manifest = json.loads(fake_kube.configmaps[("team", f"{job.name}-payload")].data[MANIFEST_KEY])  # type: ignore[index]
    assert "helpers.py" in manifest["files"]
    with pytest.raises(ValueError, match="imports or additional_payloads"):
        jobs.submit_file(script, "cpu", imports=[str(tmp_path / "helpers.py")], additional_payloads=["x"])


def test_parallel_from_a_stage_runs_on_every_instance(fake_kube: FakeKube) -> None:
    job = jobs.submit_from_stage("configmap://code", "cpu", entrypoint="train.py", target_instances=2, parallel=True)
    assert _spec(fake_kube, job).spec.mode.value == "parallel"  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="imports"):
        jobs.submit_from_stage("configmap://code", "cpu", entrypoint="train.py", imports=["x.py"])


def test_remote_parallel_is_refused_in_snowflakes_words(fake_kube: FakeKube) -> None:
    """Snowflake refuses parallel=True for a function (MLJobDefinition._create); the message is read from the wheel."""
    import ast

    from support import snowflake_wheel

    tree = ast.parse(snowflake_wheel.source("snowflake/ml/jobs/job_definition.py"))
    theirs = next("".join(c.value for c in ast.walk(n) if isinstance(c, ast.Constant) and isinstance(c.value, str))
                  for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
                  and n.func.id == "ValueError" and "parallel=True" in ast.unparse(n))
    with pytest.raises(ValueError) as err:
        jobs.remote("cpu", parallel=True)
    assert str(err.value) == theirs
    with pytest.raises(ValueError, match="parallel must be a boolean"):
        jobs.remote("cpu", parallel="yes")


def test_secrets_of_a_code_bundle_are_env_of_its_jobs(fake_kube: FakeKube, tmp_path: Path) -> None:
    script = tmp_path / "t.py"
    script.write_text("print(1)\n")
    bundle = jobs.register_code_bundle(script, "cpu", None, name="b1", secrets=["hf-token"], stage_name="payloads")
    annotations = fake_kube.configmaps[("team", "b1")].metadata.annotations  # type: ignore[union-attr]
    assert annotations == {"kubepool.dev/stage-name": "payloads"}
    job = jobs.register_job_from_code_bundle(bundle, entrypoint="t.py")
    assert _spec(fake_kube, job).spec.env_from == [{"secretRef": {"name": "hf-token"}}]  # type: ignore[attr-defined]


def test_comment_stage_name_and_schema(fake_kube: FakeKube, tmp_path: Path) -> None:
    script = tmp_path / "t.py"
    script.write_text("print(1)\n")
    job = jobs.submit_file(script, "cpu", comment="nightly", stage_name="payload_stage", schema="other")
    assert job.namespace == "other"
    assert _spec(fake_kube, job).metadata["annotations"] == {  # type: ignore[attr-defined]
        "kubepool.dev/comment": "nightly", "kubepool.dev/stage-name": "payload_stage"}
    with pytest.raises(ValueError, match="schema='other' and namespace='team'"):
        jobs.submit_file(script, "cpu", schema="other", namespace="team")


@pytest.mark.parametrize(("key", "value"), [
    ("external_access_integrations", ["PYPI"]), ("query_warehouse", "WH"), ("database", "DB"),
    ("artifact_repositories", ["repo"]), ("preflight", "wiring"), ("enable_metrics", False),
    ("default_args", ["--epochs", "3"]), ("overwrite", True), ("arg_protocol", "pickle"),
])
def test_options_without_a_kubernetes_meaning_are_refused(fake_kube: FakeKube, tmp_path: Path, key: str,
                                                          value: object) -> None:
    script = tmp_path / "t.py"
    script.write_text("print(1)\n")
    with pytest.raises(ValueError, match=key):
        jobs.submit_file(script, "cpu", **{key: value})
    assert fake_kube.jobs == {}


def test_empty_or_default_values_of_refused_options_pass(fake_kube: FakeKube, tmp_path: Path) -> None:
    script = tmp_path / "t.py"
    script.write_text("print(1)\n")
    jobs.submit_file(script, "cpu", external_access_integrations=[], enable_metrics=True, query_warehouse=None)
    assert len(fake_kube.jobs) == 1


def test_cli_default_args_merge_as_snowflakes(fake_kube: FakeKube, tmp_path: Path) -> None:
    script = tmp_path / "t.py"
    script.write_text("print(1)\n")
    job = jobs.submit_file(script, "cpu", args=["data"], arg_protocol="cli", default_args=["--epochs", "3", "base"])
    assert _spec(fake_kube, job).spec.args == ["data", "base", "--epochs", "3"]  # type: ignore[attr-defined]


def test_list_jobs_has_snowflakes_columns(fake_kube: FakeKube, tmp_path: Path) -> None:
    """The columns of Snowflake's list_jobs, read from the select of its job history query in the wheel."""
    import ast

    from kubepool.jobs.manager import SNOWFLAKE_COLUMNS
    from support import snowflake_wheel

    tree = ast.parse(snowflake_wheel.source("snowflake/ml/jobs/manager.py"))
    [fn] = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "_get_job_history_spcs"]
    calls = sorted((c.lineno, c.col_offset, c.args[0].value.strip('"')) for c in ast.walk(fn) if isinstance(c, ast.Call)
                   and isinstance(c.func, ast.Attribute) and c.func.attr == "alias")
    theirs = [name for _, _, name in calls]
    assert list(SNOWFLAKE_COLUMNS) == theirs
    script = tmp_path / "t.py"
    script.write_text("print(1)\n")
    jobs.submit_file(script, "cpu", name="a", target_instances=2)
    table = jobs.list_jobs(10, None, None, fake_kube)
    assert list(table.columns) == theirs and table.iloc[0]["target_instances"] == 2
    with pytest.raises(ValueError, match="database"):
        jobs.list_jobs(10, "DB", "team")


def test_get_and_delete_take_the_session_second(fake_kube: FakeKube, tmp_path: Path) -> None:
    script = tmp_path / "t.py"
    script.write_text("print(1)\n")
    jobs.submit_file(script, "cpu", name="a")
    assert jobs.get_job("team/a", fake_kube).id == "team/a"
    jobs.delete_job("team/a", fake_kube)
    assert fake_kube.jobs == {}


def test_a_function_definition_ships_its_imports(fake_kube: FakeKube, tmp_path: Path) -> None:
    """MLJobDefinition of a function: `imports` go with each run's payload (they were dropped)."""
    (tmp_path / "helpers.py").write_text("X = 1\n")

    def fn() -> int:
        return 1

    job = jobs.MLJobDefinition(fn, "cpu", imports=[str(tmp_path / "helpers.py")])()
    manifest = json.loads(fake_kube.configmaps[("team", f"{job.name}-payload")].data[MANIFEST_KEY])  # type: ignore[index]
    assert "helpers.py" in manifest["files"]
