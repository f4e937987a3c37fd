"""Reading a job's result from its head's log: the `contract.RESULT_LOG_MARKER` line that the runtime
prints, `KUBEPOOL_RESULT <base64 cloudpickle of {"success", "value", "error", "traceback"}>`."""

from __future__ import annotations

import base64
import binascii
import pickle
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from kubepool.contract import LOG_END_MSG, LOG_START_MSG, RESULT_LOG_MARKER, RUNTIME_LOG_PREFIXES


class RemoteError(Exception):
    """The remote payload raised; the message is its traceback as printed on the head."""


@dataclass(frozen=True)
class ExecutionResult:
    """The payload's outcome as the head reported it."""

    success: bool
    value: Any = None
    error: Any = None
    traceback: str | None = None

    def unwrap(self, job_id: str) -> Any:
        """Return the value, or raise `RuntimeError` chained to the remote exception (Snowflake's behaviour)."""
        if self.success:
            return self.value
        cause: BaseException = self.error if isinstance(self.error, BaseException) else RemoteError(
            self.traceback or str(self.error)
        )
        raise RuntimeError(f"Job {job_id} execution failed with error: {self.error!s}") from cause


def is_result_line(line: str) -> bool:
    return line.startswith(RESULT_LOG_MARKER)


_BANNER, _STARTED = LOG_START_MSG.splitlines()[:2]
_FINISHED = LOG_END_MSG.splitlines()[1]


def user_lines(lines: Iterable[str]) -> Iterator[str]:
    """The log a user reads by default (`verbose=False`, as Snowflake's): the payload's output between the
    runtime's banners, the banners, and the runtime's own `kubepool[...]` lines; not Ray's start-up output
    nor the result line. Streams: it keeps only whether it is inside the banners."""
    inside = False
    for line in lines:
        if line == _STARTED:
            inside = True
        elif line == _FINISHED:
            inside = False
            yield line
            continue
        if is_result_line(line):
            continue
        if inside or line == _BANNER or line.startswith(RUNTIME_LOG_PREFIXES):
            yield line


def decode_result_line(line: str) -> ExecutionResult:
    """Decode one marker line.

    Raises:
        ValueError: The line is not a well-formed marker line, or its value cannot be unpickled here
            (e.g. it is an instance of a class this Python cannot import).
    """
    encoded = line[len(RESULT_LOG_MARKER):].strip()
    try:
        raw = base64.b64decode(encoded, validate=True)
    except binascii.Error as err:
        raise ValueError(f"malformed result line: {err}") from None
    try:
        # cloudpickle output is read by the standard unpickler; the log is the job's own, written by its head.
        doc = pickle.loads(raw)
    except Exception as err:  # unpickling runs arbitrary constructors; any failure means "not readable here"
        raise ValueError(f"the job's result cannot be unpickled here ({type(err).__name__}: {err}); "
                         "use the same Python and packages as the job's image") from None
    if not isinstance(doc, dict) or "success" not in doc:
        raise ValueError("malformed result line: not a result document")
    return ExecutionResult(bool(doc["success"]), doc.get("value"), doc.get("error"), doc.get("traceback"))


def find_result(lines: Iterable[str]) -> ExecutionResult | None:
    """The last result in a log (a retried job prints one per attempt), or None when there is none."""
    last: str | None = None
    for line in lines:
        if is_result_line(line):
            last = line
    return decode_result_line(last) if last is not None else None
