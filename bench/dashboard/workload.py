"""The small workload behind the dashboard's picture: three ComputePools on kwok fake nodes, seventeen short
MLJobs in three waves (more than the pools hold, so some queue), two whose head fails, two whose instances no
node can take (FAILED InstancesUnavailable, never RUNNING), two cancelled while queued, and one in a namespace
whose ResourceQuota refuses its pods until it is raised (the API errors the operator retries). Two of each
ending in one pool, not one: a {pool, phase, reason} series starts at its first observation, so rate() sees
the second only. kwok runs no containers: stages end each head pod after a random 10-45 s
(bench.cluster.head_exit_stage)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from bench.cluster import head_exit_stage
from kubepool.local import kwok

SUCCEED_ENV, FAIL_ENV = "DASHBOARD_SUCCEED", "DASHBOARD_FAIL"
STAGES = {"dashboard-head-succeed": head_exit_stage("dashboard-head-succeed", SUCCEED_ENV, 0, 10_000, 45_000),
          "dashboard-head-fail": head_exit_stage("dashboard-head-fail", FAIL_ENV, 1, 8_000, 15_000)}
NODE_LABEL = "kubepool.dev/node-pool"
RESOURCES = {"cpu": "100m", "memory": "128Mi"}
IMAGE = "fake.invalid/dashboard:1"  # never pulled: kwok runs nothing
QUOTA_NAMESPACE = "team-b"
QUOTA_RAISED_AT_S = 120.0
NOWHERE = "dash-nowhere"  # a NODE_LABEL value no node carries: an unplaceable job's instances stay Pending
UNPLACEABLE_TIMEOUT_S = 15  # its instancesTimeoutSeconds
# The ends before RUNNING the finished panel must show (phase, reason): the run fails without them.
ENDS_BEFORE_RUNNING = (("FAILED", "InstancesUnavailable"), ("CANCELLED", "Cancelled"))


@dataclass(frozen=True)
class PoolSpec:
    name: str
    nodes: int
    max_nodes: int
    min_nodes: int = 0  # > 0: warm placeholders


POOLS = (PoolSpec("train", 3, 3, min_nodes=1), PoolSpec("batch", 2, 2), PoolSpec("eval", 1, 1))
NAMESPACES = ("team-a", QUOTA_NAMESPACE)


@dataclass(frozen=True)
class JobSpec:
    name: str
    pool: str
    instances: int
    at_s: float  # submitted this long after the first wave
    namespace: str = "team-a"
    fails: bool = False
    unplaceable: bool = False  # FAILS InstancesUnavailable after UNPLACEABLE_TIMEOUT_S, never RUNNING
    cancel_at_s: float | None = None  # spec.cancel set this long after the first wave, while it is queued


JOBS = (
    JobSpec("train-1", "train", 2, 0), JobSpec("train-2", "train", 2, 0), JobSpec("batch-1", "batch", 1, 0),
    JobSpec("batch-2", "batch", 1, 0), JobSpec("batch-3", "batch", 1, 0), JobSpec("eval-1", "eval", 1, 0),
    JobSpec("train-3", "train", 1, 40), JobSpec("eval-2", "eval", 1, 40), JobSpec("eval-3", "eval", 1, 40, fails=True),
    JobSpec("batch-4", "batch", 2, 40, namespace=QUOTA_NAMESPACE),
    JobSpec("train-4", "train", 3, 90), JobSpec("batch-5", "batch", 1, 90), JobSpec("eval-4", "eval", 1, 90, fails=True),
    # Behind a job of their one-instance pool submitted before them (a head runs at least 8 s): still queued.
    JobSpec("eval-5", "eval", 1, 0, cancel_at_s=5), JobSpec("eval-6", "eval", 1, 90, cancel_at_s=95),
    JobSpec("train-5", "train", 1, 40, unplaceable=True), JobSpec("train-6", "train", 1, 90, unplaceable=True),
)


def node_labels() -> dict[str, str]:
    """kwok node name → the pool label it carries: each pool has its own nodes."""
    names = [p.name for p in POOLS for _ in range(p.nodes)]
    return {kwok.fake_node_name(i): f"dash-{pool}" for i, pool in enumerate(names)}


def pool(p: PoolSpec) -> dict[str, Any]:
    return {"apiVersion": "kubepool.dev/v1alpha1", "kind": "ComputePool", "metadata": {"name": p.name},
            "spec": {"minNodes": p.min_nodes, "maxNodes": p.max_nodes, "nodeSelector": {NODE_LABEL: f"dash-{p.name}"},
                     "tolerations": [kwok.FAKE_TOLERATION], "resources": RESOURCES}}


def mljob(j: JobSpec) -> dict[str, Any]:
    spec: dict[str, Any] = {"computePool": j.pool, "targetInstances": j.instances, "image": IMAGE,
                            "entrypoint": {"command": ["true"]},
                            "env": [{"name": FAIL_ENV if j.fails else SUCCEED_ENV, "value": "true"}]}
    if j.unplaceable:  # the pool's nodeSelector and this term together match no node
        term = {"matchExpressions": [{"key": NODE_LABEL, "operator": "In", "values": [NOWHERE]}]}
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}
        spec["instancesTimeoutSeconds"] = UNPLACEABLE_TIMEOUT_S
    return {"apiVersion": "kubepool.dev/v1alpha1", "kind": "MLJob", "metadata": {"name": j.name, "namespace": j.namespace},
            "spec": spec}


CANCEL = json.dumps({"spec": {"cancel": True}})  # kubectl patch --type merge: what `kubepool cancel` sets


def probe_pod() -> dict[str, Any]:
    """A pod on the first pool's nodes: Ready once kwok manages them again after its restart (it first waits
    out the node leases its previous instance held)."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "kwok-probe", "namespace": NAMESPACES[0]},
            "spec": {"nodeSelector": {NODE_LABEL: f"dash-{POOLS[0].name}"}, "tolerations": [kwok.FAKE_TOLERATION],
                     "containers": [{"name": "probe", "image": IMAGE}]}}


def quota(pods: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "pods", "namespace": QUOTA_NAMESPACE},
            "spec": {"hard": {"pods": str(pods)}}}


def missing_ends(finished: list[tuple[dict[str, str], list[tuple[float, float]]]]) -> list[str]:
    """The ENDS_BEFORE_RUNNING no series of the finished panel shows (a rate above 0 at some point): the run
    must show jobs that never ran, as the panel promises."""
    seen = {(labels.get("phase"), labels.get("reason")) for labels, points in finished if any(v > 0 for _, v in points)}
    return [f"{phase} {reason}" for phase, reason in ENDS_BEFORE_RUNNING if (phase, reason) not in seen]


def as_list(items: list[dict[str, Any]]) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": items})
