"""The KubeRay backend end to end on the local cluster: kubepool's operator creates and owns a RayCluster,
the real ray-operator (v1.5.0) creates its pods, and those pods really run kubepool's runtime on the
process-backed nodes. One namespace, ray-operator and kubepool operator for the module (see conftest)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubepool import naming
from kubepool.api.kuberay import LABEL_CLUSTER, LABEL_GROUP, LABEL_NODE_TYPE, kuberay_instance_id
from kubepool.runtime_cluster import scale_patch
from support.operator_cluster import GATE_S, JOB_WAIT_S, Operator, get_json, mljob, wait_for, wait_phase

pytestmark = pytest.mark.cluster

JOB_TIMEOUT_S = JOB_WAIT_S
PAYLOAD = {
    "ok.py": "import ray, socket\nray.init()\nprint('nodes', len(ray.nodes()), 'on', socket.gethostname())\n"
             "__return__ = len(ray.nodes())\n",
    "sleep.py": "import sys, time\ntime.sleep(float(sys.argv[1]))\n",
    "fail.py": "raise ValueError('boom-42 from the head')\n",
}


@pytest.fixture(scope="module")
def env(kubectl: Any, kuberay_namespace: str, ray_operator: Path, kubepool_operator: Operator,
        cpu_pool: str) -> Iterator[dict[str, Any]]:
    ns = kuberay_namespace
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "payload"}, "data": PAYLOAD}
    kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump(cm), check=True)
    yield {"ns": ns, "op": kubepool_operator, "pool": cpu_pool, "ray_log": ray_operator}
    # While both operators still run: KubeRay's pods carry kubepool's finalizer, which only the operator removes.
    kubectl("delete", "mljobs", "--all", "-n", ns, "--wait=true")
    wait_for(lambda: not get_json(kubectl, ns, "pods")["items"], 120, "the module's pods gone")


def _apply(kubectl: Any, ns: str, obj: dict[str, Any]) -> None:
    kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump(obj), check=True)


def _pods(kubectl: Any, ns: str, cluster: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = get_json(kubectl, ns, "pods", "-l", f"{LABEL_CLUSTER}={cluster}")["items"]
    return items


def _rayclusters(kubectl: Any, ns: str) -> list[str]:
    return [rc["metadata"]["name"] for rc in get_json(kubectl, ns, "rayclusters")["items"]]


def test_three_instances_done_on_process_nodes(kubectl: Any, env: dict[str, Any]) -> None:
    ns = env["ns"]
    _apply(kubectl, ns, mljob("tri", computePool=env["pool"], targetInstances=3, backend="kuberay",
                              entrypoint={"file": "ok.py"}, code={"configMap": "payload"}, instancesTimeoutSeconds=GATE_S))
    rc = wait_for(lambda: "tri" in _rayclusters(kubectl, ns) and get_json(kubectl, ns, "raycluster", "tri"), 60,
                  "the RayCluster")
    assert rc["metadata"]["ownerReferences"][0]["kind"] == "MLJob"
    assert [(g["groupName"], g["replicas"]) for g in rc["spec"]["workerGroupSpecs"]] == [("homogeneouscluster", 2)]
    seen: dict[str, dict[str, Any]] = {}

    def all_running() -> bool:
        for p in _pods(kubectl, ns, "tri"):
            seen[p["metadata"]["name"]] = p
        running = [p for p in seen.values() if (p.get("status") or {}).get("phase") in ("Running", "Succeeded")]
        return len(running) >= 3

    wait_for(all_running, JOB_TIMEOUT_S, "3 KubeRay pods running")
    st = wait_phase(kubectl, ns, "tri", {"DONE", "FAILED"}, JOB_TIMEOUT_S, env["op"])
    assert st["phase"] == "DONE", st
    # KubeRay's pods ran on the process-backed nodes, one per node (the pool's anti-affinity), with both labels.
    nodes = {p["spec"]["nodeName"] for p in seen.values() if p["spec"].get("nodeName")}
    assert len(nodes) == 3 and all(n.startswith("cpu-node-") for n in nodes)
    types = sorted(p["metadata"]["labels"][LABEL_NODE_TYPE] for p in seen.values())
    assert types[:3] == ["head", "worker", "worker"]
    assert {p["metadata"]["labels"][naming.LABEL_JOB] for p in seen.values()} == {"tri"}
    assert sorted(i["instanceId"] for i in st["instances"]) == [0, 1, 2]
    assert all(i["pod"] in seen for i in st["instances"])  # status names KubeRay's pods
    # A finished job's cluster goes at once (KubeRay would rerun the head); its pods go with it.
    wait_for(lambda: "tri" not in _rayclusters(kubectl, ns), 60, "the RayCluster deleted after DONE")
    wait_for(lambda: not _pods(kubectl, ns, "tri"), 120, "the RayCluster's pods deleted")


def test_two_groups_worker_groups_then_delete_job(kubectl: Any, env: dict[str, Any]) -> None:
    ns, pool = env["ns"], env["pool"]
    groups = [{"name": "instance_group_1", "computePool": pool, "instanceCount": 2},
              {"name": "extra", "computePool": pool, "instanceCount": 1}]
    _apply(kubectl, ns, mljob("two", instanceGroups=groups, backend="kuberay", entrypoint={"file": "sleep.py"},
                              args=["600"], code={"configMap": "payload"}, instancesTimeoutSeconds=GATE_S))
    rc = wait_for(lambda: "two" in _rayclusters(kubectl, ns) and get_json(kubectl, ns, "raycluster", "two"), 60,
                  "the RayCluster")
    got = [(g["groupName"], g["replicas"], g["minReplicas"], g["maxReplicas"]) for g in rc["spec"]["workerGroupSpecs"]]
    assert got == [("instance-group-1", 1, 1, 1), ("extra", 1, 1, 1)]
    st = wait_phase(kubectl, ns, "two", {"RUNNING", "FAILED"}, JOB_TIMEOUT_S, env["op"])
    assert st["phase"] == "RUNNING", st
    by_group = sorted((i["group"], i["instanceId"]) for i in st["instances"])
    assert by_group == [("extra", 2), ("instance_group_1", 0), ("instance_group_1", 1)]
    # Deleting the job deletes its RayCluster (owner reference) and so KubeRay's pods.
    kubectl("delete", "mljob", "two", "-n", ns, "--wait=true", check=True)
    wait_for(lambda: "two" not in _rayclusters(kubectl, ns), 90, "the RayCluster deleted with the job")
    wait_for(lambda: not _pods(kubectl, ns, "two"), 120, "no pods left after deleting the job")


def test_scale_cluster_resizes_the_worker_group(kubectl: Any, env: dict[str, Any]) -> None:
    ns = env["ns"]
    _apply(kubectl, ns, mljob("elastic", computePool=env["pool"], targetInstances=3, backend="kuberay",
                              entrypoint={"file": "sleep.py"}, args=["600"], code={"configMap": "payload"},
                              instancesTimeoutSeconds=GATE_S))
    assert wait_phase(kubectl, ns, "elastic", {"RUNNING", "FAILED"}, JOB_TIMEOUT_S, env["op"])["phase"] == "RUNNING"

    def resize(size: int) -> None:  # the patch runtime_cluster.scale_cluster sends from inside the job
        spec = get_json(kubectl, ns, "mljob", "elastic")["spec"]
        patch = json.dumps(scale_patch(spec, naming.DEFAULT_GROUP, size))
        kubectl("patch", "mljob", "elastic", "-n", ns, "--type=json", "-p", patch, check=True)

    def shape() -> tuple[Any, ...]:
        """(phase, worker replicas, live pods, ready instances), or the finished job's (phase, reason, message)."""
        rc = json.loads(kubectl("get", "raycluster", "elastic", "-n", ns, "-o", "json").stdout or "null")
        live = [p for p in _pods(kubectl, ns, "elastic") if not p["metadata"].get("deletionTimestamp")]
        st = get_json(kubectl, ns, "mljob", "elastic")["status"]
        if st["phase"] != "RUNNING" or rc is None:
            return st["phase"], st.get("reason"), st.get("message")
        return st["phase"], rc["spec"]["workerGroupSpecs"][0]["replicas"], len(live), st["readyInstances"]

    def reaches(want: tuple[Any, ...], timeout: float) -> None:
        wait_for(lambda: (s := shape()) == want or s[0] != "RUNNING" and s, timeout, f"{want}")
        got = shape()
        assert got == want, f"{got}"

    resize(2)
    reaches(("RUNNING", 1, 2, 2), 120)
    resize(3)
    reaches(("RUNNING", 2, 3, 3), JOB_TIMEOUT_S)
    st = get_json(kubectl, ns, "mljob", "elastic")["status"]
    # The regrown instance takes a new id (3, algo-4), never the removed one's: KubeRay gives its pod replica
    # index 1, and the template's id list (1,3) maps that index to it.
    assert sorted(i["instanceId"] for i in st["instances"]) == [0, 1, 3]
    assert all(i["pod"] and i["ready"] for i in st["instances"]), st["instances"]
    kubectl("delete", "mljob", "elastic", "-n", ns, "--wait=true", check=True)
    wait_for(lambda: not _pods(kubectl, ns, "elastic"), 120, "no pods left after deleting the job")


