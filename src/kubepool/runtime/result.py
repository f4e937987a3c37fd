"""The payload's outcome and where it goes: the stored result, the termination log, the result file.

`stored_result` is what the SDK's `job.result()` decodes (`contract.StoredResult`, kept on the job's MLJob by
`result_store`); the termination log is a short JSON summary, failure message first, cut to Kubernetes' 4 KiB
limit.
"""

from __future__ import annotations

import base64
import json
import runpy
import traceback as tb_module
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import cloudpickle

from kubepool.contract import RESULT_FILENAME, TERMINATION_MESSAGE_MAX_BYTES, StoredResult
from kubepool.runtime import redact as redaction


@dataclass(frozen=True)
class ExecutionResult:
    success: bool
    exit_code: int
    value: Any = None
    error: str = ""
    traceback: str = ""
    reason: str | None = None  # a failure the runtime names (contract.RUNTIME_FAILURE_REASONS)
    exception: BaseException | None = None  # what the payload raised: the SDK rebuilds it (jobs.results)

    def as_dict(self) -> dict[str, Any]:
        return {"success": self.success, "value": self.value, "error": self.error, "traceback": self.traceback}


# The runtime's own frames are left out of the payload's traceback, as Snowflake's launcher leaves out its own.
_RUNTIME_FILES = frozenset({str(Path(__file__).with_name("launcher.py")), runpy.__file__})


def exception_fields(e: BaseException) -> dict[str, Any]:
    """What the SDK rebuilds the payload's exception from (Snowflake's ExceptionMetadata: type, message, repr,
    traceback frames) and the exception itself, pickled on its own so that a class the client cannot import
    loses only the object, not the rest."""
    tb = e.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename in _RUNTIME_FILES:
        tb = tb.tb_next
    try:
        blob: bytes | None = cloudpickle.dumps(e)
    except Exception:  # noqa: BLE001 - unpicklable (e.g. holds a lock): rebuilt from its type name instead
        blob = None
    return {"error_type": f"{type(e).__module__}.{type(e).__name__}", "error_message": str(e), "error_repr": repr(e),
            "error_frames": "".join(tb_module.format_tb(tb)), "exception": blob}


def _pickled(result: ExecutionResult, traceback: str) -> bytes:
    """cloudpickle of the result's dict; a value cloudpickle cannot serialize is replaced by its repr rather than lost."""
    doc = {**result.as_dict(), "traceback": traceback}
    if result.exception is not None:
        doc.update(exception_fields(result.exception))
    try:
        data: bytes = cloudpickle.dumps(doc)
    except Exception:  # noqa: BLE001 - any pickling failure: fall back to the repr
        doc["value"] = repr(result.value)
        data = cloudpickle.dumps(doc)
    return data


def pickled_result(result: ExecutionResult) -> bytes:
    """The whole result as `stored_result` would keep it, for an object store (no size limit)."""
    return _pickled(result, result.traceback)


def stored_result(result: ExecutionResult, instance_id: int, pod: str, limit: int) -> StoredResult:
    """The result as kept on the job (at most `limit` bytes of data). A failure keeps the end of its traceback
    (where the error is) when the whole does not fit; a value that does not fit is dropped, and `dropped` says
    how large it was."""
    tb = result.traceback
    while True:
        data = base64.b64encode(_pickled(result, tb)).decode("ascii")
        if len(data) <= limit:
            return StoredResult(pod=pod, instance=instance_id, success=result.success, data=data)
        if result.success or not tb:
            break
        cut = (len(data) - limit) * 3 // 4 + 64  # pickled bytes to lose: base64 takes 4 characters per 3 bytes
        tb = "...\n" + tb[cut:] if cut < len(tb) else ""
    what = "return value" if result.success else "error"
    return StoredResult(pod=pod, instance=instance_id, success=result.success,
                        dropped=f"the {what} takes {len(data)} bytes encoded, over the {limit} bytes a job keeps on its "
                                "MLJob: give the job an output location to keep a larger one there (spec.output; from the "
                                "SDK spec_overrides={'output': {'s3': {'uri': ...}}} or a code bundle's result_stage)")


def termination_message(result: ExecutionResult, instance_id: int) -> str:
    """JSON with the error first, so a cut message still says what failed; never over the 4 KiB limit."""
    doc: dict[str, Any] = {
        "error": result.error,
        "success": result.success,
        "exitCode": result.exit_code,
        "instance": instance_id,
    }
    if result.success:
        doc["value"] = repr(result.value)[:256]
    if result.reason:
        doc["reason"] = result.reason
    text = json.dumps(doc)  # ASCII-only, so characters are bytes
    key = "error" if result.error else "value"
    while len(text) > TERMINATION_MESSAGE_MAX_BYTES:
        # Each character of the field is at least one character of the JSON: this converges.
        excess = len(text) - TERMINATION_MESSAGE_MAX_BYTES
        doc[key] = doc[key][: max(0, len(doc[key]) - excess - 3)] + "..."
        text = json.dumps(doc)
    return text


def write_termination_log(path: Path, result: ExecutionResult, instance_id: int) -> None:
    """The termination message, without the pod's Secret values: the job's status and Events quote it."""
    secrets = redaction.secret_values()
    text = termination_message(replace(result, error=redaction.redact(result.error, secrets)), instance_id)
    try:
        path.write_text(redaction.redact(text, secrets))
    except OSError as e:  # a local run without /dev/termination-log must not fail the job
        print(f"kubepool: cannot write termination log {path}: {e}", flush=True)


def write_result_file(result_dir: Path, result: ExecutionResult) -> None:
    """result.json in the result volume, when the operator mounted one."""
    doc = result.as_dict()
    try:
        json.dumps(doc["value"])
    except (TypeError, ValueError):
        doc["value"] = repr(result.value)
    (result_dir / RESULT_FILENAME).write_text(json.dumps(doc))
