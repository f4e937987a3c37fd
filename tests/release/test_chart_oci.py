"""The chart as the release publishes it: pushed to a real OCI registry (the CNCF distribution registry, TLS from
the test's CA) with the project's helm and installed from `oci://`; and that helm, built with Helm's own version
settings, assumes the Kubernetes its chart library was built against when no cluster is asked (`helm template`),
which the chart's kubeVersion accepts."""

from __future__ import annotations

import json
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

from kubepool.local import controlplane, layout, registry

REPO = layout.REPO_ROOT
CHART = REPO / "charts" / "kubepool"
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]


@pytest.fixture(scope="module")
def helm() -> str:
    return str(controlplane.ensure_binaries(say=lambda _: None) / "helm")


def _helm(helm: str, *args: str) -> str:
    proc = subprocess.run([helm, *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"helm {' '.join(args)}: {proc.stderr}"
    return proc.stdout


def _versions_env() -> dict[str, str]:
    text = (REPO / "src/kubepool/local/k8sbin/versions.env").read_text()
    return dict(line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#"))


def test_helm_is_built_with_helms_version_settings(helm: str, tmp_path: Path) -> None:
    pin = _versions_env()["HELM_VERSION"]
    assert _helm(helm, "version", "--template", "{{.Version}}") == pin
    # The Kubernetes its chart library assumes is Helm's rule from Helm's go.mod: client-go v0.N.x -> v1.N.
    mod = json.loads(subprocess.run(["go", "mod", "download", "-json", f"helm.sh/helm/v3@{pin}"], capture_output=True,
                                    text=True, check=True, timeout=120).stdout)["GoMod"]
    client = next(line.split()[1] for line in Path(mod).read_text().splitlines() if line.strip().startswith("k8s.io/client-go "))
    probe = tmp_path / "probe"
    (probe / "templates").mkdir(parents=True)
    (probe / "Chart.yaml").write_text("apiVersion: v2\nname: probe\nversion: 0.0.1\n")
    (probe / "templates" / "cm.yaml").write_text("kube: {{ .Capabilities.KubeVersion.Version }}\n")
    rendered = yaml.safe_load(_helm(helm, "template", str(probe)).split("---", 1)[1])
    assert rendered["kube"] == f"v1.{client.split('.')[1]}.0"
    # So the chart renders with no --kube-version (a lib default of 1.20 refused it: kubeVersion).
    _helm(helm, "template", "kp", str(CHART))


def test_chart_pushed_to_a_registry_installs_from_oci(helm: str, local_registry: registry.LocalRegistry,
                                                      tmp_path: Path) -> None:
    _helm(helm, "package", str(CHART), "--version", VERSION, "--app-version", VERSION, "-d", str(tmp_path))
    repo = f"oci://{local_registry.host}/kubepool/charts"
    ca = ("--ca-file", str(local_registry.ca_file))
    _helm(helm, "push", str(tmp_path / f"kubepool-{VERSION}.tgz"), repo, *ca)
    shown = yaml.safe_load(_helm(helm, "show", "chart", f"{repo}/kubepool", "--version", VERSION, *ca))
    assert (shown["version"], shown["appVersion"]) == (VERSION, VERSION)
    args = ("--set", f"image.repository={local_registry.host}/kubepool/operator")
    from_oci = _helm(helm, "template", "kp", f"{repo}/kubepool", "--version", VERSION, *ca, *args)
    assert from_oci == _helm(helm, "template", "kp", str(CHART), *args)
    images = {c["image"] for d in yaml.safe_load_all(from_oci) if d and d["kind"] == "Deployment"
              for c in d["spec"]["template"]["spec"]["containers"]}
    assert images == {f"{local_registry.host}/kubepool/operator:{VERSION}"}
    env = {e["name"]: e.get("value") for d in yaml.safe_load_all(from_oci) if d and d["kind"] == "Deployment"
           for c in d["spec"]["template"]["spec"]["containers"] for e in c.get("env", [])}
    # The runtime image follows the operator's repository and tag: one --set moves both.
    assert f"{local_registry.host}/kubepool/runtime:{VERSION}" in json.dumps(env)