def test_resizing_the_first_of_two_groups_keeps_the_other_groups_pod(kubectl: Any, env: dict[str, Any]) -> None:
    ns, pool = env["ns"], env["pool"]
    groups = [{"name": "a", "computePool": pool, "instanceCount": 1}, {"name": "b", "computePool": pool, "instanceCount": 1}]
    _apply(kubectl, ns, mljob("pair", instanceGroups=groups, backend="kuberay", entrypoint={"file": "sleep.py"},
                              args=["600"], code={"configMap": "payload"}, instancesTimeoutSeconds=GATE_S))
    assert wait_phase(kubectl, ns, "pair", {"RUNNING", "FAILED"}, JOB_TIMEOUT_S, env["op"])["phase"] == "RUNNING"

    def resize(size: int) -> None:
        spec = get_json(kubectl, ns, "mljob", "pair")["spec"]
        kubectl("patch", "mljob", "pair", "-n", ns, "--type=json", "-p", json.dumps(scale_patch(spec, "a", size)), check=True)

    def live() -> list[dict[str, Any]]:
        return [p for p in _pods(kubectl, ns, "pair") if not p["metadata"].get("deletionTimestamp")]

    def b_pod() -> tuple[str, str]:
        [b] = [p for p in live() if p["metadata"]["labels"].get(LABEL_GROUP) == "b"]
        return b["metadata"]["name"], b["metadata"]["uid"]

    b_before = b_pod()
    resize(3)
    st = wait_for(lambda: (s := get_json(kubectl, ns, "mljob", "pair")["status"]) and s["readyInstances"] == 3 and s
                  or s["phase"] != "RUNNING" and s, JOB_TIMEOUT_S, "a's second instance ready")
    assert st["phase"] == "RUNNING", st
    assert sorted((i["group"], i["instanceId"], i["host"]) for i in st["instances"]) == [
        ("a", 0, "algo-1"), ("a", 2, "algo-3"), ("b", 1, "algo-2")]
    ids = [kuberay_instance_id(p["metadata"]["labels"], p["metadata"].get("annotations")) for p in live()]
    assert sorted(i for i in ids if i is not None) == [1, 2], ids  # the workers: b's 1, a's new 2 (head: 0)
    assert b_pod() == b_before
    resize(2)
    wait_for(lambda: len(live()) == 2, 120, "a's added worker removed")
    st = get_json(kubectl, ns, "mljob", "pair")["status"]
    assert st["phase"] == "RUNNING" and sorted((i["group"], i["instanceId"]) for i in st["instances"]) == [("a", 0), ("b", 1)]
    assert b_pod() == b_before
    kubectl("delete", "mljob", "pair", "-n", ns, "--wait=true", check=True)
    wait_for(lambda: not _pods(kubectl, ns, "pair"), 120, "no pods left after deleting the job")


