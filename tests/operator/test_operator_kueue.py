"""The operator as Kueue's controller of MLJobs, against Kueue's own controller manager (built from Go modules):
jobs labelled with a LocalQueue get Workloads; Kueue's quota decides which runs; a finished job's Workload is
marked Finished and frees the quota for the next; a Workload Kueue evicts (deactivated) suspends its running job,
gives its quota back once the pods are gone, and runs again from scratch when Kueue admits it again; a job that
can start with fewer instances is admitted with fewer (Kueue's partial admission) and runs with those. The real
API server, scheduler, nodes and Kueue; no admission policy suspends the jobs at creation (the operator holds
them itself)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubepool import naming
from support import kueue
from support.operator_cluster import Operator, get_json, mljob, wait_for, wait_phase
from support.operator_fixtures import TEST_INSTANCE

pytestmark = pytest.mark.cluster
JOB_TIMEOUT_S = 240
SLEEPER = "import time; print('started', flush=True); time.sleep({s}); print('finished')"


@pytest.fixture(scope="module")
def kueue_manager(cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[kueue.Kueue]:
    yield from kueue.running(cluster, cluster.kubectl, tmp_path_factory.mktemp("kueue"))


@pytest.fixture
def local_queue(kubectl: Any, namespace: str, kueue_manager: kueue.Kueue) -> Iterator[str]:
    """A ClusterQueue with quota for one instance of a test cpu pool (TEST_INSTANCE), and its LocalQueue."""
    name = f"kp-{uuid.uuid4().hex[:6]}"
    objs = [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": name}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": name},
         "spec": {"namespaceSelector": {}, "resourceGroups": [{"coveredResources": ["cpu", "memory"], "flavors": [
             {"name": name, "resources": [{"name": "cpu", "nominalQuota": TEST_INSTANCE["cpu"]}, {"name": "memory", "nominalQuota": TEST_INSTANCE["memory"]}]}]}]}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"name": "team", "namespace": namespace},
         "spec": {"clusterQueue": name}},
    ]  # fmt: skip
    kubectl("apply", "-f", "-", input=yaml.safe_dump_all(objs), check=True)

    def active() -> bool:
        st = get_json(kubectl, "default", "clusterqueue", name).get("status") or {}
        return any(c["type"] == "Active" and c["status"] == "True" for c in st.get("conditions") or [])

    try:
        wait_for(active, 60, f"ClusterQueue {name} Active (Kueue's log: {kueue_manager.log_path})")
    except AssertionError:
        raise AssertionError(f"ClusterQueue {name} not Active; Kueue's log:\n{kueue_manager.logs()[-3000:]}") from None
    yield "team"
    kubectl("delete", "localqueue", "team", "-n", namespace, "--wait=false")
    kubectl("delete", "clusterqueue", name, "--wait=false")
    kubectl("delete", "resourceflavor", name, "--wait=false")


@pytest.fixture
def kueue_operator(cluster: Any, crds: None, namespace: str, tmp_path: Path) -> Iterator[Operator]:
    op = Operator(cluster.kubeconfig, namespace, tmp_path / "operator.log", env={"KUBEPOOL_OPERATOR_KUEUE": "true"})
    op.start()
    try:
        yield op
    finally:
        op.stop()


def _workload(kubectl: Any, namespace: str, job: str) -> dict[str, Any]:
    items = get_json(kubectl, namespace, "workloads.kueue.x-k8s.io", "-l", f"{naming.LABEL_JOB}={job}")["items"]
    assert len(items) <= 1, [w["metadata"]["name"] for w in items]
    return items[0] if items else {}


def _conditions(obj: dict[str, Any]) -> dict[str, str]:
    return {c["type"]: c["status"] for c in (obj.get("status") or {}).get("conditions") or []}


def _spec_suspend(kubectl: Any, namespace: str, job: str) -> bool:
    return bool(get_json(kubectl, namespace, "mljob", job)["spec"].get("suspend"))


def _pods(kubectl: Any, namespace: str, job: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = get_json(kubectl, namespace, "pods", "-l", f"{naming.LABEL_JOB}={job}")["items"]
    return items


def test_kueue_admits_queued_mljobs_by_quota_evicts_and_readmits_them(
        kubectl: Any, namespace: str, kueue_operator: Operator, compute_pool: Any, local_queue: str,
        kueue_manager: kueue.Kueue) -> None:
    ns, pool = namespace, compute_pool("cpu", max_nodes=3)  # the pool could run both: Kueue's quota decides

    def submit(name: str, seconds: int) -> None:
        job = mljob(name, computePool=pool, mode="parallel", entrypoint={"command": ["python", "-c", SLEEPER.format(s=seconds)]})
        job["metadata"]["labels"] = {naming.LABEL_KUEUE_QUEUE: local_queue}
        kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(job), check=True)

    def explain() -> str:
        return f"\nKueue's log (tail):\n{kueue_manager.logs()[-2500:]}\noperator's log (tail):\n{kueue_operator.logs()[-2500:]}"

    submit("first", 40)
    try:
        wait_phase(kubectl, ns, "first", {"RUNNING"}, JOB_TIMEOUT_S, kueue_operator)
    except AssertionError as e:
        raise AssertionError(f"{e}{explain()}") from None
    wl_first = _workload(kubectl, ns, "first")
    assert _conditions(wl_first).get("Admitted") == "True", wl_first.get("status")
    assert [(p["name"], p["count"]) for p in wl_first["spec"]["podSets"]] == [(naming.dns_label(naming.DEFAULT_GROUP), 1)]
    assert wl_first["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] == TEST_INSTANCE["cpu"]

    # The second does not fit the ClusterQueue's quota while the first runs: Kueue does not admit it, and the
    # operator keeps it suspended (it was created without suspend: the operator held it).
    submit("second", 1)
    wait_for(lambda: _workload(kubectl, ns, "second"), 30, "the second job's Workload")
    wait_for(lambda: _spec_suspend(kubectl, ns, "second"), 30, "the second job held (spec.suspend)")
    st = get_json(kubectl, ns, "mljob", "second").get("status") or {}
    assert "admittedAt" not in st and "LocalQueue team" in (st.get("message") or ""), st
    assert _conditions(_workload(kubectl, ns, "second")).get("QuotaReserved") != "True"
    assert not _pods(kubectl, ns, "second")

    # Kueue evicts the first (its Workload deactivated): the job is suspended, its pods go, its quota is given back,
    # and Kueue admits the second, which runs to DONE.
    kubectl("patch", "workloads.kueue.x-k8s.io", wl_first["metadata"]["name"], "-n", ns, "--type=merge",
            "-p", json.dumps({"spec": {"active": False}}), check=True)
    wait_for(lambda: _spec_suspend(kubectl, ns, "first"), 60, f"the evicted first job suspended{explain()}")
    wait_for(lambda: not _pods(kubectl, ns, "first"), 60, "the first job's pods gone")
    st = wait_phase(kubectl, ns, "second", {"DONE", "FAILED"}, JOB_TIMEOUT_S, kueue_operator)
    assert st["phase"] == "DONE", json.dumps(st, indent=1) + explain()
    wl_second = wait_for(lambda: (w := _workload(kubectl, ns, "second")) and _conditions(w).get("Finished") == "True" and w,
                         60, "the second job's Workload Finished")
    assert next(c for c in wl_second["status"]["conditions"] if c["type"] == "Finished")["reason"] == "Succeeded"

    # Reactivated, the first is admitted again (the quota is free) and runs from scratch to DONE.
    kubectl("patch", "workloads.kueue.x-k8s.io", wl_first["metadata"]["name"], "-n", ns, "--type=merge",
            "-p", json.dumps({"spec": {"active": True}}), check=True)
    st = wait_phase(kubectl, ns, "first", {"DONE", "FAILED"}, JOB_TIMEOUT_S, kueue_operator)
    assert st["phase"] == "DONE", json.dumps(st, indent=1) + explain()
    assert st["suspendedAttempts"] >= 1 and st["attempt"] >= 1, st
    assert _conditions(_workload(kubectl, ns, "first")).get("Finished") == "True"


POD_READY_TIMEOUT_S = 8  # Kueue's waitForPodsReady timeout in the test below


def _queue(kubectl: Any, namespace: str, name: str, flavor_spec: dict[str, Any], instances: int = 1) -> tuple[str, str]:
    """A ResourceFlavor of `flavor_spec`, a ClusterQueue giving it quota for `instances` instances of a test cpu pool, and
    its LocalQueue `name`; returns (LocalQueue, ClusterQueue)."""
    cq = f"kp-{uuid.uuid4().hex[:6]}"
    cpu, memory = str(int(TEST_INSTANCE["cpu"]) * instances), f"{int(TEST_INSTANCE['memory'].removesuffix('Gi')) * instances}Gi"
    objs = [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": cq}, "spec": flavor_spec},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": cq},
         "spec": {"namespaceSelector": {}, "resourceGroups": [{"coveredResources": ["cpu", "memory"], "flavors": [
             {"name": cq, "resources": [{"name": "cpu", "nominalQuota": cpu}, {"name": "memory", "nominalQuota": memory}]}]}]}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"name": name, "namespace": namespace},
         "spec": {"clusterQueue": cq}},
    ]  # fmt: skip
    kubectl("apply", "-f", "-", input=yaml.safe_dump_all(objs), check=True)
    return name, cq


@pytest.fixture
def kueue_pods_ready(cluster: Any, kueue_manager: kueue.Kueue, tmp_path: Path) -> Iterator[kueue.Kueue]:
    """Kueue with waitForPodsReady: evicted after POD_READY_TIMEOUT_S not ready, requeued once (1 s backoff),
    then deactivated."""
    yield from kueue.reconfigured(cluster, cluster.kubectl, kueue_manager, tmp_path,
                                  kueue.wait_for_pods_ready(POD_READY_TIMEOUT_S, backoff_limit=1))


def test_kueues_wait_for_pods_ready_and_flavors_reach_the_instances(
        kubectl: Any, namespace: str, kueue_operator: Operator, compute_pool: Any,
        kueue_pods_ready: kueue.Kueue) -> None:
    """Two queues, each with a ResourceFlavor: `real` selects the pool's nodes and adds a toleration, `nowhere`
    selects no node. The job admitted to `real` gets its flavor's nodeSelector and toleration, becomes ready and
    its Workload PodsReady (Started), so Kueue leaves it running past the timeout to DONE; the job admitted to
    `nowhere` carries that flavor's nodeSelector, its pods never schedule, and Kueue evicts it (PodsReadyTimeout),
    requeues it, admits it again and finally deactivates it: the job is suspended, not hanging. Submitted with
    the SDK's queue=."""
    from kubepool import jobs

    ns, pool = namespace, compute_pool("cpu", max_nodes=3)
    toleration = {"key": "example.com/flavor", "operator": "Exists", "effect": "NoSchedule"}
    real, real_cq = _queue(kubectl, ns, "real", {"nodeLabels": {"node.kubernetes.io/instance-type": "CPU_X64_S"},
                                                 "tolerations": [toleration]})
    nowhere, nowhere_cq = _queue(kubectl, ns, "nowhere", {"nodeLabels": {"node.kubernetes.io/instance-type": "NONE"}})
    try:
        wait_for(lambda: all(_conditions(get_json(kubectl, "default", "clusterqueue", cq)).get("Active") == "True"
                             for cq in (real_cq, nowhere_cq)), 60, "both ClusterQueues Active")

        def explain() -> str:
            return f"\nKueue's log (tail):\n{kueue_pods_ready.logs()[-2500:]}\noperator's log (tail):\n{kueue_operator.logs()[-2500:]}"

        session = jobs.connect(namespace=ns, kubeconfig=str(kueue_operator.kubeconfig))
        # Longer than the timeout and its requeue: only a Workload that says PodsReady runs to the end.
        script = Path(kueue_operator.log_path).parent / "sleeper.py"
        script.write_text(SLEEPER.format(s=3 * POD_READY_TIMEOUT_S))
        jobs.submit_file(script, pool, name="ready", parallel=True, queue=real, session=session)
        jobs.submit_file(script, pool, name="stuck", parallel=True, queue=nowhere, session=session,
                         spec_overrides={"instancesTimeoutSeconds": 600})
        assert get_json(kubectl, ns, "mljob", "stuck")["metadata"]["labels"][naming.LABEL_KUEUE_QUEUE] == nowhere

        # The flavors reach the pods: the stuck job's selects no node, the ready job's selects the pool's and tolerates.
        stuck_pod = wait_for(lambda: next(iter(_pods(kubectl, ns, "stuck")), None), 60, f"the stuck job's pod{explain()}")
        assert stuck_pod["spec"]["nodeSelector"]["node.kubernetes.io/instance-type"] == "NONE", stuck_pod["spec"]
        st = wait_phase(kubectl, ns, "ready", {"RUNNING", "DONE", "FAILED"}, JOB_TIMEOUT_S, kueue_operator)
        assert st["phase"] != "FAILED", json.dumps(st, indent=1) + explain()
        [ready_pod] = _pods(kubectl, ns, "ready")
        assert ready_pod["spec"]["nodeSelector"] == {"kubepool.dev/node-pool": "cpu",
                                                     "node.kubernetes.io/instance-type": "CPU_X64_S"}
        assert toleration in ready_pod["spec"]["tolerations"]
        wl = wait_for(lambda: (w := _workload(kubectl, ns, "ready")) and _conditions(w).get("PodsReady") == "True" and w,
                      60, f"the ready job's Workload PodsReady{explain()}")
        assert next(c for c in wl["status"]["conditions"] if c["type"] == "PodsReady")["reason"] == "Started"

        # Kueue evicts the stuck job on the timeout, requeues it, admits it again, evicts it again, deactivates it.
        def deactivated() -> dict[str, Any] | None:
            w = _workload(kubectl, ns, "stuck")
            evicted = next((c for c in (w.get("status") or {}).get("conditions") or [] if c["type"] == "Evicted"), {})
            # Kueue's reason: Deactivated, DueTo the deactivation's cause (workload.go's reasonWithCause).
            deactivated = evicted.get("reason") == "DeactivatedDueToRequeuingLimitExceeded"
            return evicted if w.get("spec", {}).get("active") is False and deactivated else None

        evicted = wait_for(deactivated, 6 * POD_READY_TIMEOUT_S + 60, f"the stuck job's Workload deactivated by Kueue{explain()}")
        assert "re-queuing retries" in evicted["message"], evicted  # deactivated after its one requeue
        wait_for(lambda: _spec_suspend(kubectl, ns, "stuck") and not _pods(kubectl, ns, "stuck"), 60,
                 "the deactivated job suspended, its pods gone")
        # Admitted twice (first run, then the requeue), suspended twice: it never hung on its Pending pod.
        stuck = wait_for(lambda: (st := get_json(kubectl, ns, "mljob", "stuck").get("status") or {}).get(
            "suspendedAttempts", 0) >= 2 and st, 30, "the stuck job's two suspended attempts")
        assert stuck["phase"] == "PENDING", stuck
        assert "kueue.kubepool.dev/placement" not in (get_json(kubectl, ns, "mljob", "stuck")["metadata"].get("annotations") or {})

        # The ready job, never evicted, runs to DONE.
        st = wait_phase(kubectl, ns, "ready", {"DONE", "FAILED"}, JOB_TIMEOUT_S, kueue_operator)
        assert st["phase"] == "DONE" and not st.get("suspendedAttempts"), json.dumps(st, indent=1) + explain()
    finally:
        for q, cq in ((real, real_cq), (nowhere, nowhere_cq)):
            kubectl("delete", "localqueue", q, "-n", ns, "--wait=false")
            kubectl("delete", "clusterqueue", cq, "--wait=false")
            kubectl("delete", "resourceflavor", cq, "--wait=false")


