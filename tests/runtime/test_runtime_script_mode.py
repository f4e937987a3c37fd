"""Script mode as the SageMaker SDK sends it (runtime.script_mode), each answer compared with the training
toolkit's own code (`sagemaker_training`) run on the same input: the environment and arguments the script gets,
the entry point rule, the tarball extraction, the entry point kinds; then a tarball in a real S3 server (moto)
fetched and run by `python -m kubepool.runtime`."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest

from kubepool.contract import (
    ENV_BASE_DIR,
    ENV_CONTRACT_FILE,
    ENV_INSTANCE_ID,
    ENV_PAYLOAD_DIR,
    ENV_POD_IP,
    ENV_RESULT_DIR,
    ENV_TERMINATION_LOG,
    Entrypoint,
    Group,
    JobContract,
    RunMode,
)
from kubepool.runtime import sagemaker, script_mode
from kubepool.runtime.sagemaker import Layout
from support import s3
from support.wheels import PROBE, PROBE_MODULE, build_probe_wheel

SUBMIT = "s3://bucket/job-1/source/sourcedir.tar.gz"
USER_HPS: dict[str, Any] = {"epochs": 3, "lr": 0.01, "name": "run one", "layers": [64, 32], "opt": {"b": 2, "a": "x"},
                            "flag": True, "k": 5, "nothing": None, "_tuning_objective_metric": "loss"}


def sdk_hyperparameters(program: str = "train.py", **extra: Any) -> dict[str, str]:
    """What the SDK sends: every value json.dumps'ed (EstimatorBase._json_encode_hyperparameters), the four
    script-mode entries added by _script_mode_hyperparam_update."""
    hps = {**USER_HPS, "sagemaker_submit_directory": SUBMIT, "sagemaker_program": program,
           "sagemaker_container_log_level": 20, "sagemaker_job_name": "job-1", "sagemaker_region": "eu-west-1",
           "sagemaker_distributed_dataparallel_enabled": False, **extra}
    return {k: json.dumps(v) for k, v in hps.items()}


def contract(hps: dict[str, str], entry: Entrypoint | None = None, count: int = 1) -> JobContract:
    return JobContract(
        job_name="job-1", namespace="ns", job_uid="u", groups=[Group(name="train", instance_type="ml.m5.xlarge",
                                                                     count=count)],
        target_instances=count, min_instances=count, entrypoint=entry or Entrypoint(path="train.py"),
        mode=RunMode.SAGEMAKER, hyperparameters=hps,
    )


TOOLKIT_ENV = """
import json, os, sys
from sagemaker_training import environment, mapping
env = environment.Environment()
print(json.dumps({"env": env.to_env_vars(), "args": mapping.to_cmd_args(env.hyperparameters),
                  "os": {k: os.environ[k] for k in ("SAGEMAKER_REGION", "SAGEMAKER_JOB_NAME")}}))
