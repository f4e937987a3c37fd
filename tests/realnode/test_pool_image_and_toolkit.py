"""What only containers can show about a job's image: the instances of a pool with `spec.image` run that image
and those of a pool without it run the operator's runtime image (process nodes ignore images), and the runtime
image carries SageMaker's training toolkit, so a SageMaker-mode script built on
`sagemaker_training.environment.Environment()` runs unchanged and reads its host, group and channels.

One heterogeneous SageMaker-mode job, one group per pool, under the chart's operator: each instance prints what
the toolkit read and the marker file that only `kubepool/runtime:dev-lean-marked` has
(hack/images/build.sh runtime-marked)."""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from kubepool.local.controlplane import REPO_ROOT
from kubetest import Cluster, Kubectl

pytestmark = pytest.mark.realnode
RUNTIME = "kubepool/runtime:dev-lean"
MARKED = "kubepool/runtime:dev-lean-marked"
MARKER = "/etc/kubepool-image"
JOB_TIMEOUT_S = 600
SCRIPT = f"""\
import json, os
from sagemaker_training import environment

env = environment.Environment()
seen = {{k: getattr(env, k) for k in ("current_host", "current_instance_group", "is_hetero", "hosts",
                                     "current_instance_group_hosts", "channel_input_dirs", "hyperparameters")}}
seen["channel_files"] = {{c: sorted(os.listdir(d)) for c, d in env.channel_input_dirs.items()}}
seen["marker"] = open("{MARKER}").read().strip() if os.path.exists("{MARKER}") else None
print("TOOLKIT " + json.dumps(seen, sort_keys=True), flush=True)
"""


def _values(jobs_ns: str, plain: str, marked: str) -> dict[str, Any]:
    # A real node has the host's 2 CPUs: instances of one CPU, one instance per pool.
    spec = {"resources": {"cpu": "1", "memory": "2Gi"}, "minNodes": 0, "maxNodes": 1,
            "nodeSelector": {"kubepool.dev/node-pool": "cpu"}}
    return {
        "image": {"repository": "kubepool/operator", "tag": "dev", "pullPolicy": "Never"},  # make images' local name
        "operator": {"runtimeImage": RUNTIME, "watchNamespaces": [jobs_ns], "warmCapacity": False,
                     "settings": {"imagePullPolicy": "Never"}},
        "pools": [{"name": plain, "spec": spec}, {"name": marked, "spec": {**spec, "image": MARKED}}],
    }


@pytest.fixture
def chart_operator(real_cluster: Cluster, rkubectl: Kubectl) -> Iterator[tuple[str, str, str]]:
    """The chart's operator watching a namespace of its own, with two pools: (jobs namespace, plain, marked)."""
    sfx = uuid.uuid4().hex[:6]
    rel, system_ns, jobs_ns = f"kpi-{sfx}", f"kpi-system-{sfx}", f"kpi-jobs-{sfx}"
    plain, marked = f"rn-plain-{sfx}", f"rn-marked-{sfx}"
    helm = [str(real_cluster.layout.bin("helm")), "--kubeconfig", str(real_cluster.kubeconfig)]
    values = real_cluster.state_dir / f"{rel}-values.yaml"
    values.write_text(yaml.safe_dump(_values(jobs_ns, plain, marked)))
    rkubectl("create", "namespace", jobs_ns, check=True)
    try:
        proc = subprocess.run([*helm, "install", rel, str(REPO_ROOT / "charts" / "kubepool"), "--namespace",
                               system_ns, "--create-namespace", "--values", str(values), "--wait", "--timeout",
                               "180s"], capture_output=True, text=True, timeout=240)
        assert proc.returncode == 0, proc.stderr + rkubectl("describe", "pods", "-n", system_ns).stdout[-3000:]
        yield jobs_ns, plain, marked
    finally:
        subprocess.run([*helm, "uninstall", rel, "--namespace", system_ns, "--wait"], capture_output=True,
                       timeout=180)
        rkubectl("delete", "namespace", jobs_ns, system_ns, "--wait=false")
        values.unlink(missing_ok=True)


def _apply(kubectl: Kubectl, ns: str, *objs: dict[str, Any]) -> None:
    kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump_all(objs), check=True)


def test_each_group_runs_its_pools_image_and_the_toolkit_reads_its_instance(
        rkubectl: Kubectl, chart_operator: tuple[str, str, str]) -> None:
    ns, plain, marked = chart_operator
    _apply(rkubectl, ns,
           {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "payload"}, "data": {"train.py": SCRIPT}},
           {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "train-data"},
            "data": {"a.csv": "1,2\n", "b.csv": "3,4\n"}})
    groups = [{"name": "plain_group", "computePool": plain, "instanceCount": 1},
              {"name": "marked_group", "computePool": marked, "instanceCount": 1}]
    job = {"apiVersion": "kubepool.dev/v1alpha1", "kind": "MLJob", "metadata": {"name": "toolkit"},
           "spec": {"mode": "sagemaker", "instanceGroups": groups, "instancesTimeoutSeconds": 300,
                    "entrypoint": {"file": "train.py"}, "code": {"configMap": "payload"},
                    "hyperParameters": {"epochs": "3", "name": '"resnet"'},
                    "channels": [{"name": "train", "source": {"configMap": {"name": "train-data"}},
                                  "instanceGroups": ["plain_group"]}]}}
    _apply(rkubectl, ns, job)
    t0, phase = time.monotonic(), None
    while phase not in ("DONE", "FAILED", "CANCELLED") and time.monotonic() - t0 < JOB_TIMEOUT_S:
        time.sleep(2)
        phase = rkubectl.json("get", "mljob", "toolkit", "-n", ns).get("status", {}).get("phase")
    pods = rkubectl.json("get", "pods", "-n", ns, "-l", "kubepool.dev/job=toolkit")["items"]
    logs = {p["metadata"]["name"]: rkubectl("logs", "-n", ns, p["metadata"]["name"], "--tail=-1").stdout
            for p in pods}
    assert phase == "DONE", f"job {phase} after {time.monotonic() - t0:.0f}s:\n" + \
        "\n".join(f"--- {name}\n{log[-2000:]}" for name, log in logs.items())
    views: dict[str, dict[str, Any]] = {}
    for name, log in logs.items():
        lines = [ln for ln in log.splitlines() if ln.startswith("TOOLKIT ")]
        assert len(lines) == 1, f"{name}: no toolkit line in\n{log[-3000:]}"
        view = json.loads(lines[0].removeprefix("TOOLKIT "))
        views[view["current_host"]] = view
    assert sorted(views) == ["algo-1", "algo-2"]
    by_group = {v["current_instance_group"]: v for v in views.values()}
    assert sorted(by_group) == ["marked_group", "plain_group"]
    for v in by_group.values():
        assert v["is_hetero"] is True and v["hosts"] == ["algo-1", "algo-2"]
        assert v["current_instance_group_hosts"] == [v["current_host"]]
        assert v["hyperparameters"] == {"epochs": 3, "name": "resnet"}
    # Channels reach only the groups they name, with their files.
    assert by_group["plain_group"]["channel_files"] == {"train": ["a.csv", "b.csv"]}
    assert by_group["marked_group"]["channel_input_dirs"] == {}
    # The effect of the pool's image: only the marked pool's instance ran the image with the marker.
    assert by_group["marked_group"]["marker"] == MARKED
    assert by_group["plain_group"]["marker"] is None
    images = {p["spec"]["containers"][0]["image"] for p in pods}
    assert images == {RUNTIME, MARKED}, images
