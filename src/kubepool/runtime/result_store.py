"""Keeps an instance's outcome on its own MLJob (an annotation, `naming.result_annotation`), where the SDK reads
it: written with the pod's ServiceAccount token, which the runtime admission policy (or the per-job Role) lets
change only the pod's own job. The only part of the runtime's result handling that talks to Kubernetes."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from typing import Any

from kubepool import naming
from kubepool.contract import (
    ENV_NAMESPACE,
    ENV_POD_NAME,
    RESULT_MAX_BYTES,
    RESULT_WORKER_MAX_BYTES,
    JobContract,
    RunMode,
)
from kubepool.runtime.result import ExecutionResult, stored_result

TOKEN_PATH = "/var/run/secrets/kubernetes.io/serviceaccount/token"

Patch = Callable[[str, str, dict[str, Any]], None]  # (namespace, job name, merge patch)


def should_store(contract: JobContract, instance_id: int, res: ExecutionResult) -> bool:
    """The head always (its value is the job's result); another instance only its failure, and only when every
    instance runs the payload (distributed_result() names the failing instance's exception)."""
    return instance_id == 0 or (not res.success and contract.mode is not RunMode.HEAD)


def result_patch(contract: JobContract, instance_id: int, res: ExecutionResult, pod: str) -> dict[str, Any]:
    """The merge patch that keeps `res` on the job (pure)."""
    limit = RESULT_MAX_BYTES if instance_id == 0 else RESULT_WORKER_MAX_BYTES
    doc = stored_result(res, instance_id, pod, limit)
    value = json.dumps(doc.model_dump(exclude_none=True), separators=(",", ":"))
    return {"metadata": {"annotations": {naming.result_annotation(instance_id): value}}}


def _lightkube_patch(namespace: str, name: str, body: dict[str, Any]) -> None:
    from lightkube import Client
    from lightkube.generic_resource import create_namespaced_resource
    from lightkube.types import PatchType

    resource = create_namespaced_resource(naming.GROUP, naming.VERSION, naming.MLJOB_KIND, naming.MLJOB_PLURAL)
    Client(field_manager="kubepool-runtime").patch(resource, name, body, namespace=namespace,
                                                   patch_type=PatchType.MERGE)


def store(contract: JobContract, instance_id: int, res: ExecutionResult, env: Mapping[str, str],
          patch: Patch | None = None) -> str | None:
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
        patch(env.get(ENV_NAMESPACE, contract.namespace), contract.job_name, result_patch(contract, instance_id, res, pod))
    except Exception as e:  # noqa: BLE001 - the job's outcome stands; only its value is lost, and the log says why
        return f"cannot keep the result on MLJob {contract.namespace}/{contract.job_name}: {type(e).__name__}: {e}"
    return None
