"""Generates the CRDs in `crds/` from the pydantic models: the models are the single source of truth.

pydantic's JSON Schema is not a Kubernetes structural schema, so this module inlines `$ref`s, collapses
`anyOf: [X, null]` to X, drops `title`, `additionalProperties: false`, null and empty defaults. The CEL rules
come with the schema: each model declares its own (`Model.cel_rules`). Run `python -m kubepool.api.crdgen crds/`
(`make crds`).
"""

from __future__ import annotations

import sys
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from kubepool import naming
from kubepool.api import computepool as cp
from kubepool.api import k8stypes
from kubepool.api import mljob as mj
from kubepool.api.common import CelRule, Model

_DROP = {"title", "$defs"}


# Deleting a release or an Argo CD Application must never delete the CRDs (and with them every MLJob and
# ComputePool in the cluster): Helm's keep policy, and Argo CD's own, which does not read Helm's.
# The MLJob CRD carries Kubernetes' pod types (volumes, affinity) and is larger than the 256 KiB
# last-applied annotation of a client-side apply: Argo CD applies it server-side, as the docs tell kubectl users to.
KEEP = {"helm.sh/resource-policy": "keep",
        "argocd.argoproj.io/sync-options": "Prune=false,Delete=false,ServerSideApply=true"}


def _clean(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, list):
        return [_clean(n, defs) for n in node]
    if not isinstance(node, dict):
        return node
    node = dict(node)
    if k8stypes.MARK in node:  # a Kubernetes type: the API server's own schema, keeping the field's description
        inline = k8stypes.structural(node.pop(k8stypes.MARK))
        node = {**inline, **{k: v for k, v in node.items() if k in ("description", "x-kubernetes-validations")}}
        return node
    if "$ref" in node:  # inline, keeping sibling keys (description, extras) over the target's
        name = node.pop("$ref").rsplit("/", 1)[-1]
        target = dict(defs[name])
        node = {**target, **{k: v for k, v in node.items() if k != "default" or v is not None}}
    if "anyOf" in node:
        options = [o for o in node["anyOf"] if o != {"type": "null"}]
        if len(options) != 1:
            raise ValueError(f"unions are not structural: {node['anyOf']}")
        outer = {k: v for k, v in node.items() if k != "anyOf"}
        inner = _clean(options[0], defs)
        node = {**inner, **outer}
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROP:
            continue
        if key == "default" and (value is None or value == [] or value == {}):
            continue
        if key == "additionalProperties" and value is False:
            continue
        if key == "additionalProperties" and value is True:
            out["x-kubernetes-preserve-unknown-fields"] = True
            continue
        if key == "exclusiveMinimum" and not isinstance(value, bool):
            out["minimum"], out["exclusiveMinimum"] = value, True
            continue
        if key == "properties":
            out[key] = {k: _clean(v, defs) for k, v in value.items()}
            continue
        out[key] = _clean(value, defs)
    if out.get("type") == "object" and "properties" not in out and "additionalProperties" not in out:
        out["x-kubernetes-preserve-unknown-fields"] = True
    return out


def _models(model: type[Model]) -> Iterator[type[Model]]:
    """`model` and every model its fields hold, at any depth (each once)."""
    seen: set[type[Model]] = set()
    todo = [model]
    while todo:
        cls = todo.pop()
        if cls in seen:
            continue
        seen.add(cls)
        yield cls
        types = [f.annotation for f in cls.model_fields.values()]
        while types:
            t = types.pop()
            types += typing.get_args(t)
            if isinstance(t, type) and issubclass(t, Model):
                todo.append(t)


def _declared_rules(model: type[Model]) -> dict[str, list[CelRule]]:
    """The CEL rules the models of `model`'s schema declare, by their schema definition's name."""
    by_name: dict[str, type[Model]] = {}
    for cls in _models(model):
        other = by_name.setdefault(cls.__name__, cls)
        if other is not cls:  # pydantic would give both one definition, and one's rules to the other
            raise ValueError(f"two models named {cls.__name__} ({other.__module__}, {cls.__module__}): rename one")
    return {name: cls.own_cel_rules() for name, cls in by_name.items() if cls is not model and cls.own_cel_rules()}


def structural_schema(model: type[Model]) -> dict[str, Any]:
    raw = model.model_json_schema(by_alias=True, mode="validation", ref_template="#/$defs/{model}")
    defs = raw.get("$defs", {})
    for name, rules in _declared_rules(model).items():
        defs[name] = {**defs[name], "x-kubernetes-validations": rules}
    schema: dict[str, Any] = _clean(raw, defs)
    if model.own_cel_rules():
        schema["x-kubernetes-validations"] = model.own_cel_rules()
    return schema


