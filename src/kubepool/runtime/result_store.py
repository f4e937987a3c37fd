"""Keeps an instance's outcome on its own MLJob (an annotation, `naming.result_annotation`), where the SDK reads
it: written with the pod's ServiceAccount token; the chart's results policy refuses that annotation from anyone
but the pod the job's status lists for the instance. A head's result too large for the annotation goes to the
job's spec.output (S3 or the PVC), else to the operator's results store (S3), and the annotation keeps its
SHA-256. The only part of the runtime's result
handling that talks to Kubernetes."""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from kubepool import naming
from kubepool.contract import (
    ENV_NAMESPACE,
    ENV_POD_NAME,
    RESULT_MAX_BYTES,
    RESULT_WORKER_MAX_BYTES,
    RESULTS_STORE_ENV_PREFIX,
    JobContract,
    RunMode,
    StoredResult,
    result_object,
)
from kubepool.runtime.channels import parse_s3_uri, s3_client
from kubepool.runtime.result import ExecutionResult, pickled_result, stored_result

TOKEN_PATH = "/var/run/secrets/kubernetes.io/serviceaccount/token"

Patch = Callable[[str, str, dict[str, Any]], None]  # (namespace, job name, merge patch)
Upload = Callable[[str, bytes], None]  # (s3:// or pvc:// URI under spec.output, bytes)
# The results policy admits the write once the job's status lists this pod's uid, which the operator writes when
# it sees the pod: a payload that ends sooner is refused (422) until then, so the write is retried this long.
REFUSED_RETRY_S = 60.0


def should_store(contract: JobContract, instance_id: int, res: ExecutionResult) -> bool:
    """The head always (its value is the job's result); another instance only its failure, and only when every
    instance runs the payload (distributed_result() names the failing instance's exception)."""
    return instance_id == 0 or (not res.success and contract.mode is not RunMode.HEAD)


def kept(contract: JobContract, instance_id: int, res: ExecutionResult, pod: str,
         upload: Upload | None = None, missing: str = "") -> StoredResult:
    """What the job keeps of `res`: inline when it fits; the head's larger one in spec.output (else the operator's
    results store) through `upload` (None: no location it can write), named with its SHA-256. `missing` says why
    the results store cannot be written (`store_missing`)."""
    limit = RESULT_MAX_BYTES if instance_id == 0 else RESULT_WORKER_MAX_BYTES
    doc = stored_result(res, instance_id, pod, limit)
    target = contract.output or contract.results_store
    if doc.data is not None or instance_id != 0 or target is None or upload is None:
        return doc.model_copy(update={"dropped": f"{doc.dropped}; {missing}"}) if doc.dropped and missing else doc
    blob = pickled_result(res)
    uri = result_object(target.location, contract.job_name, pod)
    upload(uri, blob)
    return StoredResult(pod=pod, instance=instance_id, success=res.success, location=uri,
                        sha256=hashlib.sha256(blob).hexdigest(), size=len(blob),
                        endpoint_url=None if contract.output is not None else target.s3_endpoint_url)


def result_patch(doc: StoredResult) -> dict[str, Any]:
    """The merge patch that keeps `doc` on the job (pure)."""
    value = json.dumps(doc.model_dump(exclude_none=True), separators=(",", ":"))
    return {"metadata": {"annotations": {naming.result_annotation(doc.instance): value}}}


def store_missing(contract: JobContract, env: Mapping[str, str]) -> str:
    """Why the operator's results store cannot be written ("" when it can, or is not this job's): its credentials
    Secret is not in the job's namespace (the head's optional envFrom gave no keys)."""
    secret = contract.results_store_secret
    if contract.output is not None or contract.results_store is None or not secret:
        return ""
    if env.get(RESULTS_STORE_ENV_PREFIX + "AWS_ACCESS_KEY_ID"):
        return ""
    return (f"the operator's results store {contract.results_store.location} takes its credentials from Secret "
            f"{secret}, which namespace {contract.namespace} does not have (or it has no AWS_ACCESS_KEY_ID)")


