"""pipRequirements on the local cluster, air-gapped: every instance installs the job's requirements from a
wheelhouse ConfigMap before Ray starts, so the head's payload and Ray tasks on every node import a package the
image does not have; a requirement pip cannot satisfy FAILS the job with reason PipInstallFailed and pip's words."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from support.operator_cluster import GATE_S, JOB_WAIT_S, Operator, mljob, wait_phase
from support.wheels import (
    NUMPY_PIN,
    PROBE,
    PROBE_MODULE,
    PYARROW_PIN,
    build_probe_wheel,
    cached_wheel,
    simple_index,
)

pytestmark = [pytest.mark.cluster, pytest.mark.ray]
JOB_TIMEOUT_S = JOB_WAIT_S
SCRIPT = f"""\
import ray
import {PROBE_MODULE}
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

ray.init(address="auto")


@ray.remote(num_cpus=0.1)
def probe():
    import socket
    import {PROBE_MODULE}
    return socket.gethostname(), {PROBE_MODULE}.ANSWER


nodes = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
answers = ray.get([probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n, soft=False)).remote() for n in nodes])
print("PROBE head", {PROBE_MODULE}.ANSWER, "nodes", sorted(answers), flush=True)
"""


def _configmaps(kubectl: Any, namespace: str, tmp_path: Path) -> None:
    wheel = build_probe_wheel(tmp_path / "wheels")
    wheels = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "wheels"},
              "binaryData": {wheel.name: base64.b64encode(wheel.read_bytes()).decode()}}
    payload = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "payload"}, "data": {"probe.py": SCRIPT}}
    for cm in (wheels, payload):
        kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(cm), check=True)


def test_requirements_reach_every_instance_from_a_wheelhouse(kubectl: Any, namespace: str, operator: Operator,
                                                             compute_pool: Any, apply: Any, tmp_path: Path) -> None:
    pool = compute_pool("cpu", max_nodes=2)
    _configmaps(kubectl, namespace, tmp_path)
    apply(mljob("pip-ok", computePool=pool, targetInstances=2, entrypoint={"file": "probe.py"},
                code={"configMap": "payload"}, pipRequirements=[f"{PROBE}==0.1"],
                pipOptions={"wheelhouse": {"configMap": {"name": "wheels"}}}, instancesTimeoutSeconds=GATE_S))
    st = wait_phase(kubectl, namespace, "pip-ok", {"DONE", "FAILED"}, JOB_TIMEOUT_S, operator)
    assert st["phase"] == "DONE", json.dumps(st, indent=1)
    head = kubectl("logs", "-n", namespace, "pip-ok-homogeneouscluster-0", "--tail=-1").stdout
    line = next((ln for ln in head.splitlines() if ln.startswith("PROBE ")), "")
    assert line.startswith("PROBE head 42 nodes") and line.count(", 42)") == 2, head[-3000:]  # both nodes
    worker = kubectl("logs", "-n", namespace, "pip-ok-homogeneouscluster-1", "--tail=-1").stdout
    assert f"pip: Successfully installed {PROBE}-0.1" in worker, worker[-3000:]


def test_an_unsatisfiable_requirement_fails_the_job_saying_so(kubectl: Any, namespace: str, operator: Operator,
                                                             compute_pool: Any, apply: Any, tmp_path: Path) -> None:
    pool = compute_pool("cpu", max_nodes=1)
    _configmaps(kubectl, namespace, tmp_path)
    apply(mljob("pip-bad", computePool=pool, entrypoint={"file": "probe.py"}, code={"configMap": "payload"},
                pipRequirements=["kubepool-not-a-package==9"],
                pipOptions={"wheelhouse": {"configMap": {"name": "wheels"}}}))
    st = wait_phase(kubectl, namespace, "pip-bad", {"DONE", "FAILED"}, JOB_TIMEOUT_S, operator)
    assert (st["phase"], st["reason"]) == ("FAILED", "PipInstallFailed"), json.dumps(st, indent=1)
    assert "No matching distribution found for kubepool-not-a-package==9" in st["message"], st["message"]


@pytest.fixture
def package_index(tmp_path: Path) -> Iterator[str]:
    """A PEP 503 simple index on loopback (the local nodes' pods share the host's network) holding only
    kubepool-wheel-probe 0.2, which exists nowhere else."""
    root = tmp_path / "index"
    wheel = build_probe_wheel(root / "wheels", version="0.2", answer="7")
    with simple_index(root, {PROBE: wheel}) as url:
        yield url


def test_requirements_come_from_the_jobs_own_index(kubectl: Any, namespace: str, operator: Operator,
                                                   compute_pool: Any, apply: Any, package_index: str) -> None:
    pool = compute_pool("cpu", max_nodes=1)
    script = f"import {PROBE_MODULE}\nprint('PROBE', {PROBE_MODULE}.ANSWER, flush=True)\n"
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "payload"}, "data": {"probe.py": script}}
    kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(cm), check=True)
    apply(mljob("pip-index", computePool=pool, entrypoint={"file": "probe.py"}, code={"configMap": "payload"},
                mode="parallel", pipRequirements=[f"{PROBE}==0.2"], pipOptions={"indexUrl": package_index}))
    st = wait_phase(kubectl, namespace, "pip-index", {"DONE", "FAILED"}, JOB_TIMEOUT_S, operator)
    assert st["phase"] == "DONE", json.dumps(st, indent=1)
    log = kubectl("logs", "-n", namespace, "pip-index-homogeneouscluster-0", "--tail=-1").stdout
    assert "PROBE 7" in log, log[-3000:]


# A pin of a package the image has in another version (the image's numpy is 2.x): what users of xgboost 2.1 write.
PIN_SCRIPT = """\
import json, os, sys
import numpy
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

