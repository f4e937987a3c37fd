"""Typed accessors for an object's metadata (Kubernetes' ObjectMeta): of a parsed model (MLJob, ComputePool: a
`metadata` dict) or of a raw body (a dict with "metadata"). One place that says what a missing field reads as."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol


class HasMetadata(Protocol):
    @property
    def metadata(self) -> dict[str, Any]: ...


Object = HasMetadata | Mapping[str, Any]


def meta(obj: Object) -> Mapping[str, Any]:
    """The object's metadata ({} when it has none)."""
    found = obj.get("metadata") if isinstance(obj, Mapping) else obj.metadata
    return found or {}


def uid(obj: Object) -> str:
    """Its uid; "" before the API server assigned one (an object built in a test)."""
    return str(meta(obj).get("uid", ""))


def name(obj: Object) -> str:
    return str(meta(obj).get("name", ""))


def namespace(obj: Object) -> str:
    """Its namespace; "default" when unset, as kubectl reads it (cluster-scoped objects have none)."""
    return str(meta(obj).get("namespace", "default"))


def generation(obj: Object) -> int | None:
    """metadata.generation; None before the API server set it."""
    value = meta(obj).get("generation")
    return None if value is None else int(value)
