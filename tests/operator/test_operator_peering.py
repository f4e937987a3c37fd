"""Two operator replicas on one namespace never double-work: with kopf's peering CRDs installed, the operator
creates its peering object and the replica with the lower (random) priority pauses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from support.operator_cluster import Operator, mljob, wait_for, wait_phase


def _peering_crd(kind: str, plural: str, scope: str) -> dict[str, Any]:
    """kopf's own peering CRD (as in kopf's docs): status holds each peer's identity and priority."""
    schema = {"type": "object", "x-kubernetes-preserve-unknown-fields": True,
              "properties": {"status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.kopf.dev"},
            "spec": {"group": "kopf.dev", "scope": scope,
                     "names": {"kind": kind, "plural": plural, "singular": kind.lower()},
                     "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": schema}}]}}


def test_second_replica_pauses(kubectl: Any, cluster: Any, crds: None, namespace: str, tmp_path: Path,
                               compute_pool: Any, apply: Any) -> None:
    for crd in (_peering_crd("KopfPeering", "kopfpeerings", "Namespaced"),
                _peering_crd("ClusterKopfPeering", "clusterkopfpeerings", "Cluster")):
        kubectl("apply", "-f", "-", input=yaml.safe_dump(crd), check=True)
        kubectl.wait_established(f"{crd['metadata']['name']}")
    first = Operator(cluster.kubeconfig, namespace, tmp_path / "first.log", standalone=False)
    second = Operator(cluster.kubeconfig, namespace, tmp_path / "second.log", standalone=False)
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
        wait_for(lambda: "Handler 'reconcile_mljob' succeeded" in active.logs(), 30, "the active replica's handler")
        assert "Handler 'reconcile_mljob'" not in paused[0].logs(), paused[0].logs()[-3000:]
    finally:
        first.stop()
        second.stop()
