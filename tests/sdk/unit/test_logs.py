"""`get_logs()` and `follow_logs()` show what the payload printed exactly as Snowflake's own log extraction
(`_extract_payload_logs` of snowflake-ml-python 2.6.0, run from the wheel) shows it for the same log (#38 item 2)."""

from __future__ import annotations

import ast
import bisect
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from fakes import FakeKube

from kubepool import contract, jobs
from kubepool.jobs.logs import payload_output, stream_payload
from support import snowflake_wheel

START, END = contract.LOG_START_MSG.splitlines(), contract.LOG_END_MSG.splitlines()
RAY = ["Local node IP: 10.0.0.2", "--------------------", "Ray runtime started.", "--------------------"]
LOGS = {
    "head": [*RAY, "kubepool[0]: Target instance requirement met: 2/2 instances available", *START, "epoch 1",
             "(raylet) task log", "Traceback (most recent call last):", '  File "train.py"', "ValueError: boom", *END,
             "kubepool[0]: the launcher exited with code 1", "2026-12-01 INFO ray shutdown"],
    "worker without banners": [*RAY, "kubepool[1]: Worker node started", "kubepool[1]: the head finished the job; leaving"],
    "payload prints the end banner": [*RAY, *START, "a", *END, "b", *END, "kubepool[0]: done"],
    "stderr inside a banner": [*RAY, START[0], "warning: x", START[1], START[2], "out", END[0], END[1], "err", END[2], "tail"],
    "killed before the end": [*RAY, *START, "step 1", "step 2"],
    "blank lines and indents": [*START, "", "   indented", "text  ", "", *END],
    "separators in the output": [*START, START[0], "not a banner", END[0], *END],
    "end before start": [*END, "x", *START, "y", *END],
    "empty": [],
}


@pytest.fixture(scope="module")
def snowflake_extract() -> Any:
    """The wheel's `_extract_payload_logs`, run with the wheel's own banner constants (constants.py, its two
    imports stubbed: they only size compute resources)."""
    with pytest.MonkeyPatch.context() as mp:
        constants = snowflake_wheel.load("snowflake/ml/jobs/_utils/constants.py", mp, {
            "snowflake.ml._internal.utils.snowflake_env": {"SnowflakeCloudType": mock.MagicMock()},
            "snowflake.ml.jobs._utils.type_utils": {"ComputeResources": mock.MagicMock()}})
    tree = ast.parse(snowflake_wheel.source("snowflake/ml/jobs/job.py"))
    [fn] = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "_extract_payload_logs"]
    scope: dict[str, Any] = {"bisect": bisect, "constants": constants}
    exec(compile(ast.Module(body=[fn], type_ignores=[]), "snowflake/ml/jobs/job.py", "exec"), scope)  # noqa: S102
    assert (constants.LOG_START_MSG, constants.LOG_END_MSG) == (contract.LOG_START_MSG, contract.LOG_END_MSG)
    return scope["_extract_payload_logs"]


@pytest.mark.parametrize("case", list(LOGS))
def test_get_logs_is_snowflakes_extraction(snowflake_extract: Any, fake_kube: FakeKube, tmp_path: Path,
                                           case: str) -> None:
    script = tmp_path / "t.py"
    script.write_text("print(1)\n")
    job = jobs.submit_file(script, "cpu", name="j", target_instances=2)
    fake_kube.logs = {0: LOGS[case]}
    theirs = snowflake_extract("\n".join(LOGS[case]))
    assert job.get_logs() == theirs == payload_output(LOGS[case])
    assert job.get_logs(as_list=True) == theirs.splitlines()
    assert job.get_logs(verbose=True) == "\n".join(LOGS[case])  # the banners and kubepool's lines only here
    # Following the log as it is written shows the same lines.
    assert "\n".join(stream_payload(iter(LOGS[case]))).strip() == theirs


def test_timestamps_are_kept_on_the_lines_shown(snowflake_extract: Any) -> None:
    stamped = [f"2026-12-05T00:00:{i:02d}Z {line}" for i, line in enumerate(LOGS["head"])]
    shown = list(stream_payload(iter(stamped), lambda line: line.partition(" ")[2]))
    assert [line.partition(" ")[2] for line in shown] == snowflake_extract("\n".join(LOGS["head"])).splitlines()
    assert shown[0].startswith("2026-12-05T00:00:")
