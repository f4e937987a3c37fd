"""Reading a job's result: the `contract.StoredResult` an instance keeps on its MLJob (annotation
`naming.result_annotation(instance)`), a base64 cloudpickle of {"success", "value", "error", "traceback"}; and
the user's part of a log."""

from __future__ import annotations

import base64
import binascii
import json
import pickle
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from kubepool import naming
from kubepool.contract import LOG_END_MSG, LOG_START_MSG, RUNTIME_LOG_PREFIXES, StoredResult


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


_BANNER, _STARTED = LOG_START_MSG.splitlines()[:2]
_FINISHED = LOG_END_MSG.splitlines()[1]


def user_lines(lines: Iterable[str]) -> Iterator[str]:
    """The log a user reads by default (`verbose=False`, as Snowflake's): the payload's output between the
    runtime's banners, the banners, and the runtime's own `kubepool[...]` lines; not Ray's start-up output.
    Streams: it keeps only whether it is inside the banners."""
    inside = False
    for line in lines:
        if line == _STARTED:
            inside = True
        elif line == _FINISHED:
            inside = False
            yield line
            continue
        if inside or line == _BANNER or line.startswith(RUNTIME_LOG_PREFIXES):
            yield line


class ResultUnavailable(ValueError):
    """The job kept no readable result; the message says why."""


def stored_result(annotations: Mapping[str, str] | None, instance_id: int, pod: str | None) -> StoredResult | None:
    """The result instance `instance_id` kept on its job, if it is the current attempt's (written by `pod`, the
    pod the job's status lists for that instance; None: any)."""
    raw = (annotations or {}).get(naming.result_annotation(instance_id))
    if raw is None:
        return None
    try:
        doc = StoredResult.model_validate(json.loads(raw))
    except ValueError as err:
        raise ResultUnavailable(f"malformed result of instance {instance_id}: {err}") from None
    if pod is not None and doc.pod != pod:
        return None  # an earlier attempt's: this attempt has not reported
    return doc


def decode(doc: StoredResult) -> ExecutionResult:
    """Unpickle a kept result.

    Raises:
        ResultUnavailable: It was too large to keep, or cannot be unpickled here (e.g. an instance of a class
            this Python cannot import).
    """
    if doc.data is None:
        raise ResultUnavailable(f"instance {doc.instance} kept no result: {doc.dropped or 'no data'}")
    try:
        raw = base64.b64decode(doc.data, validate=True)
    except binascii.Error as err:
        raise ResultUnavailable(f"malformed result of instance {doc.instance}: {err}") from None
    try:
        # cloudpickle output is read by the standard unpickler; only the job's own pods can write it.
        value = pickle.loads(raw)
    except Exception as err:  # unpickling runs arbitrary constructors; any failure means "not readable here"
        raise ResultUnavailable(f"the job's result cannot be unpickled here ({type(err).__name__}: {err}); "
                                "use the same Python and packages as the job's image") from None
    if not isinstance(value, dict) or "success" not in value:
        raise ResultUnavailable(f"malformed result of instance {doc.instance}: not a result document")
    return ExecutionResult(bool(value["success"]), value.get("value"), value.get("error"), value.get("traceback"))
