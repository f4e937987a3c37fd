"""Warm capacity of a ComputePool (Snowflake's MIN_NODES): how many placeholder pods the pool should have,
the pods themselves and their PriorityClass. A placeholder is one instance's slot (the pool's node selector,
tolerations, resources and one-per-node anti-affinity) held by a sleeping process of the runtime image, at a
negative priority: the real scheduler pre-empts it for any instance pod, and a cluster autoscaler keeps its
node up. Pure."""

from __future__ import annotations

import hashlib
import json

from kubepool import naming, objectmeta
from kubepool.api import ComputePool
from kubepool.controller.builders.common import Obj, pool_image
from kubepool.controller.builders.pods import _affinity, _resources, _security
from kubepool.controller.config import OperatorConfig

CONTAINER = "placeholder"
# Sleeps until killed; its only work is holding the node (and having pulled the runtime image onto it).
SLEEP = "import signal; signal.pause()"


def desired_placeholders(pool: ComputePool, in_use: int, *, suspended: bool, enabled: bool = True) -> int:
    """Placeholders the pool should have: its warm nodes (minNodes, never above maxNodes) not already taken by
    instances in use. None while the pool is suspended (by hand or auto-suspend) or warm capacity is off."""
    if not enabled or suspended:
        return 0
    return max(0, min(pool.spec.min_nodes, pool.spec.max_nodes) - in_use)


def build_placeholder_priority_class() -> Obj:
    """Below the default priority (0) of instance pods, so any instance pre-empts a placeholder; Never: a
    placeholder itself pre-empts nothing, it waits."""
    return {
        "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
        "metadata": {"name": naming.PLACEHOLDER_PRIORITY_CLASS,
                     "labels": {naming.LABEL_MANAGED_BY: naming.MANAGED_BY}},
        "value": naming.PLACEHOLDER_PRIORITY, "preemptionPolicy": "Never", "globalDefault": False,
        "description": "kubepool warm-capacity placeholders (ComputePool minNodes): pre-empted by any instance.",
    }


def build_placeholder_pod(pool: ComputePool, index: int, *, namespace: str, cfg: OperatorConfig) -> Obj:
    """Placeholder `index` of the pool, in `namespace`, owned by the (cluster-scoped) pool so that garbage
    collection removes it with the pool."""
    name = objectmeta.name(pool)
    pod_sc, container_sc = _security(cfg.run_as_user)
    container: Obj = {
        "name": CONTAINER,
        "image": pool_image(pool, cfg.default_image, cfg.gpu_image),
        "imagePullPolicy": cfg.image_pull_policy,
        "command": [cfg.python, "-c", SLEEP],
        "resources": _resources(pool, cfg),
        "securityContext": container_sc,
    }
    spec: Obj = {
        "restartPolicy": "Always",
        "priorityClassName": naming.PLACEHOLDER_PRIORITY_CLASS,
        "containers": [container],
        "securityContext": pod_sc,
        "affinity": _affinity(name),  # one slot per node, shared with the pool's instances
        "terminationGracePeriodSeconds": 0,  # nothing to save: an instance waiting for its node gets it at once
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
    }
    if pool.spec.node_selector:
        spec["nodeSelector"] = dict(pool.spec.node_selector)
    if pool.spec.tolerations:
        spec["tolerations"] = [t.wire() for t in pool.spec.tolerations]
    owner = {"apiVersion": naming.API_VERSION, "kind": naming.POOL_KIND, "name": name,
             "uid": objectmeta.uid(pool), "controller": True, "blockOwnerDeletion": False}
    meta: Obj = {"name": naming.placeholder_pod_name(name, index), "namespace": namespace,
                 "labels": naming.placeholder_labels(name), "ownerReferences": [owner],
                 "annotations": {naming.ANNOTATION_PLACEHOLDER_SPEC: spec_hash(spec)}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def spec_hash(spec: Obj) -> str:
    """A short digest of a placeholder's pod spec: pod specs are immutable, so a placeholder whose pool changed
    (resources, selector, tolerations) or whose operator settings changed is replaced, not kept."""
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


def build_placeholder_pods(pool: ComputePool, count: int, *, namespace: str, cfg: OperatorConfig) -> list[Obj]:
    """The pool's `count` placeholders: always indexes 0..count-1, so a lower count deletes the highest ones."""
    return [build_placeholder_pod(pool, i, namespace=namespace, cfg=cfg) for i in range(count)]
