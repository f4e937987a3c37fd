"""`runtime_cluster.scale_cluster` from inside a running job, on the built-in pods backend: the payload on the
head patches its own MLJob with the job's ServiceAccount, the operator adds a pod (a third Ray node joins),
then removes it again when the payload scales back (the node leaves). Real API server, RBAC, Ray and pods."""

from __future__ import annotations

import json
import re
from typing import Any

import yaml

from kubepool import naming
from support.operator_cluster import GATE_S, JOB_WAIT_S, Operator, get_json, mljob, wait_for, wait_phase

JOB_TIMEOUT_S = JOB_WAIT_S

# The payload reports what it saw; between the two resizes it holds the third node a while, so the test can
# see the third pod Running from outside.
SCALE_PY = """
import time
from kubepool import runtime_cluster as rc

def nodes():
    return len(rc.get_nodes())

print("before", nodes(), flush=True)
print("grown", rc.scale_cluster(3, options={"rollback_after_seconds": 300}), nodes(), flush=True)
time.sleep(15)
print("shrunk", rc.scale_cluster(2, options={"rollback_after_seconds": 120}), nodes(), flush=True)
"""


def _live_pods(kubectl: Any, namespace: str, job: str) -> list[dict[str, Any]]:
    items = get_json(kubectl, namespace, "pods", "-l", f"{naming.LABEL_JOB}={job}")["items"]
    return [p for p in items if not p["metadata"].get("deletionTimestamp")
            and p["status"].get("phase") in ("Pending", "Running")]


def test_scale_cluster_from_the_payload_adds_then_removes_a_pod(kubectl: Any, namespace: str, operator: Operator,
                                                               compute_pool: Any, apply: Any) -> None:
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "scale-payload"}, "data": {"scale.py": SCALE_PY}}
    kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(cm), check=True)
    pool = compute_pool("cpu", max_nodes=3)
    apply(mljob("elastic", computePool=pool, targetInstances=2, entrypoint={"file": "scale.py"},
                code={"configMap": "scale-payload"}, instancesTimeoutSeconds=GATE_S))

    # Grown: a third pod, on a third node, Running while the payload holds it.
    grown = wait_for(lambda: (p := _live_pods(kubectl, namespace, "elastic")) and len(p) == 3
                     and all(x["status"].get("phase") == "Running" for x in p) and p
                     or get_json(kubectl, namespace, "mljob", "elastic").get("status", {}).get("phase") in ("DONE", "FAILED"),
                     JOB_TIMEOUT_S, "a third Running pod after scale_cluster(3)", interval=1.0)
    assert isinstance(grown, list), json.dumps(get_json(kubectl, namespace, "mljob", "elastic").get("status"), indent=1)
    assert len({p["spec"]["nodeName"] for p in grown}) == 3, "one instance per node"
    assert get_json(kubectl, namespace, "mljob", "elastic")["spec"]["targetInstances"] == 3

    st = wait_phase(kubectl, namespace, "elastic", {"DONE", "FAILED"}, JOB_TIMEOUT_S, operator)
    assert st["phase"] == "DONE", json.dumps(st, indent=1)
    assert st["targetInstances"] == 2 and sorted(i["instanceId"] for i in st["instances"]) == [0, 1]
    head = next(p for p in get_json(kubectl, namespace, "pods", "-l", f"{naming.LABEL_JOB}=elastic")["items"]
                if p["metadata"]["labels"][naming.LABEL_ROLE] == "head")
    logs = kubectl("logs", "-n", namespace, head["metadata"]["name"], check=True).stdout
    seen = {m.group(1): (m.group(2), int(m.group(3))) for m in re.finditer(r"^(grown|shrunk) (\w+) (\d+)$", logs, re.M)}
    assert re.search(r"^before 2$", logs, re.M), logs[-3000:]
    assert seen == {"grown": ("True", 3), "shrunk": ("True", 2)}, logs[-3000:]
    # The third instance's pod was removed by the shrink (not merely at the end of the job).
    third = naming.pod_name("elastic", naming.DEFAULT_GROUP, 2, 0)
    wait_for(lambda: third not in {p["metadata"]["name"] for p in _live_pods(kubectl, namespace, "elastic")}, 60,
             f"{third} removed")


