"""A core/v1 Event about an object the operator handles, as `kubectl describe` and `kubectl get events` read it
(the fields kopf's poster wrote before the operator posted its own). Pure."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from kubepool.controller import vocabulary
from kubepool.controller.builders.common import Obj

MAX_MESSAGE = vocabulary.EVENT_MESSAGE_MAX
CLUSTER_SCOPED_NAMESPACE = "default"  # Events about cluster-scoped objects (ComputePools) live here, as a Node's do
NAME_PREFIX = "kubepool-event-"


def _shorten(message: str) -> str:
    if len(message) <= MAX_MESSAGE:
        return message
    half = (MAX_MESSAGE - 3) // 2
    return f"{message[:half]}...{message[-(MAX_MESSAGE - 3 - half):]}"


def event(obj: Mapping[str, Any], *, type: str, reason: str, message: str, component: str, now: datetime) -> Obj:
    """The Event about `obj` (its apiVersion, kind and metadata are read), stamped `now` (aware, UTC)."""
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace") or CLUSTER_SCOPED_NAMESPACE
    ref = {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"), "name": meta.get("name"),
           "uid": meta.get("uid"), "namespace": namespace}
    stamp = now.isoformat()
    return {"apiVersion": "v1", "kind": "Event",
            "metadata": {"namespace": namespace, "generateName": NAME_PREFIX},
            "involvedObject": {k: v for k, v in ref.items() if v},
            "type": type, "reason": reason, "message": _shorten(message), "action": reason,
            "source": {"component": component},  # the "From" column of `kubectl describe`
            "reportingComponent": component, "reportingInstance": component,
            "firstTimestamp": stamp, "lastTimestamp": stamp, "eventTime": stamp, "count": 1}  # fmt: skip
