"""The Secrets of a job's envFrom (job and group levels), also mounted read-only where the runtime reads Secret
values to keep them out of its termination message (contract.ENV_SECRET_DIRS, runtime/redact.py): the variables
such a Secret gives are its keys, which the operator cannot name, since it never reads a Secret. Pure."""

from __future__ import annotations

from kubepool import contract
from kubepool.controller.builders.common import Obj


def env_from_secret_volumes(env_from: list[Obj]) -> tuple[list[Obj], list[Obj]]:
    """One volume and its read-only mount per Secret the entries name, once each, in order. Optional as the
    references are: a Secret some entry requires is required (the pod would not start without it anyway)."""
    required: dict[str, bool] = {}
    for e in env_from:
        ref = e.get("secretRef") or {}
        if ref.get("name"):
            required[ref["name"]] = required.get(ref["name"], False) or not ref.get("optional", False)
    volumes: list[Obj] = []
    mounts: list[Obj] = []
    for i, (name, needed) in enumerate(required.items()):
        vol = f"{contract.ENV_FROM_VOLUME_PREFIX}{i}"
        volumes.append({"name": vol, "secret": {"secretName": name, **({} if needed else {"optional": True})}})
        mounts.append({"name": vol, "mountPath": f"{contract.ENV_FROM_SECRETS_DIR}/{i}", "readOnly": True})
    return volumes, mounts
