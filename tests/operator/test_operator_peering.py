"""Two operator replicas on one namespace never double-work: with kopf's peering CRDs installed, the operator
creates its peering object and the replica with the lower (random) priority pauses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from support.operator_cluster import (
    Operator,
    free_port,
    install_peering_crds,
    job_passes,
    mljob,
    wait_for,
    wait_phase,
)


def test_second_replica_pauses(kubectl: Any, cluster: Any, crds: None, namespace: str, tmp_path: Path,
                               compute_pool: Any, apply: Any) -> None:
    install_peering_crds(kubectl)
    first = Operator(cluster.kubeconfig, namespace, tmp_path / "first.log", standalone=False, metrics_port=free_port())
    second = Operator(cluster.kubeconfig, namespace, tmp_path / "second.log", standalone=False, metrics_port=free_port())
    first.start()
    second.start()
    try:
        assert kubectl("get", "kopfpeering", "kubepool", "-n", namespace).returncode == 0
        paused = wait_for(lambda: [o for o in (first, second) if "Pausing operations in favour of" in o.logs()],
                          60, "one replica pausing")
        assert len(paused) == 1
        active = second if paused[0] is first else first
        pool = compute_pool("cpu", max_nodes=1)
        # A cancelled job ends CANCELLED without pods: only the handler's work is observed.
        apply(mljob("peered", computePool=pool, entrypoint={"file": "x.py"}, cancel=True))
        wait_phase(kubectl, namespace, "peered", {"CANCELLED"}, 60, active)
        # The job's passes, by each replica's own metrics: the active one's, none of the paused one's.
        wait_for(lambda: (job_passes(active) or 0) >= 1, 30, "the active replica's job pass")
        assert job_passes(paused[0]) == 0, paused[0].logs()[-3000:]
    finally:
        first.stop()
        second.stop()
