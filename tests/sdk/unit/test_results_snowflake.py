"""A remote exception comes back as Snowflake rebuilds it (#38 item 3). The expected exception is what
snowflake-ml-python 2.6.0's own code makes of the same serialized result: its `_get_metadata` (utils.py) for what
the head keeps, its loader's order (the pickled exception when it loads, else `exception_utils.build_exception`
from the metadata) and `ExecutionResult.get_value` for what `result()` raises. Those modules are run from the wheel
(they need only the standard library and pydantic), never installed."""

from __future__ import annotations

import ast
import base64
import pickle
import sys
import threading
import types
import zipfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubepool.jobs.results import REMOTE_ERROR_ATTR, RemoteError, decode
from kubepool.runtime.result import ExecutionResult, exception_fields, stored_result

INTEROP = "snowflake/ml/jobs/_interop"


def _module(whl: zipfile.ZipFile, name: str, source: str | None = None) -> types.ModuleType:
    mod = types.ModuleType(f"snowflake_2_6_0_{name}")
    sys.modules[mod.__name__] = mod  # dataclasses and pydantic look their module up
    code = source if source is not None else whl.read(f"{INTEROP}/{name}.py").decode()
    exec(compile(code, f"{INTEROP}/{name}.py", "exec"), mod.__dict__)  # noqa: S102 - Snowflake's published code
    return mod


@pytest.fixture(scope="module")
def snowflake(wheel: zipfile.ZipFile) -> types.SimpleNamespace:
    exception_utils, results, dto = (_module(wheel, n) for n in ("exception_utils", "results", "dto_schema"))
    # _get_metadata alone from utils.py (the module imports snowpark): its source, with what it uses.
    tree = ast.parse(wheel.read(f"{INTEROP}/utils.py").decode())
    [fn] = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "_get_metadata"]
    utils = types.ModuleType("snowflake_2_6_0_utils")
    utils.__dict__.update(Any=Any, ExceptionMetadata=dto.ExceptionMetadata, ResultMetadata=dto.ResultMetadata,
                          traceback=__import__("traceback"))
    exec(compile(ast.Module(body=[fn], type_ignores=[]), f"{INTEROP}/utils.py", "exec"), utils.__dict__)  # noqa: S102
    return types.SimpleNamespace(exception_utils=exception_utils, results=results, get_metadata=utils._get_metadata)


