"""The operator behind a fault-injecting proxy (apiproxy.FaultProxy): 429s with Retry-After, 500s and 503s,
connection resets, writes that happened but were answered 500, delays and watch streams cut mid-way, all during
a burst of jobs. Every job ends DONE, no instance ever has two live pods, no pod is orphaned, the phases never go
backwards, and the proxy proves each fault kind happened. The seed is printed; KUBEPOOL_FAULT_SEED replays one."""

from __future__ import annotations

import os
import random
import time
from pathlib import Path
from typing import Any

import yaml
from apiproxy import FaultProxy
from faultkit import (
    Recorder,
    job,
    orphans,
    record,
    sleep_cmd,
    wait_terminal,
)

from support.operator_cluster import Operator, wait_for

JOBS = 16
KINDS = ("429", "503", "500", "reset", "lost-write-answer", "delay", "watch-cut")


def test_api_faults_during_a_burst(cluster: Any, kubectl: Any, namespace: str, tmp_path: Path, operator_kubeconfig: Path,
                                   small_pool: Any, recorder: Recorder) -> None:
    seed = int(os.environ.get("KUBEPOOL_FAULT_SEED") or random.randrange(1 << 30))
    print(f"fault proxy seed {seed} (KUBEPOOL_FAULT_SEED={seed} replays it)")
    proxy = FaultProxy(cluster.layout.apiserver_url, cluster.layout.pki.ca_cert, seed).start()
    config = yaml.safe_load(operator_kubeconfig.read_text())
    config["clusters"][0]["cluster"] = {"server": proxy.url}
    proxied = tmp_path / "kubeconfig"
    proxied.write_text(yaml.safe_dump(config))
    op = Operator(proxied, namespace, tmp_path / "operator.log")
    try:
        op.start()
        pool = small_pool(max_nodes=3)
        names = [f"px-{i}" for i in range(JOBS)]
        t0 = time.monotonic()
        kubectl("apply", "-n", namespace, "-f", "-", check=True,  # the test's own writes go straight to the server
                input=yaml.safe_dump_all([job(n, pool, sleep_cmd(2)) for n in names]))
        def all_done() -> bool:
            phases = recorder.phases
            return all(phases.get(n) and phases[n][-1][1] in ("DONE", "FAILED", "CANCELLED") for n in names)

        wait_for(all_done, 420, "every job of the burst finished", interval=2.0)
        converged = time.monotonic() - t0
        final = wait_terminal(kubectl, namespace, names, 60)
        counts = dict(proxy.counts)
        print(f"faults injected: {counts}; burst of {JOBS} jobs finished in {converged:.0f}s")
        assert all(final[n]["phase"] == "DONE" for n in names), {n: final[n] for n in names if final[n]["phase"] != "DONE"}
        assert not recorder.doubled(), f"two live pods of one instance, or a pod recreated: {recorder.doubled()}"
        assert op.proc is not None and op.proc.poll() is None, "the operator died"
        assert not recorder.backwards(), recorder.backwards()
        missing = [k for k in KINDS if not counts.get(k)]
        assert not missing, f"faults that never happened (the test proved nothing about them): {missing}; {counts}"
        proxy.pause()
        wait_for(lambda: not orphans(kubectl, namespace), 60, "no orphaned pods")
        record(cluster, "api-proxy", faults=sum(counts.values()), jobs=JOBS, lost=0, orphaned=0, converge_s=converged,
               seed=seed, **{k.replace("-", "_"): v for k, v in counts.items()})
    finally:
        op.stop()
        proxy.stop()

