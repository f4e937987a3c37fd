"""Watch gaps: the operator frozen (SIGSTOP) past its watch timeout while jobs are deleted and created again
under the same names, and the API server restarted meanwhile (its new watch cache cannot resume the operator's
streams: 410 Gone, kopf lists again). On resume the deletions in the gap must count: the deleted jobs' capacity
is released, the new same-name jobs run, and the pool is never over-committed.

Before #18 item 8 a re-list never reported what it lacked: kopf's indexes kept the deleted jobs (and their pods)
next to the new ones, the operator read the old job under the name, and `finished` (keyed by name) hid a new job
created under a finished one's name from every admission decision."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from faultkit import (
    Recorder,
    job,
    kill_component,
    local_up,
    orphans,
    phases_of,
    record,
    sleep_cmd,
)

from kubepool import naming
from support.operator_cluster import Operator, get_json, wait_for, wait_phase

WATCH_TIMEOUT_S = 4  # the operator's watch streams end this often (KUBEPOOL_OPERATOR_WATCH_TIMEOUT_SECONDS)
MAX_NODES = 2


def live_instances(kubectl: Any, namespace: str, pool: str) -> int:
    """The pool's instance pods that hold a node now: neither ended nor being deleted."""
    pods = get_json(kubectl, namespace, "pods", "-l", f"{naming.LABEL_POOL}={pool}")["items"]
    return sum(1 for p in pods if p["status"].get("phase") in ("Pending", "Running")
               and not p["metadata"].get("deletionTimestamp"))


def admitted_instances(kubectl: Any, namespace: str) -> int:
    """Instances the jobs' statuses hold (admitted and not finished)."""
    jobs = get_json(kubectl, namespace, "mljobs")["items"]
    return sum(len(st.get("instances") or []) for j in jobs if (st := j.get("status") or {}).get("admittedAt")
               and st.get("phase") not in ("DONE", "FAILED", "CANCELLED"))


def gc_collects_mljob_dependents(kubectl: Any, namespace: str, pool: str) -> None:
    """Wait until the garbage collector deletes what a deleted MLJob owned. It learns a new CRD by discovery every
    30 s: right after the cluster started, the old jobs' Secrets and pods deleted in the gap would outlive the
    API server restart below with no one to collect them, and the new jobs of their names would wait on them."""
    kubectl("apply", "-n", namespace, "-f", "-", check=True, input=yaml.safe_dump(job("gc-probe", pool, sleep_cmd(1), suspend=True)))
    uid = get_json(kubectl, namespace, "mljob", "gc-probe")["metadata"]["uid"]
    owned = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "gc-probe", "ownerReferences": [
        {"apiVersion": naming.API_VERSION, "kind": naming.MLJOB_KIND, "name": "gc-probe", "uid": uid}]}}
    kubectl("apply", "-n", namespace, "-f", "-", check=True, input=yaml.safe_dump(owned))
    kubectl("delete", "mljob", "gc-probe", "-n", namespace, "--wait=true", check=True)
    wait_for(lambda: kubectl("get", "configmap", "gc-probe", "-n", namespace).returncode != 0, 120,
             "the garbage collector to delete a deleted MLJob's ConfigMap (it learns a new CRD within 30 s)")