def test_kueue_never_assigns_a_flavor_that_contradicts_the_pool(
        kubectl: Any, namespace: str, kueue_operator: Operator, compute_pool: Any, kueue_manager: kueue.Kueue,
        tmp_path: Path) -> None:
    """The Workload's pod template carries the pool's nodeSelector, so Kueue's flavor assigner itself refuses a
    flavor whose nodeLabels contradict it (the operator's own refusal, KueueAdmissionRefused, is the unit-tested
    safety net behind it): the job stays queued and suspended, no pod, and the Workload says why. Submitted with
    `kubepool submit --queue`."""
    from kubepool import cli

    ns, pool = namespace, compute_pool("cpu", max_nodes=3)
    q, cq = _queue(kubectl, ns, "clash", {"nodeLabels": {"kubepool.dev/node-pool": "gpu"}})
    try:
        wait_for(lambda: _conditions(get_json(kubectl, "default", "clusterqueue", cq)).get("Active") == "True", 60,
                 "the ClusterQueue Active")
        script = tmp_path / "a.py"
        script.write_text("print(1)\n")
        assert cli.main(["-n", ns, "submit", str(script), "--pool", pool, "--name", "clash", "--queue", q, "--parallel"]) == 0

        def pending() -> dict[str, Any] | None:
            w = _workload(kubectl, ns, "clash")
            reserved = next((c for c in (w.get("status") or {}).get("conditions") or [] if c["type"] == "QuotaReserved"), {})
            return reserved if reserved.get("status") == "False" and reserved.get("message") else None

        reserved = wait_for(pending, 60, f"Kueue's reason the Workload is not admitted (operator's log: {kueue_operator.log_path})")
        # Kueue's flavorassigner.go: "flavor %s doesn't match node affinity".
        assert f"flavor {cq} doesn't match node affinity" in reserved["message"], reserved
        assert _spec_suspend(kubectl, ns, "clash") and not _pods(kubectl, ns, "clash")
    finally:
        kubectl("delete", "localqueue", q, "-n", ns, "--wait=false")
        kubectl("delete", "clusterqueue", cq, "--wait=false")
        kubectl("delete", "resourceflavor", cq, "--wait=false")


