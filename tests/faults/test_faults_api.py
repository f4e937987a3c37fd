"""API trouble: the kube-apiserver killed and restarted mid-run (every watch stream drops with it) and
resourceVersion-guarded writers colliding with the operator's own writes (conflicting writers). The operator survives and
converges: every job ends in its expected phase, a job submitted afterwards still runs."""

from __future__ import annotations

import json
import random
import threading
import time
from typing import Any

import pytest
import yaml
from faultkit import (
    job,
    kill_component,
    local_up,
    orphans,
    record,
    sleep_cmd,
    wait_terminal,
)

from kubepool.controller import backoff
from support.operator_cluster import Operator, wait_for, wait_phase


@pytest.mark.exclusive  # every cluster test would see its API server go
@pytest.mark.parametrize("component", ["kube-apiserver", "etcd"])
def test_control_plane_restart_mid_run(component: str, cluster: Any, kubectl: Any, namespace: str, operator: Operator,
                                       small_pool: Any, recorder: Any) -> None:
    """kube-apiserver (every watch stream drops with it) or etcd (the API server answers errors meanwhile)
    killed while jobs run and started again."""
    pool = small_pool(max_nodes=3)
    names = [f"cp-{i}" for i in range(3)]
    kubectl("apply", "-n", namespace, "-f", "-", check=True,
            input=yaml.safe_dump_all([job(n, pool, sleep_cmd(15)) for n in names]))
    for n in names:
        wait_phase(kubectl, namespace, n, {"RUNNING"}, 90, operator)
    kill_component(cluster, component)
    time.sleep(3)  # the operator's watches and writes fail meanwhile
    local_up()  # restarts what is missing, as an operator of the cluster would
    back = time.monotonic()
    kubectl("apply", "-n", namespace, "-f", "-", check=True, input=yaml.safe_dump(job("after", pool, sleep_cmd(1))))
    final = wait_terminal(kubectl, namespace, [*names, "after"], 150)
    assert all(final[n]["phase"] == "DONE" for n in [*names, "after"]), json.dumps(final, indent=1)[:3000]
    converged = max(recorder.first_time(n, {"DONE"}) or time.monotonic() for n in [*names, "after"]) - back
    assert operator.proc is not None and operator.proc.poll() is None, f"the operator died with {component}"
    assert not recorder.backwards(), recorder.backwards()
    assert converged < 60, f"converged {converged:.0f}s after {component} came back"
    assert not recorder.doubled(), recorder.doubled()
    wait_for(lambda: not orphans(kubectl, namespace), 30, "no orphans")
    record(cluster, f"{component.removeprefix('kube-')}-restart", faults=1, jobs=4, lost=0, orphaned=0,
           converge_s=converged)


def guarded_update(kubectl: Any, namespace: str, name: str, change: Any, pause: float = 0.0) -> str | None:
    """Read-modify-write of an MLJob with its resourceVersion (`kubectl replace`): the new resourceVersion, or
    None when another writer changed the job in between (409 Conflict)."""
    obj = kubectl.json("get", "mljob", name, "-n", namespace)
    change(obj)
    time.sleep(pause)  # room for another writer (the operator) to land in between
    proc = kubectl("replace", "-n", namespace, "-f", "-", "-o", "jsonpath={.metadata.resourceVersion}",
                   input=json.dumps(obj))
    if proc.returncode == 0:
        return str(proc.stdout)
    assert "the object has been modified" in proc.stderr, proc.stderr
    return None


