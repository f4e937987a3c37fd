"""The chart's Kubernetes claim, run. On the lowest minor its kubeVersion admits (a local cluster of its own,
built from the wrapper module k8sbin/kubernetes-<minor>/, slot 6) and on the newest (the pinned 1.36, the shared
test cluster): the CRDs and every chart template pass the API server's dry run, the operator starts, and one job
runs to DONE on process nodes. A cold build of the lowest minor's binaries costs about 7 minutes of 2 cores,
once: they are cached in ~/.cache/kubepool/k8s like the pinned ones."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from kubepool.local import layout
from kubepool.local.layout import Layout
from kubetest import Kubectl
from support.operator_cluster import Operator, wait_phase

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(1800)]
REPO = layout.REPO_ROOT
CHART = REPO / "charts" / "kubepool"
K8SBIN = REPO / "src" / "kubepool" / "local" / "k8sbin"
COMPAT_SLOT = 6
CLUSTER_SCOPED = {"ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
                  "ComputePool", "PriorityClass"}
# Values that between them render every template of the chart (the monitoring ones need the Prometheus
# operator's CRDs, which no cluster here serves: left to test_chart_observability).
VALUE_SETS = {
    "defaults": [],
    "ha": ["-f", str(CHART / "ci" / "ha-values.yaml")],
    "namespaced": ["-f", str(CHART / "ci" / "namespaced-values.yaml")],
    "pools and dashboard": ["--set", "metrics.dashboard.enabled=true", "--set", "pools[0].name=compat-pool",
                            "--set", "pools[0].spec.instanceFamily=CPU_X64_S"],
}


def claimed_lowest_minor() -> str:
    claim = yaml.safe_load((CHART / "Chart.yaml").read_text())["kubeVersion"]
    m = re.fullmatch(r">=\s*1\.(\d+)\.0-0", claim)
    assert m, f"kubeVersion {claim!r}: a lower bound >=1.N.0-0 is what the compatibility run checks"
    return f"1.{m[1]}"


def built_version(minor: str) -> str:
    """The Kubernetes release built for `minor`: the pin, or the wrapper module kubernetes-<minor>/'s."""
    pinned = layout.kube_version()
    if pinned.startswith(f"v{minor}."):
        return pinned
    gomod = K8SBIN / f"kubernetes-{minor}" / "go.mod"
    assert gomod.exists(), f"the chart claims Kubernetes {minor}, but no wrapper module builds it ({gomod})"
    return re.search(r"k8s\.io/kubernetes (v\S+)", gomod.read_text())[1]  # type: ignore[index]


def test_the_docs_state_what_is_tested() -> None:
    lowest, newest = built_version(claimed_lowest_minor()), layout.kube_version()
    docs = (REPO / "docs" / "install.md").read_text()
    for v in (lowest, newest):
        assert v.lstrip("v") in docs, f"docs/install.md does not name {v}, which the compatibility run tests"


@pytest.fixture(scope="module")
def lowest_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Layout, str]]:
    version = built_version(claimed_lowest_minor())
    state = tmp_path_factory.mktemp("compat") / "state"
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBEPOOL_")} | {"KUBEPOOL_KUBE_VERSION": version}
    cli = [sys.executable, "-m", "kubepool.local.cli"]
    try:
        up = subprocess.run([*cli, "up", "--state-dir", str(state), "--slot", str(COMPAT_SLOT)], env=env,
                            capture_output=True, text=True, timeout=1500)
        assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
        lay = Layout.load(state)
        assert lay is not None
        yield lay, version
    finally:
        subprocess.run([*cli, "down", "--state-dir", str(state)], env=env, capture_output=True, timeout=300)


def _compat_run(kubectl: Kubectl, kubeconfig: Path, helm: str, version: str, tmp_path: Path) -> None:
    served = json.loads(kubectl("version", "-o", "json", check=True).stdout)["serverVersion"]["gitVersion"]
    assert served == version
    kubectl("apply", "--server-side", "--force-conflicts", "-f", str(REPO / "crds"), check=True)
    kubectl.wait_established("mljobs.kubepool.dev", "computepools.kubepool.dev")
    suffix = uuid.uuid4().hex[:6]
    with kubectl.fresh_namespace(f"compat-{suffix}") as ns, kubectl.fresh_namespace(f"compat-jobs-{suffix}") as jobs:
        for name, args in VALUE_SETS.items():
            if name == "namespaced":
                args = [*args, "--set", f"operator.watchNamespaces={{{jobs}}}"]
            # The API server's Capabilities, as an install sees them (helm template asks no cluster).
            proc = subprocess.run([helm, "template", f"c{suffix}", str(CHART), "--namespace", ns, "--kube-version",
                                   version, *args], capture_output=True, text=True, timeout=120)
            assert proc.returncode == 0, f"{name}: {proc.stderr}"
            docs = [d for d in yaml.safe_load_all(proc.stdout) if d]
            for d in docs:  # as helm install places them: the release namespace unless the chart names another
                if d["kind"] not in CLUSTER_SCOPED:
                    d["metadata"].setdefault("namespace", ns)
            # A dry run persists nothing, and admission looks up a pod's ServiceAccount (the `helm test` pod's):
            # the chart's ServiceAccounts are created for real first.
            accounts = [d for d in docs if d["kind"] == "ServiceAccount"]
            if accounts:
                kubectl("apply", "-f", "-", input=yaml.safe_dump_all(accounts), check=True)
            dry = kubectl("apply", "--dry-run=server", "-f", "-", input=yaml.safe_dump_all(docs))
            assert dry.returncode == 0, f"{name} on {version}: {dry.stderr}\nkinds {sorted({d['kind'] for d in docs})}"
        op = Operator(kubeconfig, jobs, tmp_path / "operator.log")
        op.start()
        try:
            pool = f"compat-{suffix}"
            kubectl("apply", "-f", "-", check=True, input=yaml.safe_dump({
                "apiVersion": "kubepool.dev/v1alpha1", "kind": "ComputePool", "metadata": {"name": pool},
                "spec": {"instanceFamily": "CPU_X64_S", "minNodes": 0, "maxNodes": 1,
                         "nodeSelector": {"kubepool.dev/node-pool": "cpu"}}}))
            kubectl("apply", "-n", jobs, "-f", "-", check=True, input=yaml.safe_dump({
                "apiVersion": "kubepool.dev/v1alpha1", "kind": "MLJob", "metadata": {"name": "compat"},
                "spec": {"computePool": pool, "targetInstances": 1,
                         "entrypoint": {"command": ["python", "-c", "print('compat ok')"]}}}))
            wait_phase(kubectl, jobs, "compat", {"DONE"}, 300, op)
        finally:
            op.stop()
            kubectl("delete", "computepool", f"compat-{suffix}", "--wait=false")


def test_lowest_claimed_minor(lowest_cluster: tuple[Layout, str], tmp_path: Path) -> None:
    lay, version = lowest_cluster
    assert version.startswith(f"v{claimed_lowest_minor()}.")
    _compat_run(Kubectl(lay.bin("kubectl"), lay.kubeconfig), lay.kubeconfig, lay.bin("helm"), version, tmp_path)


def test_newest_claimed_minor(cluster: object, kubectl: Kubectl, tmp_path: Path) -> None:
    lay = cluster.layout  # type: ignore[attr-defined]
    _compat_run(kubectl, lay.kubeconfig, lay.bin("helm"), layout.kube_version(), tmp_path)