@pytest.mark.exclusive  # the API server restarted under every cluster test
def test_deletions_in_a_watch_gap_release_capacity(cluster: Any, kubectl: Any, namespace: str, tmp_path: Path,
                                                    operator_kubeconfig: Path, small_pool: Any,
                                                    recorder: Recorder) -> None:
    op = Operator(operator_kubeconfig, namespace, tmp_path / "operator.log",
                  env={"KUBEPOOL_OPERATOR_WATCH_TIMEOUT_SECONDS": str(WATCH_TIMEOUT_S)})
    pool = small_pool(max_nodes=MAX_NODES)
    gc_collects_mljob_dependents(kubectl, namespace, pool)
    op.start()
    try:
        apply = lambda *objs: kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump_all(objs), check=True)  # noqa: E731
        # Before the gap: `hold` runs on one of the pool's two nodes, `short` has finished.
        apply(job("hold", pool, sleep_cmd(600)), job("short", pool, sleep_cmd(1)))
        wait_phase(kubectl, namespace, "short", {"DONE"}, 90, op)
        wait_phase(kubectl, namespace, "hold", {"RUNNING"}, 90, op)
        assert op.proc is not None
        os.kill(op.proc.pid, signal.SIGSTOP)
        stopped = time.monotonic()
        try:
            # Every watch stream of the operator ends server-side (timeoutSeconds) before anything changes: the
            # deletions below are never sent to it (a live stream would hold them in its socket for the resume).
            time.sleep(WATCH_TIMEOUT_S + 3)
            kubectl("delete", "mljob", "hold", "short", "-n", namespace, "--wait=true", check=True)
            # Created in this order, a second apart (creationTimestamp is the queue order): `hold` 1 instance,
            # `short` (the finished job's name) 2 instances, `late` 1: together twice the pool.
            for manifest in (job("hold", pool, sleep_cmd(6)), job("short", pool, sleep_cmd(6), targetInstances=2),
                             job("late", pool, sleep_cmd(6))):
                apply(manifest)
                time.sleep(1.1)
            kill_component(cluster, "kube-apiserver")
            local_up()  # a new watch cache: the operator's resourceVersions are too old to resume from
        finally:
            os.kill(op.proc.pid, signal.SIGCONT)
        resumed = time.monotonic()
        print(f"operator stopped for {resumed - stopped:.1f}s (watch timeout {WATCH_TIMEOUT_S}s), API server restarted")
        names = ["hold", "short", "late"]
        peak_pods = peak_admitted = 0
        deadline = resumed + 120
        while time.monotonic() < deadline:
            peak_pods = max(peak_pods, live_instances(kubectl, namespace, pool))
            peak_admitted = max(peak_admitted, admitted_instances(kubectl, namespace))
            assert peak_pods <= MAX_NODES and peak_admitted <= MAX_NODES, (
                f"pool over-committed: {peak_pods} live instance pods, {peak_admitted} admitted instances, maxNodes "
                f"{MAX_NODES}\n{kubectl('get', 'mljobs,pods', '-n', namespace, '-o', 'wide').stdout}\n{op.logs()[-3000:]}")
            phases = {n: (get_json(kubectl, namespace, "mljob", n).get("status") or {}).get("phase") for n in names}
            if all(p == "DONE" for p in phases.values()):
                break
            time.sleep(0.5)
        converged = time.monotonic() - resumed
        final = phases_of(kubectl, namespace)
        restarted = "Restarting the watch-stream" in op.logs()
        assert restarted, "no watch stream was restarted with a re-list (410 Gone): the gap this test needs did not happen"
        not_done = {n: (final.get(n, {}).get("phase"), final.get(n, {}).get("reason"), final.get(n, {}).get("message"))
                    for n in names if final.get(n, {}).get("phase") != "DONE"}
        assert not not_done, (f"jobs re-created in the watch gap did not run: {not_done}\n"
                              f"{kubectl('get', 'pods', '-n', namespace, '-o', 'wide').stdout}\n"
                              f"{kubectl('get', 'events', '-n', namespace).stdout[-3000:]}\n"
                              f"{[line for line in op.logs().splitlines() if 'node_' not in line][-40:]}")
        print(f"all three re-created jobs DONE {converged:.1f}s after the resume; peak {peak_pods} live instance "
              f"pods, {peak_admitted} admitted instances (maxNodes {MAX_NODES})")
        wait_for(lambda: not orphans(kubectl, namespace), 60, "no orphaned pods")
        assert not recorder.doubled(), recorder.doubled()
        record(cluster, "watch-gap", faults=1, jobs=5, lost=0, orphaned=0, converge_s=converged,
               stopped_s=round(resumed - stopped, 1))
    finally:
        if op.proc is not None:
            os.kill(op.proc.pid, signal.SIGCONT)
        op.stop()