# Two groups on the three CPU nodes: a (the head) grows from 1 to 2 and shrinks back, b (1) stays. With ids by
# position, a's new instance took b's id and host (algo-2) while b's pod lived, and the shrink deleted b's pod.
GROUPS_PY = """
import time
from kubepool import runtime_cluster as rc

def nodes():
    return len(rc.get_nodes())

print("before", nodes(), flush=True)
print("grown", rc.scale_cluster(3, group="a", options={"rollback_after_seconds": 300}), nodes(), flush=True)
time.sleep(15)
print("shrunk", rc.scale_cluster(2, group="a", options={"rollback_after_seconds": 120}), nodes(), flush=True)
"""


def test_scale_cluster_of_the_first_of_two_groups_keeps_every_identity(kubectl: Any, namespace: str, operator: Operator,
                                                                      compute_pool: Any, apply: Any) -> None:
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "scale-groups"}, "data": {"groups.py": GROUPS_PY}}
    kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(cm), check=True)
    pool = compute_pool("cpu", max_nodes=3)
    groups = [{"name": "a", "computePool": pool, "instanceCount": 1}, {"name": "b", "computePool": pool, "instanceCount": 1}]
    apply(mljob("twogroups", instanceGroups=groups, entrypoint={"file": "groups.py"}, code={"configMap": "scale-groups"},
                instancesTimeoutSeconds=GATE_S))

    b_uids: set[str] = set()
    grown: list[dict[str, Any]] = []

    def watch() -> bool:
        """Every observation: no two live pods share an instance id or a host, and b's one pod never changes."""
        live = _live_pods(kubectl, namespace, "twogroups")
        ids = [p["metadata"]["labels"][naming.LABEL_INSTANCE] for p in live]
        hosts = [p["spec"]["hostname"] for p in live]
        assert len(set(ids)) == len(ids) and len(set(hosts)) == len(hosts), [(p["metadata"]["name"], i, h) for p, i, h in zip(live, ids, hosts, strict=True)]
        b_uids.update(p["metadata"]["uid"] for p in live if p["metadata"]["labels"][naming.LABEL_GROUP] == "b")
        if len(live) == 3 and all(p["status"].get("phase") == "Running" for p in live) and not grown:
            grown.extend(live)
        return get_json(kubectl, namespace, "mljob", "twogroups").get("status", {}).get("phase") in ("DONE", "FAILED")

    wait_for(watch, JOB_TIMEOUT_S, "twogroups to finish", interval=1.0)
    st = get_json(kubectl, namespace, "mljob", "twogroups")["status"]
    assert st["phase"] == "DONE", json.dumps(st, indent=1)
    assert len(b_uids) == 1, f"b's pod was replaced: {b_uids}"
    # Grown: a's new instance took a new id and host (2, algo-3); b kept instance 1 (algo-2).
    who = sorted((p["metadata"]["labels"][naming.LABEL_GROUP], p["metadata"]["labels"][naming.LABEL_INSTANCE],
                  p["spec"]["hostname"]) for p in grown)
    assert who == [("a", "0", "algo-1"), ("a", "2", "algo-3"), ("b", "1", "algo-2")], who
    # Shrunk: the removed instance is a's highest; the status records the ids given out.
    assert sorted((i["group"], i["instanceId"]) for i in st["instances"]) == [("a", 0), ("b", 1)]
    assert st["instanceLayout"] == {"groups": [{"group": "a", "ids": [0]}, {"group": "b", "ids": [1]}], "nextId": 3}
    added = naming.pod_name("twogroups", "a", 1, 0)
    assert added in {p["metadata"]["name"] for p in grown}
    wait_for(lambda: added not in {p["metadata"]["name"] for p in _live_pods(kubectl, namespace, "twogroups")}, 60,
             f"{added} removed")
    head = next(p for p in grown if p["metadata"]["labels"][naming.LABEL_ROLE] == "head")
    logs = kubectl("logs", "-n", namespace, head["metadata"]["name"], check=True).stdout
    seen = {m.group(1): (m.group(2), int(m.group(3))) for m in re.finditer(r"^(grown|shrunk) (\w+) (\d+)$", logs, re.M)}
    assert re.search(r"^before 2$", logs, re.M), logs[-3000:]
    assert seen == {"grown": ("True", 3), "shrunk": ("True", 2)}, logs[-3000:]
