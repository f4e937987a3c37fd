"""The release path, end to end on real nodes: `make release` publishes the images and the chart to a real OCI
registry (the CNCF distribution registry, local, TLS from a CA of the test's own); the nodes' containerd trusts
that CA through its registry host config and pulls both images from it (nothing imported with `ctr`); the chart
installs from oci:// with what a platform team mirroring the release sets (the image repository, the tag; the
namespaces and a pool), and a job runs to DONE."""

from __future__ import annotations

import json
import subprocess
import time
import tomllib
import uuid
from dataclasses import dataclass

import pytest
import yaml

from kubepool.local import registry
from kubepool.local.layout import REPO_ROOT
from kubepool.local.realnode import nodes
from kubepool.local.realnode import registry as node_registry
from kubetest import Cluster, Kubectl

pytestmark = pytest.mark.realnode
VERSION = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["version"]
PATH = "kubepool"  # REGISTRY=<host>/kubepool, as ghcr.io/kubepool
MANIFEST = "application/vnd.oci.image.manifest.v1+json"
JOB_TIMEOUT_S = 600


@dataclass(frozen=True)
class Release:
    path: str  # <registry host>/kubepool
    revision: str  # the commit the images are labelled with


@pytest.fixture(scope="module")
def released(local_registry: registry.LocalRegistry) -> Release:
    """`make release` to the local registry; the runtime published is runtime-lean (the tier's jobs never import
    torch, and a node unpacks it in seconds instead of minutes). REVISION as CI passes it (the tag's commit):
    HEAD read here, since a shared checkout may move on while the images build."""
    revision = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    proc = subprocess.run(["make", "--no-print-directory", "release", f"REGISTRY={local_registry.host}/{PATH}",
                           f"REGISTRY_CA={local_registry.ca_file}", "RUNTIME_IMAGE=runtime-lean", f"REVISION={revision}"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, f"make release failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return Release(f"{local_registry.host}/{PATH}", revision)


def _manifest(reg: registry.LocalRegistry, name: str) -> tuple[str, dict]:
    _, body, headers = reg.get(f"/v2/{PATH}/{name}/manifests/{VERSION}", accept=MANIFEST)
    return headers["Docker-Content-Digest"], json.loads(body)


def test_published_images_carry_the_release_labels(local_registry: registry.LocalRegistry, released: Release) -> None:
    want = {"org.opencontainers.image.version": VERSION, "org.opencontainers.image.revision": released.revision,
            "org.opencontainers.image.source": "https://github.com/kubepool/kubepool"}
    for name in ("operator", "runtime"):
        digest, manifest = _manifest(local_registry, name)
        assert (REPO_ROOT / "dist" / "release" / f"{name}.digest").read_text().strip() == digest
        _, config, _ = local_registry.get(f"/v2/{PATH}/{name}/blobs/{manifest['config']['digest']}")
        labels = json.loads(config)["config"]["Labels"]
        assert {k: labels.get(k) for k in want} == want, name
        assert {k: manifest.get("annotations", {}).get(k) for k in want} == want, name
    tags = json.loads(local_registry.get(f"/v2/{PATH}/charts/kubepool/tags/list")[1])["tags"]
    assert tags == [VERSION]


def _wait_phase(kubectl: Kubectl, ns: str, job: str) -> str | None:
    t0, phase = time.monotonic(), None
    while phase not in ("DONE", "FAILED", "CANCELLED") and time.monotonic() - t0 < JOB_TIMEOUT_S:
        time.sleep(1)
        phase = kubectl.json("get", "mljob", job, "-n", ns).get("status", {}).get("phase")
    return phase


def test_fresh_install_from_oci_pulls_from_the_registry_and_runs_a_job(
    real_cluster: Cluster, rkubectl: Kubectl, local_registry: registry.LocalRegistry, released: Release,
) -> None:
    path = released.path
    lay = real_cluster.layout
    node_names = [n.name for n in nodes.load(lay.nodes_yaml)]
    hosts_dir = nodes.paths(lay, node_names[0]).registry_hosts_dir
    for n in node_names:  # a node whose containerd started before its config named the hosts dir would not pull
        assert str(hosts_dir) in nodes.paths(lay, n).containerd_config.read_text(), \
            f"{n}'s containerd predates its registry config: kubepool local down --state-dir {lay.state_dir}, then up"
    node_registry.trust(hosts_dir, local_registry.host, local_registry.ca_file.read_bytes())

    suffix = uuid.uuid4().hex[:6]
    rel, system_ns, jobs_ns, pool = f"kr-{suffix}", f"kr-system-{suffix}", f"kr-jobs-{suffix}", f"rel-cpu-{suffix}"
    helm = (lay.bin("helm"), "--kubeconfig", str(real_cluster.kubeconfig))
    # What a platform team mirroring the release sets: where the images are, their tag; which namespaces, a pool.
    values = {"image": {"repository": f"{path}/operator", "tag": VERSION},
              "operator": {"watchNamespaces": [jobs_ns], "warmCapacity": False},
              "pools": [{"name": pool, "spec": {"resources": {"cpu": "1", "memory": "1Gi"}, "minNodes": 0,
                                                "maxNodes": 1, "nodeSelector": {"kubepool.dev/node-pool": "cpu"}}}]}
    values_file = real_cluster.state_dir / f"{rel}-values.yaml"
    values_file.write_text(yaml.safe_dump(values))
    rkubectl("create", "namespace", jobs_ns, check=True)
    t0 = time.monotonic()
    proc = subprocess.run([*helm, "install", rel, f"oci://{path}/charts/kubepool", "--version", VERSION,
                           "--ca-file", str(local_registry.ca_file), "--namespace", system_ns, "--create-namespace",
                           "--values", str(values_file), "--wait", "--timeout", "300s"],
                          capture_output=True, text=True, timeout=360)
    try:
        assert proc.returncode == 0, proc.stderr + rkubectl("describe", "pods", "-n", system_ns).stdout[-3000:]
        job = {"apiVersion": "kubepool.dev/v1alpha1", "kind": "MLJob", "metadata": {"name": "released"},
               "spec": {"computePool": pool, "targetInstances": 1,
                        "entrypoint": {"command": ["python", "-c", "import kubepool; print('release', kubepool.__version__)"]}}}
        rkubectl("apply", "-n", jobs_ns, "-f", "-", input=yaml.safe_dump(job), check=True)
        phase = _wait_phase(rkubectl, jobs_ns, "released")
        pods = rkubectl.json("get", "pods", "-n", jobs_ns)["items"]
        logs = rkubectl("logs", "-n", jobs_ns, "-l", "kubepool.dev/job=released", "--tail=-1").stdout
        assert phase == "DONE", f"job {phase}; pods {json.dumps([p['status'] for p in pods])[-3000:]}\n{logs[-2000:]}"
        assert f"release {VERSION}" in logs, logs
        # Both images came from the registry: the pods name it, and containerd resolved the registry's digests.
        op_digest, _ = _manifest(local_registry, "operator")
        rt_digest, _ = _manifest(local_registry, "runtime")
        (op,) = [p for p in rkubectl.json("get", "pods", "-n", system_ns, "-l", "app.kubernetes.io/component=operator")["items"] if not p["metadata"].get("deletionTimestamp")]
        assert op["spec"]["containers"][0]["image"] == f"{path}/operator:{VERSION}"
        assert op["status"]["containerStatuses"][0]["imageID"] == f"{path}/operator@{op_digest}"
        (inst,) = [p for p in pods if p["metadata"]["name"].startswith("released-")]
        assert inst["spec"]["containers"][0]["image"] == f"{path}/runtime:{VERSION}"
        assert inst["status"]["containerStatuses"][0]["imageID"] == f"{path}/runtime@{rt_digest}"
        print(f"release install to DONE in {time.monotonic() - t0:.0f}s")
    finally:
        subprocess.run([*helm, "uninstall", rel, "--namespace", system_ns, "--wait"], capture_output=True, timeout=180)
        rkubectl("delete", "namespace", jobs_ns, system_ns, "--wait=false")
        values_file.unlink(missing_ok=True)