"""
# What depends on the machine the toolkit runs on, not on the job (CPUs, GPUs, installed launchers).
MACHINE = {"SM_NUM_CPUS", "SM_NUM_GPUS", "SM_NUM_NEURONS", "SM_TRAINING_ENV", "SM_FRAMEWORK_MODULE"}


def toolkit_view(base: Path) -> dict[str, Any]:
    env = {"SAGEMAKER_BASE_DIR": str(base), "PATH": "/usr/bin:/bin", "AWS_DEFAULT_REGION": "us-east-1"}
    out = subprocess.run([sys.executable, "-c", TOOLKIT_ENV], env=env, capture_output=True, text=True, check=True)
    view: dict[str, Any] = json.loads(out.stdout.splitlines()[-1])
    return view


def test_the_script_gets_what_the_toolkit_gives_it_for_the_sdks_hyperparameters(tmp_path: Path) -> None:
    """SM_HPS, every SM_HP_*, the arguments, SM_USER_ENTRY_POINT/SM_MODULE_NAME/SM_MODULE_DIR, SM_LOG_LEVEL,
    SM_FRAMEWORK_PARAMS, SAGEMAKER_REGION and SAGEMAKER_JOB_NAME: the toolkit's Environment() reading the
    config files written here is the expected value, variable by variable."""
    c = contract(sdk_hyperparameters(program="sub/train.py", sagemaker_container_log_level=30),
                 Entrypoint(path="sub/train.py"))
    sm = script_mode.of(c)
    assert sm is not None
    layout = Layout(tmp_path)
    tenv = sagemaker.training_env(c, c.identity(0), layout, num_cpus=1, num_gpus=0, module_dir=str(layout.code_dir),
                                  entry=script_mode.training_entry(sm, layout.code_dir))
    sagemaker.write_config_files(layout, tenv, sagemaker.hyperparameters(c))
    ours = sagemaker.env_vars(tenv)
    toolkit = toolkit_view(tmp_path)
    theirs: dict[str, str] = toolkit["env"]
    assert set(theirs) - MACHINE <= set(ours)
    for key in sorted(set(theirs) - MACHINE):
        assert ours[key] == theirs[key], key
    assert json.loads(ours["SM_USER_ARGS"]) == toolkit["args"]
    assert script_mode.environment(sm, {"AWS_REGION": "x", "AWS_DEFAULT_REGION": "x"}) == toolkit["os"]
    # The keys this test is about are there (not an empty comparison).
    assert {"SM_HPS", "SM_HP_LAYERS", "SM_USER_ENTRY_POINT", "SM_MODULE_DIR", "SM_LOG_LEVEL"} <= set(theirs)
    assert (theirs["SM_MODULE_DIR"], theirs["SM_LOG_LEVEL"], theirs["SM_MODULE_NAME"]) == (SUBMIT, "30", "sub/train")


def test_the_region_reaches_the_scripts_aws_sdks_unless_the_instance_names_one() -> None:
    sm = script_mode.parse(sdk_hyperparameters())
    assert sm is not None and sm.region == "eu-west-1"
    assert script_mode.environment(sm, {})["AWS_REGION"] == "eu-west-1"
    assert script_mode.environment(sm, {})["AWS_DEFAULT_REGION"] == "eu-west-1"
    assert "AWS_REGION" not in script_mode.environment(sm, {"AWS_REGION": "us-east-2"})


ENTRY_POINTS = ["train.py", "bin/train.sh", "a+b-c_d.py", "train", ".hidden.py", "", "-m", "/abs.py", "../up.py",
                "a/../b.py", "a/./b.py", "a b.py", "x;rm", "$(id).py", "a//b.py", "ok/", "über.py"]


@pytest.mark.parametrize("name", ENTRY_POINTS)
def test_the_entry_point_rule_is_the_toolkits(name: str) -> None:
    from sagemaker_training import errors, process

    try:
        process.validate_entry_point(name)
        accepted = True
    except errors.ClientError:
        accepted = False
    try:
        script_mode.validate_program(name)
        ours = True
    except script_mode.ScriptModeError:
        ours = False
    assert ours == accepted


def hostile_tarball(path: Path) -> None:
    """Traversal, absolute names, links out, a FIFO, a setuid file: what the toolkit's extraction defends against."""
    def add(tar: tarfile.TarFile, name: str, data: bytes = b"x", **kw: Any) -> None:
        info = tarfile.TarInfo(name)
        info.size = len(data) if kw.get("type", tarfile.REGTYPE) == tarfile.REGTYPE else 0
        for k, v in kw.items():
            setattr(info, k, v)
        tar.addfile(info, io.BytesIO(data) if info.size else None)

    with tarfile.open(path, "w:gz") as tar:
        add(tar, "train.py", b"print('hi')\n")
        add(tar, "../../escape.txt")
        add(tar, "/etc/abs.txt")
        add(tar, "pkg/./../pkg/mod.py")
        add(tar, "link-out", type=tarfile.SYMTYPE, linkname="../../../etc/passwd")
        add(tar, "link-in", type=tarfile.SYMTYPE, linkname="train.py")
        add(tar, "fifo", type=tarfile.FIFOTYPE)
        add(tar, "setuid.sh", b"#!/bin/sh\n", mode=0o4755)
        add(tar, "..", type=tarfile.DIRTYPE, mode=0o700)  # normalizes to nothing


def tree(root: Path) -> dict[str, tuple[str, int]]:
    out = {}
    for p in sorted(root.rglob("*")):
        kind = "link:" + os.readlink(p) if p.is_symlink() else ("dir" if p.is_dir() else p.read_text())
        out[p.relative_to(root).as_posix()] = (kind, p.lstat().st_mode & 0o7000)
    return out


def test_a_hostile_tarball_extracts_as_the_toolkit_extracts_it(tmp_path: Path) -> None:
    from sagemaker_training import files

    tarball = tmp_path / "sourcedir.tar.gz"
    hostile_tarball(tarball)
    ours, theirs = tmp_path / "ours" / "code", tmp_path / "theirs" / "code"
    ours.mkdir(parents=True)
    theirs.mkdir(parents=True)
    script_mode.extract(tarball, ours)
    with tarfile.open(tarball, "r:gz") as t:
        files._safe_extractall(t, str(theirs))
    assert tree(ours) == tree(theirs)
    assert ours.stat().st_mode == theirs.stat().st_mode
    assert "escape.txt" in tree(ours) and not (tmp_path / "escape.txt").exists()  # landed inside, not outside
    assert not list(tmp_path.rglob("fifo")) and not (ours / "link-out").exists()


