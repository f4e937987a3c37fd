"""Two operator replicas with leader election (a coordination.k8s.io Lease): only the lease holder reconciles
(the other has not even started kopf), and when the leader is killed mid-burst the standby takes over within
15 s, with no duplicated or recreated pod and the pool never over-committed, during the handover included.

Before #18 item 10 there was no leader election: both replicas reconciled at once (kopf's peering, off with
--standalone, pauses a replica only after its own 60 s keep-alive protocol, and is not leader election)."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from faultkit import Recorder, job, orphans, record, sleep_cmd, wait_terminal
from test_faults_watch_gap import admitted_instances, live_instances

from support.chart_account import NAMESPACE as ACCOUNT_NAMESPACE
from support.operator_cluster import Operator, wait_for

MAX_NODES = 3
FAILOVER_LIMIT_S = 15.0


class Sampler:
    """Samples the pool's live instance pods and the jobs' admitted instances until stopped; keeps the peaks."""

    def __init__(self, kubectl: Any, namespace: str, pool: str) -> None:
        self.kubectl, self.namespace, self.pool = kubectl, namespace, pool
        self.peak_pods = self.peak_admitted = self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.peak_pods = max(self.peak_pods, live_instances(self.kubectl, self.namespace, self.pool))
                self.peak_admitted = max(self.peak_admitted, admitted_instances(self.kubectl, self.namespace))
                self.samples += 1
            except AssertionError:  # kubectl failed once: sample again
                pass
            self._stop.wait(0.3)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


@pytest.mark.parametrize("fault", ["kill", "pause"])
def test_leader_lost_mid_burst_fails_over_fast(cluster: Any, kubectl: Any, namespace: str, tmp_path: Path,
                                               operator_kubeconfig: Path, small_pool: Any, recorder: Recorder,
                                               fault: str) -> None:
    """kill: the leader is kill -9'd. pause: the leader is SIGSTOPped until the standby has taken over, then
    resumed: it finds its lease gone, writes nothing more and stops."""
    env = {"KUBEPOOL_OPERATOR_LEADER_ELECTION": "true", "KUBEPOOL_OPERATOR_LEASE_NAMESPACE": ACCOUNT_NAMESPACE,
           "KUBEPOOL_OPERATOR_LEASE_NAME": f"kp-{namespace}"[:63].rstrip("-")}
    replicas = [Operator(operator_kubeconfig, namespace, tmp_path / f"replica-{i}.log", env=env) for i in range(2)]
    for r in replicas:
        r.start(wait=False)
    try:
        def configured() -> list[Operator]:
            return [r for r in replicas if "kubepool operator configured" in r.logs()]

        wait_for(configured, 60, "one replica leading (kubepool operator configured)")
        time.sleep(3)  # a second leader would have started by now
        leaders = configured()
        assert len(leaders) == 1, "both replicas started reconciling:\n" + "\n".join(
            f"--- {r.log_path.name}\n{r.logs()[-1500:]}" for r in replicas)
        leader = leaders[0]
        standby = next(r for r in replicas if r is not leader)
        assert "standing by: lease" in standby.logs() and "Handler" not in standby.logs(), standby.logs()[-2000:]

        pool = small_pool(max_nodes=MAX_NODES)
        names = [f"burst-{i:02d}" for i in range(10)]
        manifests = [job(n, pool, sleep_cmd(4), targetInstances=1 + i % 2) for i, n in enumerate(names)]
        with Sampler(kubectl, namespace, pool) as sampler:
            kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump_all(manifests), check=True)
            wait_for(lambda: len(recorder.pod_uids) >= 2, 60, "the first pods of the burst")
            killed = time.monotonic()
            assert leader.proc is not None
            if fault == "kill":
                leader.stop(kill=True)
            else:
                os.kill(leader.proc.pid, signal.SIGSTOP)

            def took(line: str) -> float | None:
                return time.monotonic() - killed if line in standby.logs() else None

            acquired = wait_for(lambda: took("became the leader"), 60, "the standby taking the lease", interval=0.1)
            became = killed + acquired  # the old leader's last writes may reach the watch after the fault: only
            #                             transitions seen once the standby leads are the new leader's
            ready = wait_for(lambda: took("kubepool operator configured"), 60, "the new leader configured", interval=0.1)

            def first_move() -> float | None:
                moves = [t for seq in recorder.phases.values() for t, _, _ in seq if t > became]
                return min(moves) - killed if moves else None

            moved = wait_for(first_move, 60, "a job's status moving under the new leader", interval=0.2)
            if fault == "pause":
                time.sleep(2)  # the new leader admits and creates meanwhile
                os.kill(leader.proc.pid, signal.SIGCONT)
                wait_for(lambda: leader.proc is not None and leader.proc.poll() is not None, 60,
                         "the resumed old leader stopping (its lease is gone)")
                assert "lost the lease" in leader.logs(), leader.logs()[-3000:]
            print(f"failover ({fault}): lease taken {acquired:.1f}s after the leader's {fault}, operator configured at "
                  f"{ready:.1f}s, first job transition at {moved:.1f}s (limit {FAILOVER_LIMIT_S:.0f}s)")
            final = wait_terminal(kubectl, namespace, names, 180)
        assert acquired < FAILOVER_LIMIT_S, (f"the standby became leader {acquired:.1f}s after the fault, not within "
                                             f"{FAILOVER_LIMIT_S:.0f}s\n{standby.logs()[-3000:]}")
        assert moved < FAILOVER_LIMIT_S, f"failover took {moved:.1f}s\n{standby.logs()[-3000:]}"
        assert all(final[n].get("phase") == "DONE" for n in names), final
        print(f"pool peaks over {sampler.samples} samples: {sampler.peak_pods} live instance pods, "
              f"{sampler.peak_admitted} admitted instances (maxNodes {MAX_NODES})")
        assert sampler.samples > 10 and sampler.peak_pods <= MAX_NODES and sampler.peak_admitted <= MAX_NODES, (
            sampler.peak_pods, sampler.peak_admitted)
        assert not recorder.doubled(), f"duplicated or recreated pods: {recorder.doubled()}"
        assert not recorder.backwards(), recorder.backwards()
        wait_for(lambda: not orphans(kubectl, namespace), 60, "no orphaned pods")
        record(cluster, f"leader-failover-{fault}", faults=1, jobs=len(names), lost=0, orphaned=0, converge_s=moved,
               lease_taken_s=round(acquired, 1))
    finally:
        for r in replicas:
            if r.proc is not None and r.proc.poll() is None:
                os.kill(r.proc.pid, signal.SIGCONT)
            r.stop()