def test_head_failure_keeps_its_message(kubectl: Any, env: dict[str, Any]) -> None:
    """KubeRay deletes a failed head at once; kubepool's finalizer keeps it until the status has its exit."""
    ns = env["ns"]
    _apply(kubectl, ns, mljob("boom", computePool=env["pool"], targetInstances=2, backend="kuberay",
                              entrypoint={"file": "fail.py"}, code={"configMap": "payload"}, instancesTimeoutSeconds=GATE_S))
    st = wait_phase(kubectl, ns, "boom", {"DONE", "FAILED"}, JOB_TIMEOUT_S, env["op"])
    assert (st["phase"], st["reason"]) == ("FAILED", "HeadFailed"), st
    assert "boom-42 from the head" in st["message"]
    head = next(i for i in st["instances"] if i["instanceId"] == 0)
    assert head["phase"] == "Failed" and head["exitCode"] != 0
    wait_for(lambda: "boom" not in _rayclusters(kubectl, ns), 60, "the RayCluster deleted after FAILED")
    wait_for(lambda: not _pods(kubectl, ns, "boom"), 120, "the failed job's pods released and gone")


def test_pod_settings_reach_kuberays_pods_and_suspend_deletes_the_cluster_until_resumed(
        kubectl: Any, env: dict[str, Any]) -> None:
    ns = env["ns"]
    _apply(kubectl, ns, mljob("pause", computePool=env["pool"], targetInstances=1, backend="kuberay",
                              entrypoint={"file": "sleep.py"}, args=["20"], code={"configMap": "payload"},
                              instancesTimeoutSeconds=GATE_S, podLabels={"team": "ray"},
                              podAnnotations={"example.com/owner": "ml"}))
    st = wait_phase(kubectl, ns, "pause", {"RUNNING", "DONE", "FAILED"}, JOB_TIMEOUT_S, env["op"])
    assert st["phase"] == "RUNNING", st
    [head] = _pods(kubectl, ns, "pause")
    assert head["metadata"]["labels"]["team"] == "ray" and head["metadata"]["annotations"]["example.com/owner"] == "ml"
    kubectl("patch", "mljob", "pause", "-n", ns, "--type=merge", "-p", '{"spec":{"suspend":true}}', check=True)
    wait_for(lambda: (get_json(kubectl, ns, "mljob", "pause").get("status") or {}).get("reason") == "Suspended", 60,
             "the job suspended")
    wait_for(lambda: "pause" not in _rayclusters(kubectl, ns), 90, "the RayCluster deleted while suspended")
    wait_for(lambda: not _pods(kubectl, ns, "pause"), 120, "KubeRay's pods gone while suspended")
    kubectl("patch", "mljob", "pause", "-n", ns, "--type=merge", "-p", '{"spec":{"suspend":false}}', check=True)
    st = wait_phase(kubectl, ns, "pause", {"DONE", "FAILED"}, JOB_TIMEOUT_S, env["op"])
    assert (st["phase"], st["attempt"], st["suspendedAttempts"]) == ("DONE", 1, 1), st
