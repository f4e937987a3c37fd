"""The chart as users get it: `helm package` output (what a chart repository serves) holds everything the
chart reads, renders the same as the source tree, and its NOTES.txt gives next steps that work without this
repository (the manifests it prints pass the API server's validation)."""

from __future__ import annotations

import re
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from chartlib import CHART, KUBE_VERSION, REPO, run_helm


@pytest.fixture(scope="module")
def package(helm: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("pkg")
    proc = run_helm(helm, "package", str(CHART), "--destination", str(out))
    assert proc.returncode == 0, proc.stderr
    [tgz] = out.glob("kubepool-*.tgz")
    return tgz


def test_package_holds_what_the_chart_reads(package: Path) -> None:
    names = set(tarfile.open(package).getnames())
    for path in ("Chart.yaml", "values.yaml", "values.schema.json", "templates/deployment.yaml", "templates/NOTES.txt",
                 "dashboards/kubepool.json", "crds/kubepool.dev_mljobs.yaml", "crds/kubepool.dev_computepools.yaml"):
        assert f"kubepool/{path}" in names, path
    assert not [n for n in names if n.endswith((".pyc", ".orig", "~")) or "/ci/" in n and n.endswith(".bak")]


def test_package_renders_as_the_source_tree(helm: str, package: Path) -> None:
    args = ("template", "kp", "--kube-version", KUBE_VERSION, "--set", "metrics.dashboard.enabled=true")
    from_tree, from_tgz = run_helm(helm, *args[:2], str(CHART), *args[2:]), run_helm(helm, *args[:2], str(package), *args[2:])
    assert from_tree.returncode == from_tgz.returncode == 0, from_tree.stderr + from_tgz.stderr
    assert from_tgz.stdout == from_tree.stdout


@pytest.mark.cluster
def test_notes_of_a_packaged_install_work_without_the_repository(helm: str, package: Path, cluster: Any,
                                                                  namespace: str) -> None:
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(REPO / "crds"), check=True)
    cluster.kubectl.wait_established("mljobs.kubepool.dev", "computepools.kubepool.dev")
    proc = run_helm(helm, "--kubeconfig", str(cluster.kubeconfig), "install", "kp-notes", str(package), "--namespace",
                    namespace, "--dry-run=server", "--set", "rbac.create=false", "--set", "serviceAccount.create=true")
    assert proc.returncode == 0, proc.stderr
    notes = proc.stdout.split("NOTES:", 1)[1]
    assert "examples/" not in notes and "charts/kubepool" not in notes, notes
    manifests = re.findall(r"kubectl apply -f - <<'EOF'\n(.*?)\n\s*EOF", notes, re.S)
    assert len(manifests) == 2, notes
    for text in manifests:
        obj = yaml.safe_load("\n".join(_dedent(text)))
        check = cluster.kubectl("apply", "--dry-run=server", "--validate=strict", "-n", namespace, "-f", "-",
                                input=yaml.safe_dump(obj))
        assert check.returncode == 0, f"{check.stderr}\n{text}"


def _dedent(text: str) -> list[str]:
    lines = text.splitlines()
    indent = min(len(ln) - len(ln.lstrip()) for ln in lines if ln.strip())
    return [ln[indent:] for ln in lines]


def test_crds_survive_the_release_and_the_argo_cd_application(package: Path) -> None:
    """Helm never deletes crds/ objects; Argo CD prunes and deletes what an Application renders unless told not
    to. Both policies are on each CRD (`helm uninstall` keeping them is tested in test_chart_install)."""
    tar = tarfile.open(package)
    for name in ("mljobs", "computepools"):
        member = tar.extractfile(f"kubepool/crds/kubepool.dev_{name}.yaml")
        assert member is not None
        annotations = yaml.safe_load(member.read())["metadata"]["annotations"]
        assert annotations["helm.sh/resource-policy"] == "keep"
        assert set(annotations["argocd.argoproj.io/sync-options"].split(",")) == {"Prune=false", "Delete=false",
                                                                                      "ServerSideApply=true"}