@pytest.mark.parametrize("program", ["train.py", "run.sh", "train", "sub/train.py"])
@pytest.mark.parametrize("setup_py", [False, True])
def test_the_entry_point_kind_is_the_toolkits(tmp_path: Path, program: str, setup_py: bool) -> None:
    """Package (setup.py: `python -m`), Python program, or command (the shell), as _entry_point_type.get says,
    and each run the way the toolkit's ProcessRunner._create_command runs it."""
    from sagemaker_training import _entry_point_type

    (tmp_path / "sub").mkdir()
    if setup_py:
        (tmp_path / "setup.py").write_text("")
    sm = script_mode.ScriptMode(program=program, submit_dir=SUBMIT, region=None, log_level=20, job_name="j")
    ep = script_mode.entrypoint(sm, tmp_path, ["--x", "1"])
    kind = _entry_point_type.get(str(tmp_path), program)
    expected = {
        _entry_point_type.PYTHON_PACKAGE: Entrypoint(module=program.removesuffix(".py"), args=["--x", "1"]),
        _entry_point_type.PYTHON_PROGRAM: Entrypoint(path=program, args=["--x", "1"]),
        _entry_point_type.COMMAND: Entrypoint(command=["/bin/sh", "-c", './"$0" "$@"', program], args=["--x", "1"]),
    }[kind]
    assert ep == expected