seen = {"payload": numpy.__version__}
if os.environ.get("SM_CURRENT_HOST") is None:  # Ray mode: a task on every node sees the job's numpy too
    ray.init(address="auto")

    @ray.remote(num_cpus=0.1)
    def probe():
        import numpy
        return numpy.__version__

    nodes = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
    seen["tasks"] = ray.get([probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n, soft=False)).remote()
                             for n in nodes])
print("PIN " + json.dumps(seen), flush=True)
"""


@pytest.fixture
def numpy_index(tmp_path: Path) -> Iterator[str]:
    """A PEP 503 simple index on loopback holding numpy 1.26.4 and pyarrow 21.0.0 only."""
    wheels = {name: cached_wheel(name, version) for name, version in (("numpy", NUMPY_PIN), ("pyarrow", PYARROW_PIN))}
    with simple_index(tmp_path / "index", wheels) as url:
        yield url


def test_a_pin_of_an_image_package_wins_on_every_instance_and_leaves_the_image_alone(
        kubectl: Any, namespace: str, operator: Operator, compute_pool: Any, apply: Any, numpy_index: str) -> None:
    """numpy==1.26.4 on an image with numpy 2: the payload and Ray tasks on both nodes (Ray mode, where the
    image's pyarrow, which Ray imports, is pinned too: pyarrow 26 needs numpy 2), and both instances of a
    SageMaker-mode job, import 1.26.4; the image (this venv, the process nodes' interpreter) keeps its own."""
    import numpy

    before = numpy.__version__
    pool = compute_pool("cpu", max_nodes=4)
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "payload"}, "data": {"pin.py": PIN_SCRIPT}}
    kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(cm), check=True)
    common = {"computePool": pool, "targetInstances": 2, "entrypoint": {"file": "pin.py"},
              "code": {"configMap": "payload"}, "pipOptions": {"indexUrl": numpy_index}, "instancesTimeoutSeconds": GATE_S}
    apply(mljob("pin-ray", pipRequirements=[f"numpy=={NUMPY_PIN}", f"pyarrow=={PYARROW_PIN}"], **common))
    apply(mljob("pin-sm", mode="sagemaker", pipRequirements=[f"numpy=={NUMPY_PIN}"], **common))
    for job in ("pin-ray", "pin-sm"):
        st = wait_phase(kubectl, namespace, job, {"DONE", "FAILED"}, JOB_TIMEOUT_S, operator)
        assert st["phase"] == "DONE", json.dumps(st, indent=1)
    seen = []
    for pod in ("pin-ray-homogeneouscluster-0", "pin-sm-homogeneouscluster-0", "pin-sm-homogeneouscluster-1"):
        log = kubectl("logs", "-n", namespace, pod, "--tail=-1").stdout
        line = next((ln for ln in log.splitlines() if ln.startswith("PIN ")), None)
        assert line is not None, log[-3000:]
        seen.append(json.loads(line[4:]))
    assert seen[0] == {"payload": NUMPY_PIN, "tasks": [NUMPY_PIN, NUMPY_PIN]}, seen
    assert seen[1:] == [{"payload": NUMPY_PIN}] * 2, seen
    after = subprocess.run([sys.executable, "-c", "import numpy; print(numpy.__version__)"], capture_output=True,
                           text=True, check=True).stdout.strip()
    assert after == before != NUMPY_PIN