def test_conflicting_writers_while_reconciling(cluster: Any, kubectl: Any, namespace: str, operator: Operator,
                                               small_pool: Any, recorder: Any) -> None:
    """One writer per job updates its spec and labels with resourceVersion-guarded read-modify-writes while
    the operator writes the same objects (status, kopf's annotations after each spec change): any 409 the
    writers get is a collision with the operator. The operator must never undo a write it collided with (the
    job ends with the writer's last accepted values), must not fail a pass on it, and must still apply a spec
    change made under the same contention."""
    pool = small_pool(max_nodes=3)
    names = [f"conflict-{i}" for i in range(3)]
    kubectl("apply", "-n", namespace, "-f", "-", check=True,
            input=yaml.safe_dump_all([job(n, pool, sleep_cmd(12)) for n in names]))
    stop = threading.Event()
    conflicts = dict.fromkeys(names, 0)  # 409s per job: on conflict-1/2 only the operator writes besides the writer
    accepted = [0]
    last: dict[str, tuple[int, str, int]] = {}  # job → (resourceVersion, label, ttl) of its last accepted write

    def writer(name: str, seed: int) -> None:
        rng = random.Random(seed)
        while not stop.is_set():
            poke, ttl = str(rng.random())[2:8], rng.randint(600, 900)

            def change(obj: dict[str, Any], poke: str = poke, ttl: int = ttl) -> None:
                obj["metadata"].setdefault("labels", {})["poke"] = poke
                obj["spec"]["ttlSecondsAfterFinished"] = ttl

            rv = guarded_update(kubectl, namespace, name, change, rng.uniform(0.0, 0.4))
            if rv is None:
                conflicts[name] += 1
            else:
                accepted[0] += 1
                last[name] = max(last.get(name, (0, "", 0)), (int(rv), poke, ttl))

    threads = [threading.Thread(target=writer, args=(n, s), daemon=True) for s, n in enumerate(names)]
    for t in threads:
        t.start()
    try:
        wait_phase(kubectl, namespace, names[0], {"RUNNING"}, 90, operator)
        # A spec change that matters, made under the same contention: a deadline already passed.
        deadline = lambda obj: obj["spec"].update(activeDeadlineSeconds=1)  # noqa: E731
        while guarded_update(kubectl, namespace, names[0], deadline) is None:
            pass  # collided with conflict-0's writer or the operator: read again
        patched = time.monotonic()
        st = wait_phase(kubectl, namespace, names[0], {"FAILED", "DONE"}, 30, operator)
        assert (st["phase"], st["reason"]) == ("FAILED", "DeadlineExceeded"), st
        took = (recorder.first_time(names[0], {"FAILED"}) or time.monotonic()) - patched
        final = wait_terminal(kubectl, namespace, names[1:], 120)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert all(final[n]["phase"] == "DONE" for n in names[1:]), final
    with_operator = sum(conflicts[n] for n in names[1:])
    print(f"{accepted[0]} guarded writes accepted; refused with 409: {conflicts}")
    assert with_operator >= 1, f"no write collided with the operator's ({conflicts}, {accepted[0]} accepted): nothing was tested"
    for name in names:
        obj = kubectl.json("get", "mljob", name, "-n", namespace)
        _, poke, ttl = last[name]
        got = (obj["metadata"]["labels"].get("poke"), obj["spec"].get("ttlSecondsAfterFinished"))
        assert got == (poke, ttl), f"{name}: the writer's last accepted write {(poke, ttl)} was undone: {got}"
    logs = operator.logs()
    assert "reconcile failed" not in logs and "Traceback" not in logs, logs[-3000:]
    assert not recorder.backwards(), recorder.backwards()
    record(cluster, "conflicting-writers", faults=sum(conflicts.values()), jobs=3, lost=0,
           orphaned=len(orphans(kubectl, namespace)), converge_s=took, accepted_writes=accepted[0],
           operator_collisions=with_operator)


def _refuse_writes(namespace: str) -> list[dict[str, Any]]:
    """A ValidatingAdmissionPolicy (CEL, no webhook) that refuses the namespace's pod creations and every MLJob
    status write: the operator's writes fail as they would while the API server sheds load."""
    name = f"fault-refuse-{namespace}"[:63]
    policy = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
              "metadata": {"name": name},
              "spec": {"failurePolicy": "Fail",
                       "matchConstraints": {"resourceRules": [
                           {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]},
                           {"apiGroups": ["kubepool.dev"], "apiVersions": ["*"], "operations": ["UPDATE"],
                            "resources": ["mljobs/status"]}]},
                       "validations": [{"expression": "false", "message": "fault injection: write refused"}]}}
    binding = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
               "metadata": {"name": name},
               "spec": {"policyName": name, "validationActions": ["Deny"],
                        "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}}}}
    return [policy, binding]


def test_refused_writes_then_recovery(cluster: Any, kubectl: Any, namespace: str, operator: Operator, small_pool: Any,
                                      recorder: Any) -> None:
    pool = small_pool(max_nodes=3)
    objs = _refuse_writes(namespace)
    kubectl("apply", "-f", "-", input=yaml.safe_dump_all(objs), check=True)
    try:
        # The policy takes effect once the API server has loaded it: a probe write is refused.
        probe = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe"},
                 "spec": {"containers": [{"name": "c", "image": "local"}]}}
        wait_for(lambda: "write refused" in kubectl("apply", "--dry-run=server", "-n", namespace, "-f", "-",
                                                    input=yaml.safe_dump(probe)).stderr, 30, "the policy in force")
        kubectl("apply", "-n", namespace, "-f", "-", check=True, input=yaml.safe_dump(job("refused", pool, sleep_cmd(1))))
        refused_from = time.monotonic()
        # The operator's status and pod writes fail meanwhile: it meets the refusal and retries it, and lives on.
        wait_for(lambda: operator.logs().count("write refused") >= 3, 60,
                 "the operator's writes to be refused three times (the first and two retries)")
        assert operator.proc is not None and operator.proc.poll() is None, "the operator died"
        assert not kubectl.json("get", "pods", "-n", namespace)["items"]
    finally:
        kubectl("delete", "validatingadmissionpolicybinding", objs[1]["metadata"]["name"], "--wait=true")
        kubectl("delete", "validatingadmissionpolicy", objs[0]["metadata"]["name"], "--wait=true")
    healed = time.monotonic()
    st = wait_terminal(kubectl, namespace, ["refused"], 120)["refused"]
    assert st["phase"] == "DONE", st
    converged = (recorder.first_time("refused", {"DONE"}) or time.monotonic()) - healed
    # Backoff doubles its ceiling per failure, so a pass refused for R seconds waits at most about 2R + BASE before
    # its next try; the bound follows the backoff's contract plus time to start and run the pod.
    refused_for = healed - refused_from
    bound = min(2 * refused_for + backoff.BASE_SECONDS, backoff.CAP_SECONDS) + 20
    assert converged < bound, f"DONE {converged:.0f}s after writes were allowed again (refused {refused_for:.0f}s)"
    record(cluster, "refused-writes", faults=1, jobs=1, lost=0, orphaned=0, converge_s=converged)