class Unpicklable(ValueError):
    """An importable type whose instance cannot be pickled (it holds a lock): rebuilt from its name."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.lock = threading.Lock()


def _raised(make: Any) -> BaseException:
    try:
        raise make()
    except BaseException as e:  # noqa: BLE001 - the payload's exception, whatever it is
        return e


def _theirs(sf: types.SimpleNamespace, head_doc: dict[str, Any], e: BaseException) -> BaseException:
    """What Snowflake's result() raises for this result: the pickled exception when it loads here, else rebuilt
    from the metadata its own `_get_metadata` takes from the same exception."""
    value: Any = None
    if head_doc.get("exception") is not None:
        try:
            value = pickle.loads(head_doc["exception"])
        except Exception:  # noqa: BLE001 - Snowflake's loader then falls back to the metadata
            value = None
    if value is None:
        meta = sf.get_metadata(e)
        value = sf.exception_utils.build_exception(type_str=meta.type, message=meta.message, traceback=meta.traceback,
                                                   original_repr=meta.repr)
    with pytest.raises(RuntimeError) as err:
        sf.results.LoadedExecutionResult(success=False, value=value).get_value()
    return err.value


def _ours(e: BaseException) -> tuple[dict[str, Any], BaseException]:
    doc = stored_result(ExecutionResult(False, 1, error=f"{type(e).__name__}: {e}", traceback="tb", exception=e),
                        0, "p", 1 << 20)
    head_doc = pickle.loads(base64.b64decode(doc.data or ""))
    with pytest.raises(RuntimeError) as err:
        decode(doc).unwrap()
    return head_doc, err.value


def _same(ours: BaseException | None, theirs: BaseException | None, their_remote_error: type) -> None:
    """The same exception: its type (their RemoteError is our RemoteError) and its arguments."""
    assert (ours is None) == (theirs is None), (ours, theirs)
    if ours is None or theirs is None:
        return
    if isinstance(theirs, their_remote_error):
        assert isinstance(ours, RemoteError), (ours, theirs)
    else:
        assert type(ours) is type(theirs), (ours, theirs)
    assert ours.args == theirs.args


REMOTE_ONLY = "class QuotaExceeded(Exception):\n    pass\n"


@pytest.mark.parametrize("case", ["ValueError", "KeyError", "library", "unpicklable", "not-importable"])
def test_the_remote_exception_comes_back_as_snowflake_rebuilds_it(snowflake: types.SimpleNamespace, case: str,
                                                                    tmp_path: Path) -> None:
    if case == "not-importable":  # a type of the payload's own module, which the client does not have
        (tmp_path / "payload_errors.py").write_text(REMOTE_ONLY)
        sys.path.insert(0, str(tmp_path))
        try:
            import payload_errors  # type: ignore[import-not-found]

            e = _raised(lambda: payload_errors.QuotaExceeded("over quota"))
            head_doc, _ = _ours(e)
        finally:
            sys.path.remove(str(tmp_path))
            sys.modules.pop("payload_errors", None)
        ours = _reload(head_doc)  # the client side: the module is gone, both sides rebuild from the metadata
    else:
        make = {"ValueError": lambda: ValueError("bad value"), "KeyError": lambda: KeyError("k"),
                "library": lambda: yaml.YAMLError("broken document"), "unpicklable": lambda: Unpicklable("locked")}[case]
        e = _raised(make)
        head_doc, ours = _ours(e)
    theirs = _theirs(snowflake, head_doc, e)
    # What result() raises: RuntimeError with Snowflake's words, chained to an exception of the original type
    # (or RemoteError of its repr when that type cannot be had here), which carries the remote traceback.
    assert type(ours) is RuntimeError and str(ours) == str(theirs), (str(ours), str(theirs))
    remote = snowflake.exception_utils.RemoteError
    _same(ours.__cause__, theirs.__cause__, remote)
    _same(ours.__cause__.__cause__, theirs.__cause__.__cause__, remote)  # type: ignore[union-attr]
    mine = getattr(ours.__cause__, REMOTE_ERROR_ATTR)
    assert mine.exc_type == type(e).__name__ and mine.exc_msg == str(e)
    assert "_raised" in mine.exc_tb and "raise make()" in mine.exc_tb, mine.exc_tb  # the frames where it was raised
    if hasattr(theirs.__cause__, "_remote_error"):  # Snowflake attaches it when it rebuilds from the metadata
        assert tuple(mine) == tuple(theirs.__cause__._remote_error)  # type: ignore[union-attr]
    assert "Traceback (from remote execution)" in ours.__cause__.__notes__[0]  # type: ignore[union-attr]
    assert case != "not-importable" or isinstance(ours.__cause__, RemoteError)
    assert case != "unpicklable" or head_doc["exception"] is None


def _reload(head_doc: dict[str, Any]) -> BaseException:
    from kubepool.contract import StoredResult

    data = base64.b64encode(pickle.dumps(head_doc)).decode()
    with pytest.raises(RuntimeError) as err:
        decode(StoredResult(pod="p", instance=0, success=False, data=data)).unwrap()
    return err.value


def test_the_metadata_is_snowflakes(snowflake: types.SimpleNamespace) -> None:
    e = _raised(lambda: KeyError("k"))
    meta, ours = snowflake.get_metadata(e), exception_fields(e)
    assert (ours["error_type"], ours["error_message"], ours["error_repr"], ours["error_frames"]) == (
        meta.type, meta.message, meta.repr, meta.traceback)
