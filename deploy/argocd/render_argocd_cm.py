"""Writes argocd-cm.yaml from resource_customizations/ (Argo CD's own layout, the source of truth): each kind's
health.lua and actions as the `resource.customizations.*` keys Argo CD reads from its ConfigMap.

    python deploy/argocd/render_argocd_cm.py    # tests/argocd fails when argocd-cm.yaml is stale"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
CUSTOM = HERE / "resource_customizations"
HEADER = """\
# Generated from resource_customizations/ by render_argocd_cm.py; do not edit.
# Merge into the argocd-cm ConfigMap (namespace argocd) for MLJob and ComputePool health and actions:
#   kubectl -n argocd patch configmap argocd-cm --type merge --patch-file deploy/argocd/argocd-cm.yaml
"""


class _Literal(str):
    pass


yaml.SafeDumper.add_representer(_Literal, lambda d, s: d.represent_scalar("tag:yaml.org,2002:str", s, style="|"))


def data() -> dict[str, str]:
    out: dict[str, str] = {}
    for kind_dir in sorted(p for group in CUSTOM.iterdir() for p in group.iterdir()):
        key = f"{kind_dir.parent.name}_{kind_dir.name}"
        out[f"resource.customizations.health.{key}"] = (kind_dir / "health.lua").read_text()
        actions = kind_dir / "actions"
        if actions.is_dir():
            doc: dict[str, Any] = {"discovery.lua": _Literal((actions / "discovery.lua").read_text()), "definitions": [
                {"name": a.name, "action.lua": _Literal((a / "action.lua").read_text())}
                for a in sorted(actions.iterdir()) if (a / "action.lua").is_file()]}
            out[f"resource.customizations.actions.{key}"] = yaml.safe_dump(doc, sort_keys=False)
    return out


def configmap() -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "argocd-cm", "namespace": "argocd",
                         "labels": {"app.kubernetes.io/name": "argocd-cm", "app.kubernetes.io/part-of": "argocd"}},
            "data": {k: _Literal(v) for k, v in data().items()}}


def main() -> int:
    (HERE / "argocd-cm.yaml").write_text(HEADER + yaml.safe_dump(configmap(), sort_keys=False, width=200))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
