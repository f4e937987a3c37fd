"""Operator crashes: kill -9 the operator at seeded random moments while jobs of mixed shapes run (queued
behind full pools, multi-instance, min < target, failing, deadline), restart it each time. Every job ends in
its expected terminal phase, no pod is duplicated, recreated or orphaned, and no status goes backwards.
Two replicas started by mistake do no double work (kopf peering)."""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from faultkit import (
    Recorder,
    duplicates,
    job,
    orphans,
    record,
    sleep_cmd,
    wait_terminal,
)

from support.operator_cluster import Operator, wait_for

SEED = 20261129


def shapes(pools: list[str], n: int) -> list[tuple[dict[str, Any], tuple[str, str]]]:
    """n jobs of mixed shapes over the pools, each with its expected (phase, reason)."""
    kinds = [
        (lambda name, pool: job(name, pool, sleep_cmd(6)), ("DONE", "Completed")),
        (lambda name, pool: job(name, pool, sleep_cmd(8), targetInstances=3), ("DONE", "Completed")),
        (lambda name, pool: job(name, pool, sleep_cmd(4), targetInstances=2, backoffLimit=1), ("DONE", "Completed")),
        (lambda name, pool: job(name, pool, sleep_cmd(1, exit_code=3)), ("FAILED", "HeadFailed")),
        (lambda name, pool: job(name, pool, sleep_cmd(300), activeDeadlineSeconds=15), ("FAILED", "DeadlineExceeded")),
        (lambda name, pool: job(name, pool, sleep_cmd(5), targetInstances=2), ("DONE", "Completed")),
        # min < target: admitted with what the pool has free; instances never admitted are not waited for.
        (lambda name, pool: job(name, pool, sleep_cmd(5), targetInstances=3, minInstances=1), ("DONE", "Completed")),
    ]
    out = []
    for i in range(n):
        make, expect = kinds[i % len(kinds)]
        out.append((make(f"chaos-{i:02d}", pools[i % len(pools)]), expect))
    return out


def run_chaos(cluster: Any, kubectl: Any, namespace: str, operator: Operator, recorder: Recorder,
              small_pool: Any, jobs: int, kills: int, seed: int, budget_s: float, every_s: float = 7.0) -> None:
    rng = random.Random(seed)
    pools = [small_pool(max_nodes=3) for _ in range(max(2, jobs // 4))]
    manifests = shapes(pools, jobs)
    kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump_all([m for m, _ in manifests]), check=True)
    last_restart = first_kill = time.monotonic()
    for _ in range(kills):
        time.sleep(rng.uniform(1.0, every_s))
        operator.stop(kill=True)
        time.sleep(rng.uniform(0.0, 2.0))  # jobs keep running with no operator
        operator.start()
        last_restart = time.monotonic()
    names = [m["metadata"]["name"] for m, _ in manifests]
    final = wait_terminal(kubectl, namespace, names, budget_s)
    converged = max(recorder.first_time(n, {"DONE", "FAILED", "CANCELLED"}) or time.monotonic() for n in names)
    wrong = {n: (final[n].get("phase"), final[n].get("reason"), final[n].get("message"))
             for (m, want) in manifests if (n := m["metadata"]["name"]) and
             (final[n].get("phase"), final[n].get("reason")) != want}
    # Children of finished jobs go away (grace 5 s, at once for failures).
    wait_for(lambda: not [p for p in kubectl.json("get", "pods", "-n", namespace)["items"]
                          if p["status"].get("phase") in ("Pending", "Running") and not p["metadata"].get("deletionTimestamp")],
             60, "no live pods after every job finished")
    orphaned, dup = orphans(kubectl, namespace), duplicates(kubectl, namespace)
    backwards, recreated = recorder.backwards(), recorder.recreated_pods()
    record(cluster, f"operator-kill-x{kills}-{jobs}-jobs", faults=kills, jobs=jobs, lost=len(wrong),
           orphaned=len(orphaned), converge_s=max(converged - last_restart, 0.0),
           restarts_within_s=round(last_restart - first_kill, 1))
    assert not wrong, f"jobs in the wrong terminal phase: {wrong}\n{operator.logs()[-3000:]}"
    assert not orphaned and not dup, (orphaned, dup)
    assert not backwards, backwards
    assert not recreated, f"pods recreated under the same name: {recreated}"
    # Within the budget, and every job's last event was seen within 90 s of the final restart.
    assert converged - last_restart < 90, f"converged {converged - last_restart:.0f}s after the last restart"


def test_operator_killed_at_random_moments(cluster: Any, kubectl: Any, namespace: str, operator: Operator,
                                           recorder: Recorder, small_pool: Any) -> None:
    run_chaos(cluster, kubectl, namespace, operator, recorder, small_pool, jobs=12, kills=4, seed=SEED, budget_s=240)


@pytest.mark.slow
def test_operator_killed_often_more_jobs(cluster: Any, kubectl: Any, namespace: str, operator: Operator,
                                         recorder: Recorder, small_pool: Any) -> None:
    run_chaos(cluster, kubectl, namespace, operator, recorder, small_pool, jobs=24, kills=8, seed=SEED + 1, budget_s=360,
              every_s=3.5)  # the kills land while the jobs still run


def test_two_replicas_no_double_work(cluster: Any, operator_kubeconfig: Path, kubectl: Any, crds: None, namespace: str, tmp_path: Path,
                                     small_pool: Any, recorder: Recorder) -> None:
    from test_operator_peering import _peering_crd  # kopf's peering CRDs, as the peering test installs them

    for crd in (_peering_crd("KopfPeering", "kopfpeerings", "Namespaced"),
                _peering_crd("ClusterKopfPeering", "clusterkopfpeerings", "Cluster")):
        kubectl("apply", "-f", "-", input=yaml.safe_dump(crd), check=True)
        kubectl.wait_established(f"{crd['metadata']['name']}")
    replicas = [Operator(operator_kubeconfig, namespace, tmp_path / f"r{i}.log", standalone=False) for i in range(2)]
    for r in replicas:
        r.start()
    try:
        paused = wait_for(lambda: [r for r in replicas if "Pausing operations in favour of" in r.logs()], 60,
                          "one replica pausing")
        assert len(paused) == 1
        active = next(r for r in replicas if r is not paused[0])
        pool = small_pool(max_nodes=3)
        names = [f"peer-{i}" for i in range(3)]
        kubectl("apply", "-n", namespace, "-f", "-", check=True, input=yaml.safe_dump_all(
            [job(n, pool, sleep_cmd(3), targetInstances=2) for n in names]))
        t0 = time.monotonic()
        final = wait_terminal(kubectl, namespace, names, 120)
        assert all(final[n]["phase"] == "DONE" for n in names), final
        assert "Handler 'reconcile_mljob'" not in paused[0].logs(), paused[0].logs()[-3000:]
        assert "Handler 'reconcile_mljob' succeeded" in active.logs()
        assert not recorder.recreated_pods() and not duplicates(kubectl, namespace)
        assert not recorder.backwards(), recorder.backwards()
        record(cluster, "two-replicas", faults=1, jobs=3, lost=0, orphaned=len(orphans(kubectl, namespace)),
               converge_s=time.monotonic() - t0)
    finally:
        for r in replicas:
            r.stop()