def _store_client(endpoint_url: str | None, env: Mapping[str, str]) -> Any:
    """An S3 client with the results store's own credentials (prefixed), else the runtime's default ones."""
    import boto3

    keys = {k.lower(): env[RESULTS_STORE_ENV_PREFIX + k] for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                                                                  "AWS_SESSION_TOKEN") if env.get(RESULTS_STORE_ENV_PREFIX + k)}
    return boto3.client("s3", endpoint_url=endpoint_url or None, **keys)


def output_upload(contract: JobContract, env: Mapping[str, str]) -> Upload | None:
    """Writes under the job's spec.output as its outputs are written (runtime.outputs): S3 with the output's
    credentials, or the PVC mounted at its local path (renamed into place: no reader sees half an object). Without
    spec.output, to the operator's results store with its own credentials; None when it cannot."""
    store = contract.results_store if contract.output is None and not store_missing(contract, env) else None
    if store is not None:
        def to_store(uri: str, blob: bytes) -> None:
            bucket, key = parse_s3_uri(uri)
            _store_client(store.s3_endpoint_url, env).put_object(Bucket=bucket, Key=key, Body=blob)

        return to_store
    target = contract.output
    if target is None:
        return None

    def upload(uri: str, blob: bytes) -> None:
        if target.s3_uri:
            bucket, key = parse_s3_uri(uri)
            s3_client(target.s3_endpoint_url, env).put_object(Bucket=bucket, Key=key, Body=blob)
            return
        dest = Path(target.local_path or "") / uri[len(target.location.rstrip("/")) + 1:]
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(dest.name + ".part")
        tmp.write_bytes(blob)
        os.replace(tmp, dest)

    return upload


def _lightkube_patch(namespace: str, name: str, body: dict[str, Any]) -> None:
    from lightkube import Client
    from lightkube.generic_resource import create_namespaced_resource
    from lightkube.types import PatchType

    resource = create_namespaced_resource(naming.GROUP, naming.VERSION, naming.MLJOB_KIND, naming.MLJOB_PLURAL)
    Client(field_manager="kubepool-runtime").patch(resource, name, body, namespace=namespace,
                                                   patch_type=PatchType.MERGE)


def _refused(err: Exception) -> bool:
    status = getattr(err, "status", None)  # lightkube's ApiError
    return getattr(status, "code", None) == 422


def _patch_once_listed(patch: Patch, namespace: str, name: str, body: dict[str, Any]) -> None:
    deadline = time.monotonic() + REFUSED_RETRY_S
    delay = 0.5
    while True:
        try:
            patch(namespace, name, body)
            return
        except Exception as e:
            if not _refused(e) or time.monotonic() + delay > deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 5.0)


def store(contract: JobContract, instance_id: int, res: ExecutionResult, env: Mapping[str, str],
          patch: Patch | None = None, upload: Upload | None = None) -> str | None:
    """Keep `res` on the job; returns why it was not kept (the caller logs it), None when kept or not needed."""
    if not should_store(contract, instance_id, res):
        return None
    if patch is None:
        if not os.path.exists(TOKEN_PATH):
            return ("no ServiceAccount token is mounted (the operator's runtimeAccount is 'none'): the result is "
                    "not kept, job.result() cannot return it")
        patch = _lightkube_patch
    pod = env.get(ENV_POD_NAME, "")
    try:
        doc = kept(contract, instance_id, res, pod, upload if upload is not None else output_upload(contract, env),
                   store_missing(contract, env))
        _patch_once_listed(patch, env.get(ENV_NAMESPACE, contract.namespace), contract.job_name, result_patch(doc))
    except Exception as e:  # noqa: BLE001 - the job's outcome stands; only its value is lost, and the log says why
        return f"cannot keep the result on MLJob {contract.namespace}/{contract.job_name}: {type(e).__name__}: {e}"
    return None
