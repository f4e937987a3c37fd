"""Operator crashes (R1): 50 cheap jobs of mixed shapes (queued behind full pools, multi-instance, min < target,
failing, deadline, a job that really retries, TTL, jobs deleted by hand), and the operator kill -9'd at random
moments of a random seed (printed; KUBEPOOL_FAULT_SEED replays it), some right after a deletion and some with
deletions made while it is down; restarted each time. Every job ends in its expected terminal phase (or is gone,
with its pods), a deleted job's capacity goes to the job queued behind it, no two live pods ever hold one
instance (watched continuously, `faultkit.LiveInstances`), no pod is recreated or orphaned and no status goes
backwards. Two replicas started by mistake do no double work (kopf peering)."""

from __future__ import annotations

import os
import random
import time
from pathlib import Path
from typing import Any

import yaml
from faultkit import (
    Recorder,
    job,
    orphans,
    record,
    sleep_cmd,
    wait_terminal,
)

from kubepool import contract
from support.operator_cluster import Operator, free_port, install_peering_crds, job_passes, wait_for

GONE = ("GONE", "")  # the job was deleted (by hand or by its TTL): it and its pods must disappear
# Fails on attempt 0, succeeds on attempt 1 (retried pods are named `-r1`): only a real retry ends DONE. On
# attempt 0 the head fails first while the other instance still runs, so the retry's new pods overlap a live
# pod of the old attempt unless the operator deletes it (the continuous duplicate check).
RETRY_CMD = ["python", "-c", "import os, sys, time; "
             f"again = os.environ['{contract.ENV_POD_NAME}'].endswith('-r1'); "
             f"time.sleep(2 if again or os.environ['{contract.ENV_INSTANCE_ID}'] == '0' else 30); "
             "sys.exit(0 if again else 3)"]
KINDS = [
    (lambda name, pool: job(name, pool, sleep_cmd(6)), ("DONE", "Completed")),
    (lambda name, pool: job(name, pool, sleep_cmd(8), targetInstances=3), ("DONE", "Completed")),
    (lambda name, pool: job(name, pool, RETRY_CMD, targetInstances=2, backoffLimit=1), ("DONE", "Completed")),
    (lambda name, pool: job(name, pool, sleep_cmd(1, exit_code=3)), ("FAILED", "HeadFailed")),
    (lambda name, pool: job(name, pool, sleep_cmd(300), activeDeadlineSeconds=15), ("FAILED", "DeadlineExceeded")),
    (lambda name, pool: job(name, pool, sleep_cmd(5), targetInstances=2), ("DONE", "Completed")),
    # min < target: admitted with what the pool has free; instances never admitted are not waited for.
    (lambda name, pool: job(name, pool, sleep_cmd(5), targetInstances=3, minInstances=1), ("DONE", "Completed")),
    (lambda name, pool: job(name, pool, sleep_cmd(2), ttlSecondsAfterFinished=3), GONE),
]


def chaos_seed() -> int:
    seed = int(os.environ.get("KUBEPOOL_FAULT_SEED") or random.SystemRandom().randrange(2**31))
    print(f"chaos seed {seed} (KUBEPOOL_FAULT_SEED={seed} replays this schedule)", flush=True)
    return seed


def shapes(pools: list[str], holder_pools: list[str], n: int) -> list[tuple[dict[str, Any], tuple[str, str]]]:
    """n jobs with their expected (phase, reason): on each holder pool a job that fills it until it is deleted
    and one queued behind it (DONE only if the deletion releases the pool); the rest of mixed shapes."""
    out = []
    for i, pool in enumerate(holder_pools):
        out.append((job(f"hold-{i}", pool, sleep_cmd(600), targetInstances=3), GONE))
        out.append((job(f"behind-{i}", pool, sleep_cmd(2), targetInstances=2), ("DONE", "Completed")))
    for i in range(n - len(out)):
        make, expect = KINDS[i % len(KINDS)]
        out.append((make(f"chaos-{i:02d}", pools[i % len(pools)]), expect))
    return out


def gone(kubectl: Any, namespace: str, name: str) -> bool:
    pods = kubectl.json("get", "pods", "-n", namespace, "-l", f"kubepool.dev/job={name}")["items"]
    return kubectl("get", "mljob", name, "-n", namespace).returncode != 0 and not pods


