"""Kubernetes' own object types where a spec takes one (affinity, tolerations, volumes, volume mounts, env
sources), written into the CRDs from the API server's own OpenAPI v3 schemas, never by hand: `k8s_schemas.json`
holds them as the API server of the project's Kubernetes version serves them (`python hack/chart/k8s_defs.py`
writes it with the chart's values schema; tests/api/test_k8s_types.py fails on drift). A field of such a type is
a plain dict in the models (the API server has validated it) marked with `k8s(...)`; crdgen inlines the type."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from pydantic import Field

SCHEMAS = Path(__file__).with_name("k8s_schemas.json")
CORE = "io.k8s.api.core.v1."
ROOTS = tuple(CORE + t for t in ("Affinity", "Toleration", "Volume", "VolumeMount", "EnvVarSource", "EnvFromSource"))
MARK = "x-kubepool-k8s-type"  # in a model's JSON schema: "inline this Kubernetes type here"
# Bounds the API server enforces itself (a volume name is a DNS label), stated in the CRD so the CEL rules over
# names and paths have a bounded cost and a bad name is refused at apply rather than when the pod is created.
BOUNDS: dict[str, dict[str, dict[str, Any]]] = {
    "Volume": {"name": {"maxLength": 63, "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"}},
    "VolumeMount": {"name": {"maxLength": 63}, "mountPath": {"maxLength": 1024}, "subPath": {"maxLength": 1024}},
}
# ObjectMeta (an ephemeral volume's claim template): kept as written, as in a pod.
_OPAQUE = {"io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}
_KEEP = {"description", "type", "properties", "items", "required", "enum", "additionalProperties"}
# Bounds of every other string and list (the API server has its own, mostly looser): a structural schema's CEL
# cost estimates and a hostile spec's size both need one.
MAX_STRING, MAX_ITEMS = 4096, 256


def k8s(type_name: str, *, many: bool = False, max_items: int = 32, description: str) -> Any:
    """A pydantic Field holding a Kubernetes `type_name` (a list of them with many=True)."""
    if many:
        return Field(default_factory=list, max_length=max_items, description=description,
                     json_schema_extra={"items": {MARK: type_name}})
    return Field(None, description=description, json_schema_extra={MARK: type_name})


def refs(node: Any) -> list[str]:
    """Every schema name a node references."""
    if isinstance(node, list):
        return [r for n in node for r in refs(n)]
    if isinstance(node, dict):
        own = [node["$ref"].rsplit("/", 1)[1]] if isinstance(node.get("$ref"), str) else []
        return own + [r for v in node.values() for r in refs(v)]
    return []


def closure(openapi: dict[str, Any], roots: tuple[str, ...] = ROOTS) -> dict[str, Any]:
    """The roots and every schema they reference, as the API server serves them (pure)."""
    schemas = openapi["components"]["schemas"]
    out: dict[str, Any] = {}
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name not in out:
            out[name] = schemas[name]
            todo += refs(schemas[name])
    return dict(sorted(out.items()))


@cache
def _vendored() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(SCHEMAS.read_text())
    return loaded


def structural(type_name: str, schemas: dict[str, Any] | None = None) -> dict[str, Any]:
    """The CRD (structural) schema of core/v1 `type_name`: references inlined, int-or-string marked, defaults,
    formats and the API server's patch/list-map extensions left out (the pod's own validation applies them when
    the operator creates the pod), strings and lists bounded (BOUNDS, else MAX_STRING and MAX_ITEMS)."""
    return _inline(CORE + type_name, schemas or _vendored())


def _inline(name: str, schemas: dict[str, Any]) -> dict[str, Any]:
    if name in _OPAQUE:
        return {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    out = _convert(schemas[name], schemas)
    for prop, extra in BOUNDS.get(name.removeprefix(CORE), {}).items():
        out["properties"][prop].update(extra)
    return out


def _convert(node: dict[str, Any], schemas: dict[str, Any]) -> dict[str, Any]:
    if "$ref" in node:
        return _inline(node["$ref"].rsplit("/", 1)[1], schemas)
    said = {"description": node["description"]} if node.get("description") else {}
    if len(node.get("allOf") or []) == 1:  # OpenAPI v3 wraps a $ref to carry a description or default
        return {**_convert(node["allOf"][0], schemas), **said}
    one_of = node.get("oneOf") or node.get("anyOf")
    if node.get("x-kubernetes-int-or-string") or (one_of and {o.get("type") for o in one_of} <= {"string", "number", "integer"}):
        return {**said, "x-kubernetes-int-or-string": True}
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key not in _KEEP:
            continue
        if key == "properties":
            out[key] = {k: _convert(v, schemas) for k, v in value.items()}
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            out[key] = _convert(value, schemas)
        else:
            out[key] = value
    if out.get("type") == "string" and "enum" not in out:
        out["maxLength"] = MAX_STRING
    if out.get("type") == "array":
        out["maxItems"] = MAX_ITEMS
    if out.get("type") == "object" and "properties" not in out and "additionalProperties" not in out:
        out["x-kubernetes-preserve-unknown-fields"] = True  # FieldsV1 and the like: free-form
    return out
