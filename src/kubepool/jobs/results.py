"""Reading a job's result: the `contract.StoredResult` an instance keeps on its MLJob (annotation
`naming.result_annotation(instance)`), a base64 cloudpickle of {"success", "value", "error", "traceback"}; and
the user's part of a log."""

from __future__ import annotations

import base64
import binascii
import builtins
import hashlib
import importlib
import json
import os
import pickle
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from kubepool import naming
from kubepool.api.mljob import OutputLocation
from kubepool.contract import LOG_END_MSG, LOG_START_MSG, RUNTIME_LOG_PREFIXES, StoredResult

Fetch = Callable[[str], bytes]  # an object's URI under the job's spec.output -> its bytes


class RemoteError(RuntimeError):
    """The remote payload raised an exception that cannot be rebuilt here (its type is not importable, or not
    constructible from its message); the message is its repr (Snowflake's)."""


class RemoteErrorInfo(NamedTuple):
    """The remote exception as raised on the head, kept on the rebuilt one as `_remote_error` (Snowflake's
    attribute and fields): its type's name, message and traceback frames."""

    exc_type: str
    exc_msg: str
    exc_tb: str


REMOTE_ERROR_ATTR = "_remote_error"


def _by_type(type_str: str, message: str, original_repr: str) -> BaseException:
    """Snowflake's build_exception: the type imported by name and called with the message, else RemoteError of
    the repr, chained to why not."""
    try:
        module_name, _, name = type_str.rpartition(".")
        try:
            exc_type = getattr(importlib.import_module(module_name) if module_name else builtins, name)
        except (ImportError, AttributeError):
            raise ModuleNotFoundError(f"Unrecognized exception type '{type_str}', likely due to a missing or "
                                      "unavailable package") from None
        if not (isinstance(exc_type, type) and issubclass(exc_type, BaseException)):
            raise TypeError(f"Imported type {type_str} is not a known exception type, possibly due to a name conflict")
        return exc_type(message)
    except Exception as e:  # noqa: BLE001 - any failure to rebuild falls back to RemoteError
        ex = RemoteError(original_repr)
        ex.__cause__ = e
        return ex


def remote_exception(doc: Mapping[str, Any]) -> BaseException:
    """The payload's exception as the head kept it: the exception itself when it unpickles here (any type,
    attributes kept), else rebuilt from its type name and message as Snowflake does, else RemoteError; the remote
    traceback attached (`_remote_error`, and a note so an uncaught one prints it)."""
    type_str, message = str(doc.get("error_type") or ""), str(doc.get("error_message") or "")
    frames = str(doc.get("error_frames") or "")
    ex: BaseException | None = None
    if isinstance(doc.get("exception"), bytes):
        try:
            loaded = pickle.loads(doc["exception"])
        except Exception:  # noqa: BLE001 - its class is not importable here: rebuilt from its name below
            loaded = None
        ex = loaded if isinstance(loaded, BaseException) else None
    if ex is None and isinstance(doc.get("error"), BaseException):  # a document that holds the exception itself
        ex = doc["error"]
    if ex is None and type_str:
        ex = _by_type(type_str, message, str(doc.get("error_repr") or f"{type_str}('{message}')"))
    if ex is None:  # no exception on the head (e.g. a non-zero exit): the runtime's words
        ex = RemoteError(str(doc.get("error") or "unknown remote error"))
        frames = str(doc.get("traceback") or "")
    if type_str:
        info = RemoteErrorInfo(type_str.rsplit(".", 1)[-1], message, frames)
        setattr(ex, REMOTE_ERROR_ATTR, info)
        ex.add_note(f"Traceback (from remote execution):\n{info.exc_tb}{info.exc_type}: {info.exc_msg}")
    elif frames:
        ex.add_note(frames)
    return ex


@dataclass(frozen=True)
class ExecutionResult:
    """The payload's outcome as the head reported it; `error` is the remote exception (`remote_exception`)."""

    success: bool
    value: Any = None
    error: BaseException | None = None
    traceback: str | None = None

    def unwrap(self) -> Any:
        """Return the value, or raise `RuntimeError` chained to the remote exception (Snowflake's
        ExecutionResult.get_value, its words too)."""
        if self.success:
            return self.value
        raise RuntimeError(f"Job execution failed with error: {self.error!r}") from self.error


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


def decode(doc: StoredResult, fetch: Fetch | None = None) -> ExecutionResult:
    """Unpickle a kept result: inline, or the object a large one names, read with `fetch` and unpickled only when
    it is byte for byte what the head kept (its SHA-256 is in the annotation, which only the head may write).

    Raises:
        ResultUnavailable: It was too large to keep, its object cannot be read or is not the head's, or it
            cannot be unpickled here (e.g. an instance of a class this Python cannot import).
    """
    if doc.location is not None:
        raw = _fetched(doc, fetch)
    elif doc.data is None:
        raise ResultUnavailable(f"instance {doc.instance} kept no result: {doc.dropped or 'no data'}")
    else:
        try:
            raw = base64.b64decode(doc.data, validate=True)
        except binascii.Error as err:
            raise ResultUnavailable(f"malformed result of instance {doc.instance}: {err}") from None
    try:
        # cloudpickle output is read by the standard unpickler; only the job's own pods can write it (or, for an
        # object, its digest).
        value = pickle.loads(raw)
    except Exception as err:  # unpickling runs arbitrary constructors; any failure means "not readable here"
        raise ResultUnavailable(f"the job's result cannot be unpickled here ({type(err).__name__}: {err}); "
                                "use the same Python and packages as the job's image") from None
    if not isinstance(value, dict) or "success" not in value:
        raise ResultUnavailable(f"malformed result of instance {doc.instance}: not a result document")
    ok = bool(value["success"])
    return ExecutionResult(ok, value.get("value"), None if ok else remote_exception(value), value.get("traceback"))


