"""Writes the Kubernetes types the chart's values take (affinity, tolerations, security contexts, extra env and
volumes, ...) into `definitions` of charts/kubepool/values.schema.json, from the OpenAPI v3 of a running API
server of the project's Kubernetes version. The values schema then accepts any valid Kubernetes object where
one goes and refuses a misspelt field at `helm install`, instead of the API server dropping it silently.

    python hack/chart/k8s_defs.py            # against $KUBECONFIG (e.g. after `kubepool local up`)

It also writes src/kubepool/api/k8s_schemas.json, the same API server's schemas of the types the CRDs take
(kubepool.api.k8stypes; the same traversal of references). Run it after a Kubernetes version bump;
tests/chart/test_chart_k8s_values.py and tests/api/test_k8s_types.py fail on drift."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from kubepool.api import k8stypes

SCHEMA = Path(__file__).resolve().parents[2] / "charts" / "kubepool" / "values.schema.json"
CORE = "io.k8s.api.core.v1."
ROOTS = tuple(CORE + t for t in ("Affinity", "Toleration", "TopologySpreadConstraint", "PodSecurityContext",
                                 "SecurityContext", "ResourceRequirements", "EnvVar", "Volume", "VolumeMount",
                                 "LocalObjectReference"))
_DROP = {"description", "default", "format", "nullable", "example"}


def _convert(node: Any) -> Any:
    if isinstance(node, list):
        return [_convert(n) for n in node]
    if not isinstance(node, dict):
        return node
    if node.get("format") == "int-or-string" or node.get("x-kubernetes-int-or-string"):
        return {"type": ["integer", "string"]}
    if list(node.get("allOf") or []) and len(node["allOf"]) == 1 and "$ref" in node["allOf"][0]:
        return _convert(node["allOf"][0])  # OpenAPI v3 wraps a $ref to carry a default
    out = {k: _convert(v) for k, v in node.items() if k not in _DROP and not k.startswith("x-kubernetes-")}
    if "$ref" in out:
        out["$ref"] = "#/definitions/" + out["$ref"].rsplit("/", 1)[1]
    if "properties" in out and "additionalProperties" not in out:
        out["additionalProperties"] = False  # the API server's strict field validation refuses unknown fields too
    return out


def definitions(openapi: dict[str, Any], roots: tuple[str, ...] = ROOTS) -> dict[str, Any]:
    """The roots and every type they reference, as JSON schema definitions (pure)."""
    return {name: _convert(schema) for name, schema in k8stypes.closure(openapi, roots).items()}


def live_openapi(kubectl: str = "kubectl", kubeconfig: str | None = None) -> dict[str, Any]:
    args = [kubectl, *([f"--kubeconfig={kubeconfig}"] if kubeconfig else []), "get", "--raw", "/openapi/v3/api/v1"]
    return json.loads(subprocess.run(args, check=True, capture_output=True, text=True).stdout)


def main() -> int:
    openapi = live_openapi(os.environ.get("KUBECTL", "kubectl"))
    schema = json.loads(SCHEMA.read_text())
    schema["definitions"] = definitions(openapi)
    SCHEMA.write_text(json.dumps(schema, indent=2) + "\n")
    print(f"{SCHEMA}: {len(schema['definitions'])} Kubernetes definitions", file=sys.stderr)
    k8stypes.SCHEMAS.write_text(json.dumps(k8stypes.closure(openapi), indent=1, sort_keys=True) + "\n")
    print(f"{k8stypes.SCHEMAS}: the CRDs' Kubernetes types", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