# Each instance checks what it was told: its contract's target and instances, and Snowflake's instance count.
COUNTS = ("import os, sys; from kubepool.contract import load_contract; c, _ = load_contract(); "
          "seen = (c.target_instances, len(c.instances), os.environ['SNOWFLAKE_JOBS_COUNT']); "
          "print('seen', seen, flush=True); sys.exit(0 if seen == (2, 2, '2') else 3)")


def test_kueue_admits_a_job_partially_down_to_min_instances(
        kubectl: Any, namespace: str, kueue_operator: Operator, compute_pool: Any, kueue_manager: kueue.Kueue) -> None:
    """Kueue's partial admission: a ClusterQueue with quota for 2 instances, a job of targetInstances 3 and
    minInstances 2 (its Workload's pod set: count 3, minCount 2). Kueue itself admits 2 (its podSetAssignment's
    count) and the job runs with 2 though its pool has room for 3: two pods, a status of 2, a contract of 2 (each
    instance checks it), to DONE, and an Event says so."""
    ns, pool = namespace, compute_pool("cpu", max_nodes=3)  # the pool could run 3: Kueue's admission decides
    q, cq = _queue(kubectl, ns, "pair", {}, instances=2)
    try:
        wait_for(lambda: _conditions(get_json(kubectl, "default", "clusterqueue", cq)).get("Active") == "True", 60,
                 "the ClusterQueue Active")

        def explain() -> str:
            heads = kubectl("logs", "-n", ns, "-l", f"{naming.LABEL_JOB}=partial", "--tail=-1", "--prefix").stdout
            return (f"\ninstances' logs:\n{heads}\nKueue's log (tail):\n{kueue_manager.logs()[-2500:]}"
                    f"\noperator's log (tail):\n{kueue_operator.logs()[-6000:]}")

        job = mljob("partial", computePool=pool, mode="parallel", targetInstances=3, minInstances=2,
                    entrypoint={"command": ["python", "-c", COUNTS]})
        job["metadata"]["labels"] = {naming.LABEL_KUEUE_QUEUE: q}
        kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(job), check=True)
        wl = wait_for(lambda: (w := _workload(kubectl, ns, "partial")) and (w.get("status") or {}).get("admission") and w,
                      JOB_TIMEOUT_S, f"the job's Workload admitted{explain()}")
        [pod_set] = wl["spec"]["podSets"]
        assert (pod_set["count"], pod_set.get("minCount")) == (3, 2), pod_set
        [assigned] = wl["status"]["admission"]["podSetAssignments"]
        assert assigned["count"] == 2, assigned  # Kueue's scheduler reduced it to what the quota holds
        st = wait_phase(kubectl, ns, "partial", {"DONE", "FAILED"}, JOB_TIMEOUT_S, kueue_operator)
        assert st["phase"] == "DONE", json.dumps(st, indent=1) + explain()
        assert (st["targetInstances"], len(st["instances"])) == (2, 2), st
        assert sorted(p["metadata"]["labels"][naming.LABEL_INSTANCE] for p in _pods(kubectl, ns, "partial")) == ["0", "1"]
        events = get_json(kubectl, ns, "events", "--field-selector", "involvedObject.name=partial,reason=KueuePartialAdmission")
        [event] = events["items"]
        assert "Kueue admitted 2 of the 3 instances" in event["message"] and "runs with 2 instances" in event["message"], event
    finally:
        kubectl("delete", "localqueue", q, "-n", ns, "--wait=false")
        kubectl("delete", "clusterqueue", cq, "--wait=false")
        kubectl("delete", "resourceflavor", cq, "--wait=false")
