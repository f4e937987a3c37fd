"""The Argo CD customizations in deploy/argocd/resource_customizations (Argo CD's own layout: health.lua with
health_test.yaml and testdata/, actions/ with discovery.lua, one action.lua per action and action_test.yaml),
run the way Argo CD runs them: a real Lua interpreter (lupa), the object as the global `obj`. Every case of
every health_test.yaml and action_test.yaml runs here, so the files are also what Argo CD's own test runner
would check if the scripts were contributed upstream."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import lupa
import pytest
import yaml

ARGOCD = Path(__file__).resolve().parents[2] / "deploy" / "argocd"
KINDS = sorted(p for group in (ARGOCD / "resource_customizations").iterdir() for p in group.iterdir())


def _lua(obj: dict[str, Any]) -> Any:
    lua = lupa.LuaRuntime(unpack_returned_tuples=True)
    lua.globals().obj = lua.table_from(obj, recursive=True)  # lists become 1-based sequences, as in Argo CD
    return lua


def _py(value: Any) -> Any:
    """A Lua table back to Python (sequences to lists), as Argo CD converts an action's result to JSON."""
    if lupa.lua_type(value) != "table":
        return value
    items = dict(value.items())
    if items and all(isinstance(k, int) for k in items) and sorted(items) == list(range(1, len(items) + 1)):
        return [_py(items[i]) for i in range(1, len(items) + 1)]
    return {k: _py(v) for k, v in items.items()}


def _cases(name: str, key: str) -> list[Any]:
    out = []
    for kind in KINDS:
        path = kind / name
        if path.exists():
            out += [pytest.param(path.parent, case, id=f"{kind.name}-{case.get('inputPath', case.get('action'))}")
                    for case in yaml.safe_load(path.read_text()).get(key, [])]
    return out


def test_layout() -> None:
    assert [k.name for k in KINDS] == ["ComputePool", "MLJob"]
    for kind in KINDS:
        assert (kind / "health.lua").is_file() and (kind / "health_test.yaml").is_file()
        referenced = {c["inputPath"] for c in yaml.safe_load((kind / "health_test.yaml").read_text())["tests"]}
        assert referenced == {f"testdata/{p.name}" for p in (kind / "testdata").iterdir()}, "unused or missing testdata"


@pytest.mark.parametrize(("kind", "case"), _cases("health_test.yaml", "tests"))
def test_health(kind: Path, case: dict[str, Any]) -> None:
    obj = yaml.safe_load((kind / case["inputPath"]).read_text())
    result = _lua(obj).execute((kind / "health.lua").read_text())
    assert {"status": result["status"], "message": result["message"]} == case["healthStatus"]


@pytest.mark.parametrize(("actions", "case"), _cases("actions/action_test.yaml", "discoveryTests"))
def test_action_discovery(actions: Path, case: dict[str, Any]) -> None:
    obj = yaml.safe_load((actions / case["inputPath"]).read_text())
    found = _py(_lua(obj).execute((actions / "discovery.lua").read_text()))
    assert sorted(({"name": n, **a} for n, a in found.items()), key=lambda a: a["name"]) == case["result"]


@pytest.mark.parametrize(("actions", "case"), _cases("actions/action_test.yaml", "actionTests"))
def test_action(actions: Path, case: dict[str, Any]) -> None:
    obj = yaml.safe_load((actions / case["inputPath"]).read_text())
    out = _py(_lua(obj).execute((actions / case["action"] / "action.lua").read_text()))
    assert out == yaml.safe_load((actions / case["expectedOutputPath"]).read_text())


def test_argocd_cm_is_rendered_from_the_layout() -> None:
    spec = importlib.util.spec_from_file_location("render_argocd_cm", ARGOCD / "render_argocd_cm.py")
    assert spec and spec.loader
    render = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(render)
    cm = yaml.safe_load((ARGOCD / "argocd-cm.yaml").read_text())
    assert cm["data"] == render.data(), "stale: run `python deploy/argocd/render_argocd_cm.py`"
    assert set(cm["data"]) == {f"resource.customizations.{what}.kubepool.dev_{kind}"
                               for what in ("health", "actions") for kind in ("MLJob", "ComputePool")}
    actions = yaml.safe_load(cm["data"]["resource.customizations.actions.kubepool.dev_MLJob"])
    assert [d["name"] for d in actions["definitions"]] == ["cancel", "resume", "suspend"] and "discovery.lua" in actions


def test_application_installs_the_chart() -> None:
    app = yaml.safe_load((ARGOCD / "application.yaml").read_text())
    assert app["kind"] == "Application" and app["apiVersion"] == "argoproj.io/v1alpha1"
    # The released chart from its OCI repository (tests/release checks the version against the release's).
    chart = yaml.safe_load((Path(__file__).resolve().parents[2] / "charts/kubepool/Chart.yaml").read_text())
    assert app["spec"]["source"]["chart"] == chart["name"] and "path" not in app["spec"]["source"]
    assert "ServerSideApply=true" in app["spec"]["syncPolicy"]["syncOptions"]
