"""The kept result as the SDK reads it, @remote's payload and runner (no cluster)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from kubepool.jobs.decorators import (
    FUNCTION_FILE,
    RUNNER_FILE,
    RUNNER_FUNCTION,
    remote_payload,
    runner_source,
)
from kubepool.jobs.results import RemoteError, ResultUnavailable, decode
from kubepool.runtime.result import ExecutionResult, stored_result


def kept(res: ExecutionResult) -> object:
    return decode(stored_result(res, 0, "p", 1 << 20))


def test_failure_raises_chained_to_the_remote_traceback() -> None:
    res = kept(ExecutionResult(False, 1, error="ZeroDivisionError: division by zero",
                               traceback="Traceback ...\nZeroDivisionError: division by zero"))
    with pytest.raises(RuntimeError, match="execution failed with error: RemoteError.'ZeroDivisionError") as err:
        res.unwrap()  # type: ignore[attr-defined]
    assert isinstance(err.value.__cause__, RemoteError) and "Traceback" in err.value.__cause__.__notes__[0]


def test_compatible_with_the_runtime_encoder() -> None:
    assert kept(ExecutionResult(True, 0, value=[1, 2, 3])).unwrap() == [1, 2, 3]  # type: ignore[attr-defined]


def test_not_a_result_document() -> None:
    import base64

    import cloudpickle

    from kubepool.contract import StoredResult

    doc = StoredResult(pod="p", instance=0, success=True, data=base64.b64encode(cloudpickle.dumps([1, 2])).decode())
    with pytest.raises(ResultUnavailable, match="not a result document"):
        decode(doc)
    with pytest.raises(ResultUnavailable, match="malformed"):
        decode(doc.model_copy(update={"data": "%%%"}))


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
