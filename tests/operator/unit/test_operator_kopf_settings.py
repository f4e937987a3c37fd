"""The operator's kopf settings that are code: the lean diff base keeps kopf's essence of the kinds with change
handlers exactly as kopf builds it, and builds none for the others."""

from __future__ import annotations

from typing import Any

import kopf

from kubepool.controller.main import LeanDiffBaseStorage


def _body(kind: str) -> dict[str, Any]:
    return {"apiVersion": "kubepool.dev/v1alpha1", "kind": kind,
            "metadata": {"name": "x", "namespace": "ns", "uid": "u", "resourceVersion": "7", "generation": 2,
                         "labels": {"a": "b"}, "managedFields": [{"manager": "m", "fieldsV1": {"f:spec": {}}}],
                         "annotations": {"kubepool.dev/last-handled-configuration": "{}", "user/note": "n"}},
            "spec": {"targetInstances": 3, "env": [{"name": "A", "value": "1"}]},
            "status": {"phase": "RUNNING", "instances": [{"instanceId": 0}]}}


def test_lean_diff_base_matches_kopfs_for_handled_kinds() -> None:
    lean = LeanDiffBaseStorage(prefix="kubepool.dev", key="last-handled-configuration")
    full = kopf.AnnotationsDiffBaseStorage(prefix="kubepool.dev", key="last-handled-configuration")
    for kind in ("ComputePool",):
        body = kopf.Body(_body(kind))
        for extra in (None, [("spec",)], [("status", "phase")], [("metadata", "uid")]):
            assert lean.build(body=body, extra_fields=extra) == full.build(body=body, extra_fields=extra)
        essence = lean.build(body=body)
        essence["spec"]["env"][0]["value"] = "2"  # a copy, as kopf's: the body stays as watched
        assert body["spec"]["env"][0]["value"] == "1"


def test_lean_diff_base_builds_nothing_for_kinds_without_change_handlers() -> None:
    lean = LeanDiffBaseStorage(prefix="kubepool.dev", key="last-handled-configuration")
    for kind in ("Pod", "Node", "MLJob"):
        assert lean.build(body=kopf.Body(_body(kind))) is None
