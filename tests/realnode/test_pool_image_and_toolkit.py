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

from kubepool.local.layout import REPO_ROOT
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


def _wait_job(kubectl: Kubectl, ns: str, name: str, timeout: float) -> tuple[str | None, dict[str, str]]:
    """The job's final phase and each of its pods' log."""
    t0, phase = time.monotonic(), None
    while phase not in ("DONE", "FAILED", "CANCELLED") and time.monotonic() - t0 < timeout:
        time.sleep(2)
        phase = kubectl.json("get", "mljob", name, "-n", ns).get("status", {}).get("phase")
    pods = kubectl.json("get", "pods", "-n", ns, "-l", f"kubepool.dev/job={name}")["items"]
    return phase, {p["metadata"]["name"]: kubectl("logs", "-n", ns, p["metadata"]["name"], "--tail=-1").stdout
                   for p in pods}


def _numpy_index(kubectl: Kubectl, ns: str) -> str:
    """A package index in a pod of the cluster (the runtime image's Python serving files) holding only numpy
    1.26.4's wheel; returns its address (plain HTTP: the job names it as a trusted host to pip)."""
    import base64

    from support.wheels import numpy_wheel

    wheel = numpy_wheel()
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "index", "labels": {"app": "index"}},
           "spec": {"containers": [{"name": "index", "image": RUNTIME, "imagePullPolicy": "Never",
                                    "command": ["python", "-m", "http.server", "8000", "--directory", "/tmp/index"],
                                    "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}]}],
                    "initContainers": [{"name": "mkdir", "image": RUNTIME, "imagePullPolicy": "Never",
                                        "command": ["mkdir", "-p", "/tmp/index/simple/numpy"],
                                        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}]}],
                    "volumes": [{"name": "tmp", "emptyDir": {}}]}}
    _apply(kubectl, ns, pod)
    kubectl("wait", "-n", ns, "pod/index", "--for=condition=Ready", "--timeout=120s", check=True, timeout=130)
    put = ("import base64, sys; open(sys.argv[1], 'wb').write(base64.b64decode(sys.stdin.read()))")
    kubectl("exec", "-i", "-n", ns, "index", "--", "python", "-c", put, f"/tmp/index/simple/numpy/{wheel.name}",
            input=base64.b64encode(wheel.read_bytes()).decode(), check=True, timeout=120)
    return str(kubectl.json("get", "pod", "index", "-n", ns)["status"]["podIP"])


def test_a_pin_of_an_image_package_wins_on_read_only_non_root_nodes(
        rkubectl: Kubectl, chart_operator: tuple[str, str, str]) -> None:
    """numpy==1.26.4 on the runtime image (numpy 2, in a read-only /opt/venv, run as non-root): both instances'
    scripts import the job's numpy; pip never touches the image's (it would fail with Errno 13 there)."""
    ns, plain, marked = chart_operator
    index = _numpy_index(rkubectl, ns)  # pip's own PIP_TRUSTED_HOST, in the job's env, lets it use plain HTTP
    script = "import numpy, os\nprint('PIN', os.environ['SM_CURRENT_HOST'], numpy.__version__, numpy.__file__, flush=True)\n"
    _apply(rkubectl, ns, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "pin"},
                          "data": {"pin.py": script}})
    groups = [{"name": "a", "computePool": plain, "instanceCount": 1}, {"name": "b", "computePool": marked, "instanceCount": 1}]
    _apply(rkubectl, ns, {"apiVersion": "kubepool.dev/v1alpha1", "kind": "MLJob", "metadata": {"name": "pin"},
                          "spec": {"mode": "sagemaker", "instanceGroups": groups, "instancesTimeoutSeconds": 300,
                                   "entrypoint": {"file": "pin.py"}, "code": {"configMap": "pin"},
                                   "pipRequirements": ["numpy==1.26.4"],
                                   "pipOptions": {"indexUrl": f"http://{index}:8000/simple"},
                                   "env": [{"name": "PIP_TRUSTED_HOST", "value": index}]}})
    phase, logs = _wait_job(rkubectl, ns, "pin", JOB_TIMEOUT_S)
    assert phase == "DONE", f"job {phase}:\n" + "\n".join(f"--- {n}\n{log[-2000:]}" for n, log in logs.items())
    seen = sorted(ln.split()[1:4] for log in logs.values() for ln in log.splitlines() if ln.startswith("PIN "))
    assert [s[:2] for s in seen] == [["algo-1", "1.26.4"], ["algo-2", "1.26.4"]], logs
    assert all(s[2].startswith("/opt/kubepool/pip/") for s in seen), seen  # the job's prefix, not /opt/venv


def test_a_read_write_once_output_claim_of_two_instances_is_refused_under_the_charts_rights(
        rkubectl: Kubectl, chart_operator: tuple[str, str, str]) -> None:
    """The chart's operator reads the claim's access modes (its RBAC allows it) and fails the job naming the
    mode it needs, before any pod."""
    ns, plain, marked = chart_operator
    _apply(rkubectl, ns, {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "results"},
                          "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}},
                                   "storageClassName": "none"}})
    groups = [{"name": "a", "computePool": plain, "instanceCount": 1}, {"name": "b", "computePool": marked, "instanceCount": 1}]
    _apply(rkubectl, ns, {"apiVersion": "kubepool.dev/v1alpha1", "kind": "MLJob", "metadata": {"name": "rwo"},
                          "spec": {"mode": "sagemaker", "instanceGroups": groups, "entrypoint": {"command": ["true"]},
                                   "output": {"persistentVolumeClaim": {"claimName": "results"}}}})
    phase, logs = _wait_job(rkubectl, ns, "rwo", 120)
    st = rkubectl.json("get", "mljob", "rwo", "-n", ns).get("status") or {}
    assert (phase, st.get("reason")) == ("FAILED", "VolumeNotShared"), json.dumps(st, indent=1)
    assert "PersistentVolumeClaim results is ReadWriteOnce" in st["message"] and "[ReadWriteMany]" in st["message"]
    assert not logs  # no pod was made