def _conditions_as_map(schema: dict[str, Any]) -> None:
    cond = schema["properties"]["status"]["properties"]["conditions"]
    cond["x-kubernetes-list-type"] = "map"
    cond["x-kubernetes-list-map-keys"] = ["type"]


def _root(kind_model: type[Model], spec_model: type[Model], status_model: type[Model]) -> dict[str, Any]:
    root: dict[str, Any] = {
        "type": "object",
        "description": kind_model.__doc__ or "",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string", "description": "APIVersion of this object (kubepool.dev/v1alpha1)."},
            "kind": {"type": "string", "description": "Kind of this object."},
            "metadata": {"type": "object"},
            "spec": structural_schema(spec_model),
            "status": structural_schema(status_model),
        },
    }
    if kind_model.own_cel_rules():
        root["x-kubernetes-validations"] = kind_model.own_cel_rules()
    _conditions_as_map(root)
    return root


def _crd(kind: str, plural: str, short: str, scope: str, schema: dict[str, Any], columns: list[dict[str, Any]],
         scale: dict[str, str] | None = None, categories: tuple[str, ...] = ("kubepool",)) -> dict[str, Any]:
    subresources: dict[str, Any] = {"status": {}}
    if scale:
        subresources["scale"] = scale
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{naming.GROUP}", "labels": {"app.kubernetes.io/part-of": "kubepool"},
                     "annotations": KEEP},
        "spec": {
            "group": naming.GROUP,
            "names": {"kind": kind, "listKind": f"{kind}List", "plural": plural, "singular": kind.lower(),
                      "shortNames": [short], "categories": list(categories)},
            "scope": scope,
            "versions": [{
                "name": naming.VERSION, "served": True, "storage": True,
                "subresources": subresources,
                "additionalPrinterColumns": columns,
                "schema": {"openAPIV3Schema": schema},
            }],
        },
    }


def mljob_crd() -> dict[str, Any]:
    schema = _root(mj.MLJob, mj.MLJobSpec, mj.MLJobStatus)
    return _crd(naming.MLJOB_KIND, naming.MLJOB_PLURAL, naming.MLJOB_SHORT, "Namespaced", schema, [
        {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
        {"name": "Ready", "type": "string", "jsonPath": ".status.ready"},
        {"name": "Pool", "type": "string", "jsonPath": ".status.pools"},
        {"name": "Reason", "type": "string", "jsonPath": ".status.reason", "priority": 1},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ], scale={"specReplicasPath": ".spec.targetInstances", "statusReplicasPath": ".status.readyInstances",
              "labelSelectorPath": ".status.selector"},
        categories=("kubepool", "all"))  # `kubectl get all` lists jobs, as it lists Jobs


def computepool_crd() -> dict[str, Any]:
    schema = _root(cp.ComputePool, cp.ComputePoolSpec, cp.ComputePoolStatus)
    return _crd(naming.POOL_KIND, naming.POOL_PLURAL, naming.POOL_SHORT, "Cluster", schema, [
        {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
        {"name": "Family", "type": "string", "jsonPath": ".spec.instanceFamily"},
        {"name": "Nodes", "type": "integer", "jsonPath": ".status.readyNodes"},
        {"name": "In-Use", "type": "integer", "jsonPath": ".status.instancesInUse"},
        {"name": "Max", "type": "integer", "jsonPath": ".spec.maxNodes"},
        {"name": "Warm", "type": "integer", "jsonPath": ".status.warmInstances"},
        {"name": "Queued", "type": "integer", "jsonPath": ".status.queuedJobs"},
        {"name": "Suspended", "type": "boolean", "jsonPath": ".spec.suspend"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ])


def render_all() -> dict[str, str]:
    """File name → YAML text of every CRD."""
    out = {}
    for crd in (computepool_crd(), mljob_crd()):
        text = "# Generated by `make crds` from src/kubepool/api; do not edit.\n"
        text += yaml.safe_dump(crd, sort_keys=False, width=120, allow_unicode=True)
        out[f"{naming.GROUP}_{crd['spec']['names']['plural']}.yaml"] = text
    return out


def main(argv: list[str]) -> int:
    target = Path(argv[0] if argv else "crds")
    target.mkdir(parents=True, exist_ok=True)
    for name, text in render_all().items():
        (target / name).write_text(text)
        print(f"wrote {target / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
