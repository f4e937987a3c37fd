"""The small workload behind the dashboard's picture: three ComputePools on kwok fake nodes, thirteen short
MLJobs in three waves (more than the pools hold, so some queue), two that fail, and one in a namespace whose
ResourceQuota refuses its pods until it is raised (the API errors the operator retries). Two failures in one
pool, not one: a {pool, phase} series starts at its first observation, so rate() sees the second only.
kwok runs no containers: stages end each head pod after a random 10-45 s (bench.cluster.head_exit_stage)."""

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


JOBS = (
    JobSpec("train-1", "train", 2, 0), JobSpec("train-2", "train", 2, 0), JobSpec("batch-1", "batch", 1, 0),
    JobSpec("batch-2", "batch", 1, 0), JobSpec("batch-3", "batch", 1, 0), JobSpec("eval-1", "eval", 1, 0),
    JobSpec("train-3", "train", 1, 40), JobSpec("eval-2", "eval", 1, 40), JobSpec("eval-3", "eval", 1, 40, fails=True),
    JobSpec("batch-4", "batch", 2, 40, namespace=QUOTA_NAMESPACE),
    JobSpec("train-4", "train", 3, 90), JobSpec("batch-5", "batch", 1, 90), JobSpec("eval-4", "eval", 1, 90, fails=True),
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
    return {"apiVersion": "kubepool.dev/v1alpha1", "kind": "MLJob", "metadata": {"name": j.name, "namespace": j.namespace},
            "spec": {"computePool": j.pool, "targetInstances": j.instances, "image": IMAGE,
                     "entrypoint": {"command": ["true"]},
                     "env": [{"name": FAIL_ENV if j.fails else SUCCEED_ENV, "value": "true"}]}}


def probe_pod() -> dict[str, Any]:
    """A pod on the first pool's nodes: Ready once kwok manages them again after its restart (it first waits
    out the node leases its previous instance held)."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "kwok-probe", "namespace": NAMESPACES[0]},
            "spec": {"nodeSelector": {NODE_LABEL: f"dash-{POOLS[0].name}"}, "tolerations": [kwok.FAKE_TOLERATION],
                     "containers": [{"name": "probe", "image": IMAGE}]}}


def quota(pods: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "pods", "namespace": QUOTA_NAMESPACE},
            "spec": {"hard": {"pods": str(pods)}}}


def as_list(items: list[dict[str, Any]]) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": items})