def _fetched(doc: StoredResult, fetch: Fetch | None) -> bytes:
    where = doc.location or ""
    if fetch is None:
        raise ResultUnavailable(f"instance {doc.instance} kept its result at {where}, which this client cannot read")
    try:
        raw = fetch(where)
    except ResultUnavailable:
        raise
    except Exception as err:  # noqa: BLE001 - any failure to read: the result is not available, and why
        raise ResultUnavailable(f"cannot read the result at {where}: {type(err).__name__}: {err}") from None
    if doc.sha256 is None or hashlib.sha256(raw).hexdigest() != doc.sha256:
        raise ResultUnavailable(f"the object at {where} is not the result the job's head kept (its SHA-256 differs "
                                "from the one on the job): it was changed after the job wrote it, and is not unpickled")
    return raw


def output_reader(output: OutputLocation | None, read_claim: Callable[[str, str], bytes] | None = None,
                  store_endpoint: str | None = None) -> Fetch:
    """Reads an object under the job's spec.output: S3 with this client's own AWS credentials (environment or
    profile) at the output's endpoint; a PVC through `read_claim(claim, path in the claim)`. A job without
    spec.output keeps a large result in the operator's results store (S3, at `store_endpoint`, the result's own)."""

    def fetch(uri: str) -> bytes:
        s3_output = output is not None and output.s3 is not None
        if (s3_output or output is None) and uri.startswith("s3://"):
            try:
                import boto3
            except ImportError:
                raise ResultUnavailable(f"the result is kept at {uri}: install boto3 to read it") from None
            bucket, _, key = uri[len("s3://"):].partition("/")
            s3 = boto3.client("s3", endpoint_url=output.s3.endpoint_url if output and output.s3 else store_endpoint)
            return bytes(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
        pvc = output.persistent_volume_claim if output is not None else None
        prefix = f"pvc://{pvc.claim_name}/" if pvc is not None else ""
        if pvc is not None and read_claim is not None and uri.startswith(prefix):
            return read_claim(pvc.claim_name, uri[len(prefix):])  # the claim's subPath is part of the URI
        raise ResultUnavailable(f"the result is kept at {uri}, outside the job's spec.output")

    return fetch


# Run in a short-lived pod that mounts the claim read-only: prints the object base64-encoded, read from its log.
_READ_CLAIM = "import base64, sys; sys.stdout.write(base64.b64encode(open(sys.argv[1], 'rb').read()).decode())"
CLAIM_READ_TIMEOUT_S = 300.0
# The reader pod's label: not the job's own (naming.LABEL_JOB), which would make it one of the job's pods to the
# operator.
READER_LABEL = f"{naming.GROUP}/result-of"


def claim_reader(client: Any, namespace: str, job_name: str, head: Any) -> Callable[[str, str], bytes]:
    """Reads a file of a PVC for a client outside the cluster: a pod like the job's head `head` (its image, its
    Python, its security contexts, which that namespace admitted) mounts the claim read-only, prints the file
    and is deleted; with the user's own rights (create pods, read their logs)."""
    from lightkube.models.core_v1 import (
        Container,
        PersistentVolumeClaimVolumeSource,
        PodSpec,
        Volume,
        VolumeMount,
    )
    from lightkube.models.meta_v1 import ObjectMeta
    from lightkube.resources.core_v1 import Pod

    like = head.spec.containers[0]
    python = (like.command or ["python3"])[0]

    def read(claim: str, path: str) -> bytes:
        name = f"{job_name[:40]}-result-{os.urandom(3).hex()}"
        pod = Pod(metadata=ObjectMeta(name=name, labels={READER_LABEL: job_name}),
                  spec=PodSpec(restartPolicy="Never", securityContext=head.spec.securityContext,
                               nodeSelector=head.spec.nodeSelector, tolerations=head.spec.tolerations,
                               containers=[Container(
                                   name="read", image=like.image, command=[python, "-c", _READ_CLAIM, f"/claim/{path}"],
                                   securityContext=like.securityContext,
                                   volumeMounts=[VolumeMount(name="claim", mountPath="/claim", readOnly=True)])],
                               volumes=[Volume(name="claim", persistentVolumeClaim=PersistentVolumeClaimVolumeSource(
                                   claimName=claim, readOnly=True))]))
        client.create(pod, namespace=namespace)
        try:
            deadline = time.monotonic() + CLAIM_READ_TIMEOUT_S
            while (phase := client.get(Pod, name, namespace=namespace).status.phase) not in ("Succeeded", "Failed"):
                if time.monotonic() > deadline:
                    raise ResultUnavailable(f"pod {name} did not read {path} from claim {claim} within "
                                            f"{CLAIM_READ_TIMEOUT_S:.0f} s (phase {phase})")
                time.sleep(0.5)
            text = "".join(client.log(name, namespace=namespace))
            if phase != "Succeeded":
                raise ResultUnavailable(f"cannot read {path} from claim {claim}: {text[-500:]}")
            return base64.b64decode(text)
        finally:
            client.delete(Pod, name, namespace=namespace)

    return read
