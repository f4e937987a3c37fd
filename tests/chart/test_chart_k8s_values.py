"""Values that are Kubernetes objects (affinity, tolerations, spread constraints, security contexts, resources,
extra env, volumes and mounts, pull secrets) take any valid object, typed by the API server's own OpenAPI
(hack/chart/k8s_defs.py), and reach the operator pod as written; a misspelt field is refused at `helm
template` naming it; the definitions match the API server the project builds."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from chartlib import CHART, KUBE_VERSION, REPO, by_kind, run_helm

DEFS = REPO / "hack" / "chart" / "k8s_defs.py"
DIGEST = "sha256:" + "ab" * 32
OVERRIDES: dict[str, Any] = {
    "image": {"digest": DIGEST},
    "imagePullSecrets": [{"name": "regcred"}],
    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "kubepool.dev/node-pool", "operator": "In", "values": ["system"]}]}]}}},
    "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "ops", "effect": "NoExecute", "tolerationSeconds": 60}],
    "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                                   "whenUnsatisfiable": "ScheduleAnyway",
                                   "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "kubepool"}}}],
    "podSecurityContext": {"runAsNonRoot": True, "runAsUser": 1001, "supplementalGroups": [5000],
                           "fsGroupChangePolicy": "OnRootMismatch", "seccompProfile": {"type": "RuntimeDefault"}},
    "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "runAsUser": 1001,
                        "capabilities": {"drop": ["ALL"]}, "seLinuxOptions": {"level": "s0:c123,c456"}},
    "resources": {"requests": {"cpu": "200m", "memory": "300Mi", "ephemeral-storage": "1Gi"}, "limits": {"memory": 1073741824}},
    "extraEnv": [{"name": "HTTPS_PROXY", "value": "http://proxy:3128"},
                 {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
    "extraVolumes": [{"name": "ca", "configMap": {"name": "corp-ca"}},
                     {"name": "tok", "projected": {"sources": [{"serviceAccountToken": {"path": "t", "expirationSeconds": 3600}}]}}],
    "extraVolumeMounts": [{"name": "ca", "mountPath": "/etc/corp-ca", "readOnly": True}],
    "nodeSelector": {"kubernetes.io/os": "linux"},
    "podAnnotations": {"example.com/team": "ml"},
    "priorityClassName": "system-cluster-critical",
}


def _deployment(render: Any, tmp_path: Path) -> dict[str, Any]:
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump(OVERRIDES))
    [dep] = by_kind(render("--values", str(values)), "Deployment")
    return dep


def test_kubernetes_objects_reach_the_operator_pod(render: Any, tmp_path: Path) -> None:
    pod = _deployment(render, tmp_path)["spec"]["template"]
    spec, [c] = pod["spec"], pod["spec"]["containers"]
    assert c["image"] == f"ghcr.io/kubepool/operator@{DIGEST}"
    for key in ("affinity", "tolerations", "topologySpreadConstraints", "nodeSelector", "priorityClassName",
                "imagePullSecrets"):
        assert spec[key] == OVERRIDES[key], key
    # Maps merge with the chart's defaults (Helm's rule): what was given is there as given.
    assert OVERRIDES["podSecurityContext"].items() <= spec["securityContext"].items()
    assert OVERRIDES["securityContext"].items() <= c["securityContext"].items()
    assert c["resources"]["requests"] == OVERRIDES["resources"]["requests"]
    assert c["resources"]["limits"] == OVERRIDES["resources"]["limits"]
    assert c["env"][-2:] == OVERRIDES["extraEnv"]
    assert spec["volumes"][1:] == OVERRIDES["extraVolumes"] and c["volumeMounts"][1:] == OVERRIDES["extraVolumeMounts"]
    assert pod["metadata"]["annotations"] == OVERRIDES["podAnnotations"]


@pytest.mark.parametrize(("settings", "field"), [
    (["affinity.nodeAffinity.requiredDuringScheduling=x"], "requiredDuringScheduling"),
    (["securityContext.runAsUsr=1"], "runAsUsr"),
    (["extraEnv[0].name=A", "extraEnv[0].valu=1"], "valu"),
])
def test_a_misspelt_field_is_refused_naming_it(helm: str, settings: list[str], field: str) -> None:
    args = [a for s in settings for a in ("--set", s)]
    proc = run_helm(helm, "template", "kp", str(CHART), "--kube-version", KUBE_VERSION, *args)
    assert proc.returncode != 0 and "values don't meet the specifications of the schema" in proc.stderr, proc.stderr
    assert field in proc.stderr


def _k8s_defs() -> Any:
    spec = importlib.util.spec_from_file_location("k8s_defs", DEFS)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.cluster
def test_definitions_match_the_api_server(cluster: Any) -> None:
    live = _k8s_defs().live_openapi(cluster.kubectl.binary, str(cluster.kubeconfig))
    shipped = json.loads((CHART / "values.schema.json").read_text())["definitions"]
    assert shipped == _k8s_defs().definitions(live), "stale: run `python hack/chart/k8s_defs.py` (docstring)"


@pytest.mark.cluster
def test_the_api_server_accepts_the_rendered_pod(cluster: Any, render: Any, tmp_path: Path) -> None:
    dep = _deployment(render, tmp_path)
    proc = cluster.kubectl("apply", "--dry-run=server", "--validate=strict", "-n", "default", "-f", "-",
                           input=json.dumps({**dep, "metadata": {**dep["metadata"], "namespace": "default"}}))
    assert proc.returncode == 0, proc.stderr