def run_chaos(cluster: Any, kubectl: Any, namespace: str, operator: Operator, recorder: Recorder,
              small_pool: Any, jobs: int, kills: int, budget_s: float, every_s: float) -> None:
    seed = chaos_seed()
    rng = random.Random(seed)
    holders = 4
    pools = [small_pool(max_nodes=3) for _ in range(max(2, (jobs - 2 * holders) // 4))]
    manifests = shapes(pools, [small_pool(max_nodes=3) for _ in range(holders)], jobs)
    want = {m["metadata"]["name"]: expect for m, expect in manifests}
    kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump_all([m for m, _ in manifests]), check=True)
    # Which kills come right after a deletion (the operator dies mid-deletion) and which have one made while
    # the operator is down; the holders are deleted in that order.
    moments = rng.sample(range(kills), holders)
    during, while_down = set(moments[: holders // 2]), set(moments[holders // 2:])
    to_delete = [f"hold-{i}" for i in range(holders)]
    delete = lambda name: kubectl("delete", "mljob", name, "-n", namespace, "--wait=false", check=True)  # noqa: E731
    last_restart = first_kill = time.monotonic()
    for k in range(kills):
        time.sleep(rng.uniform(1.0, every_s))
        if k in during:
            delete(to_delete.pop())
            time.sleep(rng.uniform(0.0, 0.5))
        operator.stop(kill=True)
        if k in while_down:
            delete(to_delete.pop())
        time.sleep(rng.uniform(0.0, 2.0))  # jobs keep running with no operator
        operator.start()
        last_restart = time.monotonic()
    assert not to_delete, to_delete
    about = f"(seed {seed})"
    names = [n for n, expect in want.items() if expect != GONE]
    final = wait_terminal(kubectl, namespace, names, budget_s)
    for name in (n for n, expect in want.items() if expect == GONE):
        wait_for(lambda name=name: gone(kubectl, namespace, name), 90, f"{name} and its pods gone {about}")
    converged = max(recorder.first_time(n, {"DONE", "FAILED", "CANCELLED"}) or time.monotonic() for n in names)
    wrong = {n: (final[n].get("phase"), final[n].get("reason"), final[n].get("message"))
             for n in names if (final[n].get("phase"), final[n].get("reason")) != want[n]}
    retrying = [m["metadata"]["name"] for m, _ in manifests if m["spec"]["entrypoint"]["command"] == RETRY_CMD]
    never_retried = [n for n in retrying if final[n].get("attempt") != 1]
    ttl_unseen = [n for m, _ in manifests if (n := m["metadata"]["name"]) and m["spec"].get("ttlSecondsAfterFinished")
                  and not recorder.first_time(n, {"DONE"})]
    # Children of finished jobs go away (grace 5 s, at once for failures).
    wait_for(lambda: not [p for p in kubectl.json("get", "pods", "-n", namespace)["items"]
                          if p["status"].get("phase") in ("Pending", "Running") and not p["metadata"].get("deletionTimestamp")],
             60, f"no live pods after every job finished {about}")
    orphaned = orphans(kubectl, namespace)
    backwards, recreated, doubled = recorder.backwards(), recorder.recreated_pods(), recorder.duplicates_seen()
    record(cluster, f"operator-kill-x{kills}-{jobs}-jobs", faults=kills, jobs=jobs, lost=len(wrong) + len(never_retried),
           orphaned=len(orphaned), converge_s=max(converged - last_restart, 0.0),
           restarts_within_s=round(last_restart - first_kill, 1), seed=seed, duplicates_seen=len(doubled))
    assert not doubled, f"two live pods of one instance at once {about}: {doubled}"
    assert not wrong, f"jobs in the wrong terminal phase {about}: {wrong}\n{operator.logs()[-3000:]}"
    assert not never_retried, f"retrying jobs that did not end DONE on attempt 1 {about}: {never_retried}"
    assert not ttl_unseen, f"TTL jobs deleted without being seen DONE {about}: {ttl_unseen}"
    assert not orphaned, (about, orphaned)
    assert not backwards, (about, backwards)
    assert not recreated, f"pods recreated under the same name {about}: {recreated}"


def test_operator_killed_at_random_moments(cluster: Any, kubectl: Any, namespace: str, operator: Operator,
                                           recorder: Recorder, small_pool: Any) -> None:
    # Budget: a hang guard (the queue behind 14 pools of 3 drains in well under it), not a speed target.
    run_chaos(cluster, kubectl, namespace, operator, recorder, small_pool, jobs=50, kills=8, budget_s=600, every_s=6.0)


def test_two_replicas_no_double_work(cluster: Any, operator_kubeconfig: Path, kubectl: Any, crds: None, namespace: str, tmp_path: Path,
                                     small_pool: Any, recorder: Recorder) -> None:
    install_peering_crds(kubectl)
    replicas = [Operator(operator_kubeconfig, namespace, tmp_path / f"r{i}.log", standalone=False,
                         metrics_port=free_port()) for i in range(2)]
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
        # The job passes each ran, by its own metrics: the active replica's, none of the paused one's.
        assert job_passes(paused[0]) == 0, paused[0].logs()[-3000:]
        assert (job_passes(active) or 0) >= len(names), active.logs()[-3000:]
        assert not recorder.doubled(), recorder.doubled()
        assert not recorder.backwards(), recorder.backwards()
        record(cluster, "two-replicas", faults=1, jobs=3, lost=0, orphaned=len(orphans(kubectl, namespace)),
               converge_s=time.monotonic() - t0)
    finally:
        for r in replicas:
            r.stop()
