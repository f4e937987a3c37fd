"""The result line, @remote's payload and runner (no cluster)."""

from __future__ import annotations

import base64
import importlib.util
import subprocess
import sys
from pathlib import Path

import cloudpickle
import pytest

from kubepool.contract import RESULT_LOG_MARKER
from kubepool.jobs.decorators import (
    FUNCTION_FILE,
    RUNNER_FILE,
    RUNNER_FUNCTION,
    remote_payload,
    runner_source,
)
from kubepool.jobs.results import RemoteError, decode_result_line, find_result


def line(doc: object) -> str:
    return RESULT_LOG_MARKER + base64.b64encode(cloudpickle.dumps(doc)).decode()


def test_last_result_line_wins() -> None:
    log = ["hello", line({"success": False, "error": "x"}), "retry", line({"success": True, "value": {"a": 1}})]
    assert find_result(log).value == {"a": 1}  # type: ignore[union-attr]
    assert find_result(["no result here"]) is None


def test_failure_raises_chained_to_the_remote_traceback() -> None:
    res = decode_result_line(line({"success": False, "value": None, "error": "ZeroDivisionError: division by zero",
                                   "traceback": "Traceback ...\nZeroDivisionError: division by zero"}))
    with pytest.raises(RuntimeError, match="execution failed with error: ZeroDivisionError") as err:
        res.unwrap("team/j")
    assert isinstance(err.value.__cause__, RemoteError) and "Traceback" in str(err.value.__cause__)


def test_malformed_lines() -> None:
    with pytest.raises(ValueError, match="malformed"):
        decode_result_line(RESULT_LOG_MARKER + "%%%")
    with pytest.raises(ValueError, match="not a result document"):
        decode_result_line(line([1, 2]))


def test_compatible_with_the_runtime_encoder() -> None:
    from kubepool.runtime import result  # the runtime ships with the SDK: a missing one fails, never skips
    encoded = result.encode_log_line(result.ExecutionResult(True, 0, value=[1, 2, 3]))
    assert decode_result_line(encoded).unwrap("j") == [1, 2, 3]


def square_plus(x: int, *, plus: int = 0) -> int:
    return x * x + plus


def test_remote_payload_runs_without_this_module(tmp_path: Path) -> None:
    files = {f.path: f.content for f in remote_payload(square_plus, (7,), {"plus": 1})}
    assert set(files) == {RUNNER_FILE, FUNCTION_FILE}
    for name, content in files.items():
        (tmp_path / name).write_bytes(content)
    # A fresh interpreter that cannot import this test module: the function must travel by value.
    code = (f"import importlib.util as u; s = u.spec_from_file_location('r', {str(tmp_path / RUNNER_FILE)!r}); "
            f"m = u.module_from_spec(s); s.loader.exec_module(m); print(m.{RUNNER_FUNCTION}())")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "50"


def test_runner_refuses_another_python(tmp_path: Path) -> None:
    (tmp_path / RUNNER_FILE).write_text(runner_source((2, 7)))
    spec = importlib.util.spec_from_file_location("runner_27", tmp_path / RUNNER_FILE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with pytest.raises(RuntimeError, match="pickled on Python 2.7"):
        module.main()


def test_runtime_launcher_calls_the_runner(tmp_path: Path) -> None:
    from kubepool.runtime import launcher
    for f in remote_payload(square_plus, (3,), {}):
        (tmp_path / f.path).write_bytes(f.content)
    fn, args, kwargs = launcher.load_function(tmp_path / RUNNER_FILE, RUNNER_FUNCTION)
    assert fn(*args, **kwargs) == 9
