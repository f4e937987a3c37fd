"""The Argo CD health checks in deploy/argocd, run with a real Lua interpreter (lupa) against sample objects,
the way Argo CD runs them: the object is the global `obj`, the script returns `{status, message}`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lupa
import pytest
import yaml

ARGOCD = Path(__file__).resolve().parents[2] / "deploy" / "argocd"
MLJOB = (ARGOCD / "health-mljob.lua").read_text()
POOL = (ARGOCD / "health-computepool.lua").read_text()


def health(script: str, obj: dict[str, Any]) -> dict[str, str]:
    lua = lupa.LuaRuntime(unpack_returned_tuples=True)
    lua.globals().obj = lua.table_from(obj, recursive=True)  # lists become 1-based sequences, as in Argo CD
    result = lua.execute(script)
    return {"status": result["status"], "message": result["message"]}


def job(status: dict[str, Any] | None) -> dict[str, Any]:
    obj: dict[str, Any] = {"apiVersion": "kubepool.dev/v1alpha1", "kind": "MLJob", "metadata": {"name": "j"}, "spec": {}}
    if status is not None:
        obj["status"] = status
    return obj


def pool(status: dict[str, Any] | None) -> dict[str, Any]:
    obj: dict[str, Any] = {"apiVersion": "kubepool.dev/v1alpha1", "kind": "ComputePool", "metadata": {"name": "p"}, "spec": {}}
    if status is not None:
        obj["status"] = status
    return obj


@pytest.mark.parametrize(("phase", "expected"), [
    ("PENDING", "Progressing"), ("RUNNING", "Progressing"), ("DONE", "Healthy"),
    ("FAILED", "Degraded"), ("CANCELLED", "Suspended"), ("SOMETHING_NEW", "Unknown"),
])
def test_mljob_phases(phase: str, expected: str) -> None:
    assert health(MLJOB, job({"phase": phase}))["status"] == expected


@pytest.mark.parametrize("status", [None, {}, {"readyInstances": 0}])
def test_mljob_without_phase_is_progressing(status: dict[str, Any] | None) -> None:
    assert health(MLJOB, job(status)) == {"status": "Progressing", "message": "Waiting for the kubepool operator to admit the job"}


def test_mljob_message_carries_phase_ready_reason_and_message() -> None:
    hs = health(MLJOB, job({"phase": "FAILED", "ready": "2/3", "reason": "HeadFailed", "message": "exit code 1",
                            "conditions": [{"type": "Failed", "status": "True"}]}))
    assert hs == {"status": "Degraded", "message": "FAILED (2/3 instances ready): HeadFailed - exit code 1"}


@pytest.mark.parametrize(("phase", "expected"), [
    ("ACTIVE", "Healthy"), ("IDLE", "Healthy"), ("SUSPENDED", "Suspended"), ("BROKEN", "Unknown"),
])
def test_computepool_phases(phase: str, expected: str) -> None:
    hs = health(POOL, pool({"phase": phase, "readyNodes": 3, "instancesInUse": 2, "queuedJobs": 1}))
    assert hs["status"] == expected
    assert hs["message"] == f"{phase}: 3 ready nodes, 2 instances in use, 1 jobs queued"


@pytest.mark.parametrize("condition", [
    {"type": "Degraded", "status": "True", "reason": "NoNodes", "message": "no node matches the selector"},
    {"type": "Ready", "status": "False", "reason": "NoNodes", "message": "no node matches the selector"},
])
def test_computepool_bad_condition_wins_over_phase(condition: dict[str, str]) -> None:
    hs = health(POOL, pool({"phase": "ACTIVE", "conditions": [{"type": "Other", "status": "True"}, condition]}))
    assert hs == {"status": "Degraded", "message": f"{condition['type']}: NoNodes - no node matches the selector"}


def test_computepool_good_conditions_keep_phase() -> None:
    conditions = [{"type": "Ready", "status": "True"}, {"type": "Degraded", "status": "False"}]
    assert health(POOL, pool({"phase": "IDLE", "conditions": conditions}))["status"] == "Healthy"


def test_computepool_without_status_is_progressing() -> None:
    assert health(POOL, pool(None))["status"] == "Progressing"


def test_argocd_cm_holds_the_scripts_verbatim() -> None:
    cm = yaml.safe_load((ARGOCD / "argocd-cm.yaml").read_text())
    assert cm["metadata"] == {"name": "argocd-cm", "namespace": "argocd",
                              "labels": {"app.kubernetes.io/name": "argocd-cm", "app.kubernetes.io/part-of": "argocd"}}
    assert cm["data"] == {
        "resource.customizations.health.kubepool.dev_MLJob": MLJOB,
        "resource.customizations.health.kubepool.dev_ComputePool": POOL,
    }


def test_application_installs_the_chart() -> None:
    app = yaml.safe_load((ARGOCD / "application.yaml").read_text())
    assert app["kind"] == "Application" and app["apiVersion"] == "argoproj.io/v1alpha1"
    assert app["spec"]["source"]["path"] == "charts/kubepool"
    chart = Path(__file__).resolve().parents[2] / app["spec"]["source"]["path"] / "Chart.yaml"
    assert chart.exists()
    assert "ServerSideApply=true" in app["spec"]["syncPolicy"]["syncOptions"]
