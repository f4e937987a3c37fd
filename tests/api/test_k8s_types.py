"""The Kubernetes types in the CRDs (affinity, tolerations, volumes, mounts, env sources) are the API server's own
schemas (kubepool.api.k8stypes, k8s_schemas.json written by hack/chart/k8s_defs.py), not hand-written ones."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kubepool.api import k8stypes
from kubepool.api.crdgen import mljob_crd

pytestmark = pytest.mark.api  # the API server alone: no operator, no pod runs (make test-fast)


def _marks(node: Any) -> list[str]:
    if isinstance(node, dict):
        own = [node[k8stypes.MARK]] if k8stypes.MARK in node else []
        return own + [m for v in node.values() for m in _marks(v)]
    if isinstance(node, list):
        return [m for v in node for m in _marks(v)]
    return []


def test_every_marked_field_names_a_vendored_root() -> None:
    from kubepool.api import MLJobSpec
    marks = set(_marks(MLJobSpec.model_json_schema(by_alias=True)))
    assert marks and {k8stypes.CORE + m for m in marks} <= set(k8stypes.ROOTS)


def test_the_crd_inlines_the_api_servers_schema() -> None:
    spec = mljob_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    mount = spec["properties"]["volumeMounts"]["items"]
    vendored = json.loads(k8stypes.SCHEMAS.read_text())[k8stypes.CORE + "VolumeMount"]
    assert set(mount["properties"]) == set(vendored["properties"]) and mount["required"] == vendored["required"]
    assert mount["properties"]["mountPath"]["maxLength"] == 1024  # BOUNDS
    divisor = spec["properties"]["env"]["items"]["properties"]["valueFrom"]["properties"]["resourceFieldRef"]["properties"]["divisor"]
    assert divisor["x-kubernetes-int-or-string"] is True  # a Quantity
    assert "$ref" not in json.dumps(spec)


@pytest.mark.cluster
def test_vendored_schemas_match_the_api_server(cluster: Any) -> None:
    live = json.loads(cluster.kubectl("get", "--raw", "/openapi/v3/api/v1", check=True).stdout)
    shipped = json.loads(k8stypes.SCHEMAS.read_text())
    assert shipped == k8stypes.closure(live), "stale: run `python hack/chart/k8s_defs.py` (its docstring)"
