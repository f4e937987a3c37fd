"""The launcher's entrypoint kinds and the payload's outcome (termination log, result file)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import cloudpickle
import pytest

from kubepool.contract import TERMINATION_MESSAGE_MAX_BYTES, Entrypoint
from kubepool.runtime import result
from kubepool.runtime.launcher import run_entrypoint
from kubepool.runtime.result import ExecutionResult


@pytest.fixture()
def payload(tmp_path: Path) -> Iterator[Path]:
    """A payload dir; the launcher changes cwd, sys.path and sys.argv, so restore them."""
    cwd, path, argv = os.getcwd(), list(sys.path), list(sys.argv)
    (tmp_path / "job.py").write_text(
        "import sys\n"
        "def train(a, b='x'):\n    return {'a': a, 'b': b}\n"
        "if __name__ == '__main__':\n"
        "    __return__ = sys.argv[1:]\n"
        "    if sys.argv[1:] == ['fail']:\n        raise RuntimeError('boom')\n"
        "    if sys.argv[1:] == ['exit']:\n        sys.exit(4)\n"
    )
    (tmp_path / "jobmod.py").write_text("import sys\nif __name__ == '__main__':\n    sys.exit(int(sys.argv[1]))\n")
    yield tmp_path
    os.chdir(cwd)
    sys.path[:] = path
    sys.argv[:] = argv
    sys.modules.pop("job", None)
    sys.modules.pop("jobmod", None)


def test_script_gets_argv_and_returns_dunder_return(payload: Path) -> None:
    assert run_entrypoint(Entrypoint(path="job.py", args=["1", "2"]), payload, ["--x"]) == (0, ["--x", "1", "2"])
    assert os.getcwd() == str(payload)


def test_script_exit_code_and_exception(payload: Path) -> None:
    assert run_entrypoint(Entrypoint(path="job.py", args=["exit"]), payload, []) == (4, None)
    with pytest.raises(RuntimeError, match="boom"):
        run_entrypoint(Entrypoint(path="job.py", args=["fail"]), payload, [])


def test_module_and_command(payload: Path) -> None:
    assert run_entrypoint(Entrypoint(module="jobmod", args=["3"]), payload, []) == (3, None)
    assert run_entrypoint(Entrypoint(command=[sys.executable, "-c", "import sys; sys.exit(5)"]), payload, []) == (5, None)


def test_function_from_file_and_from_pickle(payload: Path) -> None:
    assert run_entrypoint(Entrypoint(path="job.py", function="train", args=["7"]), payload, []) == (0, {"a": "7", "b": "x"})
    (payload / "fn.pkl").write_bytes(cloudpickle.dumps((lambda a, b: a * b, (6,), {"b": 7})))
    assert run_entrypoint(Entrypoint(path="fn.pkl", function="f"), payload, []) == (0, 42)


def test_termination_message_is_short_and_starts_with_the_error() -> None:
    res = ExecutionResult(False, 1, error='ValueError: "bad" ' + "x" * 10000, traceback="tb")
    text = result.termination_message(res, 0)
    assert len(text.encode()) <= TERMINATION_MESSAGE_MAX_BYTES
    assert text.startswith('{"error": "ValueError: \\"bad\\" xxx')
    assert json.loads(text)["exitCode"] == 1


def test_result_file(tmp_path: Path) -> None:
    result.write_result_file(tmp_path, ExecutionResult(True, 0, value=object()))
    assert json.loads((tmp_path / "result.json").read_text())["value"].startswith("<object")


def test_instances_that_never_join_fail_the_head_as_instances_unavailable(monkeypatch: pytest.MonkeyPatch,
                                                                           tmp_path: Path) -> None:
    from kubepool.contract import ENV_PAYLOAD_DIR, INSTANCES_UNAVAILABLE, Group, JobContract, RunMode
    from kubepool.runtime import gate, launcher

    c = JobContract(job_name="j", namespace="ns", job_uid="u", groups=[Group(name="a", instance_type="t", count=2)],
                    target_instances=2, min_instances=2).model_copy(update={"mode": RunMode.HEAD})

    def never_joined(*_: object) -> int:
        raise gate.InstancesTimeoutError("waiting for 2 instances, only 1 available")

    monkeypatch.setattr(launcher, "gate_instances", never_joined)
    res = launcher.execute(c, {ENV_PAYLOAD_DIR: str(tmp_path)})
    assert not res.success and res.reason == INSTANCES_UNAVAILABLE and "only 1 available" in (res.error or "")


def test_a_container_entrypoint_runs_with_its_own_arguments_a_program_with_the_hyperparameters(payload: Path) -> None:
    """SageMaker runs ContainerEntrypoint + ContainerArguments as given (the SDK v3's `/bin/bash -c .../sm_train.sh`:
    `bash --epochs 3 -c` fails); the hyperparameters are arguments only of a program run as the toolkit runs it."""
    from kubepool.contract import ENV_PAYLOAD_DIR, Group, JobContract, RunMode
    from kubepool.runtime import launcher

    def run(ep: Entrypoint, **hps: str) -> ExecutionResult:
        c = JobContract(job_name="j", namespace="ns", job_uid="u", groups=[Group(name="a", instance_type="t", count=1)],
                        target_instances=1, min_instances=1, entrypoint=ep, mode=RunMode.SAGEMAKER,
                        hyperparameters={"epochs": "3", **hps})
        return launcher.execute(c, {ENV_PAYLOAD_DIR: str(payload), "SM_USER_ARGS": json.dumps(["--epochs", "3"])})

    own = run(Entrypoint(command=[sys.executable, "-c", "import sys; sys.exit(sys.argv[1:] != ['-x'])"], args=["-x"]))
    assert own.success, own.error
    assert run(Entrypoint(path="job.py", args=["1"])).value == ["--epochs", "3", "1"]
    # Script mode's shell program is a command too, but the toolkit's program: it gets the hyperparameters.
    (payload / "run.sh").write_text('#!/bin/sh\nprintf "%s|" "$@" > args.txt\n')
    (payload / "run.sh").chmod(0o755)
    assert run(Entrypoint(path="run.sh"), sagemaker_program='"run.sh"').success
    assert (payload / "args.txt").read_text() == "--epochs|3|"