def test_a_command_entry_point_runs_through_the_shell_with_its_arguments_unparsed(tmp_path: Path) -> None:
    (tmp_path / "run.sh").write_text('#!/bin/sh\nprintf "%s|" "$@"\n')
    sm = script_mode.ScriptMode(program="run.sh", submit_dir=None, region=None, log_level=20, job_name="j")
    env, pipped = script_mode.install(sm, tmp_path, tmp_path / "pip", {"PATH": "/usr/bin:/bin"})
    assert pipped is None and os.access(tmp_path / "run.sh", os.X_OK)
    ep = script_mode.entrypoint(sm, tmp_path, ["--name", "a b; echo no"])
    out = subprocess.run([*(ep.command or []), *ep.args], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert out.stdout == "--name|a b; echo no|"


def test_requirements_txt_is_installed_into_the_job_prefix_not_the_image(tmp_path: Path) -> None:
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text("")
    (code / "requirements.txt").write_text(f"# the source dir's own\n{PROBE}==0.1\n")
    house = tmp_path / "wheelhouse"
    build_probe_wheel(house)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PIP_FIND_LINKS": str(house), "PIP_NO_INDEX": "1"}
    sm = script_mode.parse(sdk_hyperparameters())
    assert sm is not None
    new_env, done = script_mode.install(sm, code, tmp_path / "pip", env)
    assert done is not None and PROBE in done
    out = subprocess.run([sys.executable, "-c", f"import {PROBE_MODULE}; print({PROBE_MODULE}.__file__)"], env=new_env,
                         capture_output=True, text=True, check=True).stdout
    assert out.startswith(str(tmp_path / "pip"))


def test_the_source_dir_is_read_from_the_jobs_own_s3_endpoint() -> None:
    """Where the job's output (or checkpoints, or channels) live, as the SageMaker API server's data settings
    give them; the toolkit's S3_ENDPOINT_URL first, AWS_ENDPOINT_URL last."""
    from kubepool.contract import Channel, ChannelSource, OutputTarget

    plain = contract(sdk_hyperparameters())
    assert script_mode.job_s3_endpoint(plain) is None
    chan = Channel(name="train", source=ChannelSource(s3_uri="s3://b/d", s3_endpoint_url="http://data:9000"))
    out = OutputTarget(location="s3://b/o", s3_uri="s3://b/o", s3_endpoint_url="http://out:9000")
    assert script_mode.job_s3_endpoint(plain.model_copy(update={"channels": [chan]})) == "http://data:9000"
    assert script_mode.job_s3_endpoint(plain.model_copy(update={"channels": [chan], "output": out})) == "http://out:9000"
    env = {"AWS_ENDPOINT_URL": "http://env:9000"}
    assert script_mode.s3_endpoint(env, None) == "http://env:9000"
    assert script_mode.s3_endpoint(env, "http://out:9000") == "http://out:9000"
    assert script_mode.s3_endpoint({**env, "S3_ENDPOINT_URL": "http://tk:9000"}, "http://out:9000") == "http://tk:9000"


def test_a_source_dir_with_setup_py_is_installed_and_run_as_a_module(tmp_path: Path) -> None:
    """The toolkit's package kind: `pip install .` (with requirements.txt), then `python -m <program less .py>`:
    here into the job prefix, from a wheelhouse (setuptools for the build, the probe for the requirement)."""
    import importlib.metadata

    from support.wheels import cached_wheel

    code = tmp_path / "code"
    code.mkdir()
    (code / "setup.py").write_text("from setuptools import setup\nsetup(name='kp-train', version='1.0', "
                                   "py_modules=['train'], install_requires=[])\n")
    (code / "train.py").write_text("import sys\nprint('TRAINED', sys.argv[1:])\n")
    (code / "requirements.txt").write_text(f"{PROBE}==0.1\n")
    house = tmp_path / "wheelhouse"
    build_probe_wheel(house)
    for dist in ("setuptools", "wheel"):
        wheel = cached_wheel(dist, importlib.metadata.version(dist), "py3-none-any", "the package build's backend")
        (house / wheel.name).write_bytes(wheel.read_bytes())
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PIP_FIND_LINKS": str(house), "PIP_NO_INDEX": "1"}
    sm = script_mode.ScriptMode(program="train.py", submit_dir=SUBMIT, region=None, log_level=20, job_name="j")
    new_env, done = script_mode.install(sm, code, tmp_path / "pip", env)
    assert done is not None and "kp-train" in done.replace("_", "-") and PROBE in done, done
    ep = script_mode.entrypoint(sm, code, ["--epochs", "3"])
    assert ep.module == "train"
    out = subprocess.run([sys.executable, "-m", ep.module, *ep.args], env=new_env, cwd=tmp_path, capture_output=True,
                         text=True, check=True).stdout
    assert out == "TRAINED ['--epochs', '3']\n"  # from the prefix: the cwd is not the code dir


def test_a_local_submit_directory_is_taken_as_the_toolkit_takes_it(tmp_path: Path) -> None:
    """The SDK's network-isolated form names a tarball in the `code` channel; a directory or a lone file too."""
    sm = script_mode.ScriptMode(program="train.py", submit_dir=None, region=None, log_level=20, job_name="j")
    tarball = tmp_path / "sourcedir.tar.gz"
    tarball.write_bytes(sourcedir(tmp_path))
    script_mode.fetch(sm, str(tarball), tmp_path / "from-tar", {})
    assert sorted(p.name for p in (tmp_path / "from-tar").iterdir()) == ["helper.py", "train.py"]
    script_mode.fetch(sm, str(tmp_path / "src"), tmp_path / "from-dir", {})
    assert (tmp_path / "from-dir" / "helper.py").read_text() == "VALUE = 'from the tarball'\n"
    script_mode.fetch(sm, str(tmp_path / "src" / "train.py"), tmp_path / "from-file", {})
    assert [p.name for p in (tmp_path / "from-file").iterdir()] == ["train.py"]
    # Run again in its pod: what is there is kept, nothing fetched.
    assert script_mode.fetch(sm, "s3://nowhere/x.tar.gz", tmp_path / "from-file", {}).endswith("already holds the "
                                                                                               "source dir")
    with pytest.raises(script_mode.ScriptModeError, match="neither an s3:// URI nor a path"):
        script_mode.fetch(sm, str(tmp_path / "missing.tar.gz"), tmp_path / "none", {})


def test_bad_script_mode_hyperparameters_are_refused_by_name() -> None:
    with pytest.raises(script_mode.ScriptModeError, match="sagemaker_submit_directory is set without"):
        script_mode.parse({"sagemaker_submit_directory": json.dumps(SUBMIT)})
    with pytest.raises(script_mode.ScriptModeError, match="not a plain relative path"):
        script_mode.parse(sdk_hyperparameters(program="../train.py"))
    with pytest.raises(script_mode.ScriptModeError, match="logging level"):
        script_mode.parse(sdk_hyperparameters(sagemaker_container_log_level="loud"))
    with pytest.raises(script_mode.ScriptModeError, match="entrypoint names 'other.py'"):
        script_mode.of(contract(sdk_hyperparameters(), Entrypoint(path="other.py")))
    assert script_mode.parse({"epochs": "3"}) is None


SCRIPT = """
import json, os, sys
print("ARGS", sys.argv[1:])
print("HPS", os.environ["SM_HPS"])
print("WHERE", os.getcwd(), os.environ["SM_MODULE_DIR"], os.environ["SAGEMAKER_REGION"])
from helper import VALUE
print("HELPER", VALUE)
if os.environ["SM_CURRENT_HOST"] == "algo-2":
    raise ValueError("algo-2 gives up")
"""


def sourcedir(path: Path) -> bytes:
    src = path / "src"
    src.mkdir()
    (src / "train.py").write_text(SCRIPT)
    (src / "helper.py").write_text("VALUE = 'from the tarball'\n")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for f in sorted(src.iterdir()):
            tar.add(f, arcname=f.name)
    return buf.getvalue()


def test_a_tarball_in_s3_is_fetched_and_run_by_the_runtime(tmp_path: Path) -> None:
    """Two instances of a script-mode job (SageMaker mode, no code of its own) against a real S3 server: each
    extracts the SDK's sourcedir.tar.gz into its code dir and runs sagemaker_program there with the decoded
    hyperparameters; the one whose script raises fails with the script's words."""
    from sagemaker_training import mapping, params

    hps = sdk_hyperparameters()
    # Instance 1 reads the job at log level WARNING: the runtime's own script-mode lines (INFO) are not shown.
    contracts = [contract(hps, count=2), contract({**hps, "sagemaker_container_log_level": "30"}, count=2)]
    with s3.s3_server() as endpoint:
        s3.client(endpoint).create_bucket(Bucket="bucket")
        s3.client(endpoint).put_object(Bucket="bucket", Key="job-1/source/sourcedir.tar.gz", Body=sourcedir(tmp_path))
        procs = {}
        for iid in (0, 1):
            (tmp_path / f"contract-{iid}.json").write_text(contracts[iid].dumps())
            env = {k: v for k, v in os.environ.items() if not k.startswith(("SM_", "KUBEPOOL_", "AWS_"))}
            env.update({**s3.CREDENTIALS, "AWS_ENDPOINT_URL": endpoint, ENV_CONTRACT_FILE: str(tmp_path / f"contract-{iid}.json"),
                        ENV_INSTANCE_ID: str(iid), ENV_POD_IP: "127.0.0.1", ENV_BASE_DIR: str(tmp_path / f"ml-{iid}"),
                        ENV_PAYLOAD_DIR: str(tmp_path / "no-payload"), ENV_RESULT_DIR: str(tmp_path / f"result-{iid}"),
                        ENV_TERMINATION_LOG: str(tmp_path / f"termination-{iid}"), "PYTHONUNBUFFERED": "1"})
            (tmp_path / f"result-{iid}").mkdir()
            procs[iid] = subprocess.Popen([sys.executable, "-m", "kubepool.runtime"], env=env, stdout=subprocess.PIPE,
                                          stderr=subprocess.STDOUT, text=True)
        logs = {iid: p.communicate(timeout=120)[0] for iid, p in procs.items()}
    assert procs[0].returncode == 0, logs[0]
    code_dir = tmp_path / "ml-0" / "code"
    decoded = {k: json.loads(v) for k, v in hps.items()}
    user = mapping.split_by_criteria(decoded, keys=params.SAGEMAKER_HYPERPARAMETERS, prefix=params.SAGEMAKER_PREFIX)
    assert f"ARGS {mapping.to_cmd_args(user.excluded)}" in logs[0]
    assert f"WHERE {code_dir} {SUBMIT} eu-west-1" in logs[0]
    assert "HELPER from the tarball" in logs[0]
    assert f"script mode: {SUBMIT} extracted into {code_dir}" in logs[0]
    assert procs[1].returncode == 1, logs[1]
    assert "HELPER from the tarball" in logs[1] and "script mode:" not in logs[1]
    assert json.loads((tmp_path / "termination-1").read_text())["error"] == "ValueError: algo-2 gives up"
    assert (tmp_path / "ml-1" / "output" / "failure").read_text() == "ValueError: algo-2 gives up"


def test_a_job_with_code_of_its_own_and_a_source_dir_is_refused(tmp_path: Path) -> None:
    """Two sources for /opt/ml/code (the kubepool SDK's ConfigMap, unpacked there, and the tarball): refused before
    either is run, naming both."""
    from kubepool.runtime import main

    env = {ENV_BASE_DIR: str(tmp_path), ENV_PAYLOAD_DIR: str(tmp_path / "code")}
    with pytest.raises(script_mode.ScriptModeError, match=f"ships code and names sagemaker_submit_directory {SUBMIT}"):
        main.prepare_script(contract(sdk_hyperparameters()), env, unpacked=True)
