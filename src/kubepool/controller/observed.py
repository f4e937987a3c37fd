"""Small, typed views of what the operator watches (pods, nodes), built from raw bodies by the index
handlers. Pure: the status and admission functions read these, never raw API objects."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kubepool import naming
from kubepool.api.kuberay import kuberay_instance_id

SUCCEEDED, FAILED, PENDING, RUNNING = "Succeeded", "Failed", "Pending", "Running"
# Every field of a pod's spec that PodView and PlaceholderView read: the operator's watch keeps no other
# (kopf_fence.loads), since a pod's spec is most of its body (tests/operator/unit/test_operator_observed.py
# checks the views read nothing else).
POD_SPEC_READ = ("nodeName", "hostname", "subdomain")


@dataclass(frozen=True)
class PodView:
    """One instance pod as observed."""

    name: str
    instance_id: int
    attempt: int
    job_uid: str = ""
    phase: str = PENDING
    ready: bool = False
    node: str | None = None
    deleting: bool = False
    exit_code: int | None = None
    message: str | None = None
    finalizers: tuple[str, ...] = ()
    group: str = ""  # the instance group as a DNS label (naming.dns_label), as in the pod's label
    uid: str = ""
    ip: str | None = None
    hostname: str = ""  # spec.hostname and spec.subdomain: the pod's DNS record under a headless Service
    subdomain: str = ""
    created: str = ""  # metadata.creationTimestamp as written (parsed only where needed: plan._endpoints)
    unschedulable: bool = False  # PodScheduled False: the scheduler (or a scheduling gate) holds it off a node
    finished: str = ""  # its container's terminated.finishedAt as written (jobsteps.workers_deadline parses it)

    @property
    def is_head(self) -> bool:
        return self.instance_id == 0

    @property
    def terminated(self) -> bool:
        return self.phase in (SUCCEEDED, FAILED)

    @classmethod
    def of(cls, pod: Mapping[str, Any]) -> PodView:
        meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
        labels = meta.get("labels") or {}
        conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
        exit_code, message, finished = None, None, ""
        for cs in status.get("containerStatuses") or []:
            state = cs.get("state") or {}
            if "terminated" in state:
                term = state["terminated"]
                exit_code, message = term.get("exitCode"), term.get("message") or term.get("reason")
                finished = term.get("finishedAt") or ""
            elif "waiting" in state:
                message = (state["waiting"] or {}).get("reason")
        if message is None and status.get("phase") == PENDING:
            message = next((c.get("message") for c in status.get("conditions") or []
                            if c.get("type") == "PodScheduled" and c.get("status") == "False"), None)
        return cls(
            name=meta.get("name", ""),
            instance_id=instance_id_of(labels, meta.get("annotations")),
            attempt=int(labels.get(naming.LABEL_ATTEMPT, "0")),
            job_uid=labels.get(naming.LABEL_JOB_UID, ""),
            phase=status.get("phase") or PENDING,
            ready=conditions.get("Ready") == "True",
            node=spec.get("nodeName"),
            deleting=bool(meta.get("deletionTimestamp")),
            exit_code=exit_code,
            message=message,
            finalizers=tuple(meta.get("finalizers") or ()),
            group=labels.get(naming.LABEL_GROUP, ""),
            uid=meta.get("uid", ""),
            ip=status.get("podIP") or None,
            hostname=spec.get("hostname") or "",
            subdomain=spec.get("subdomain") or "",
            created=meta.get("creationTimestamp") or "",
            unschedulable=conditions.get("PodScheduled") == "False",
            finished=finished,
        )


def instance_id_of(labels: Mapping[str, str], annotations: Mapping[str, str] | None = None) -> int:
    """The pod backend labels each pod with its instance id; a KubeRay worker's derives from its labels
    (api.kuberay.kuberay_instance_id). -1: none."""
    if naming.LABEL_INSTANCE in labels:
        return int(labels[naming.LABEL_INSTANCE])
    kuberay = kuberay_instance_id(labels, annotations)
    return -1 if kuberay is None else kuberay


@dataclass(frozen=True)
class Taint:
    key: str
    effect: str
    value: str = ""


@dataclass(frozen=True)
class NodeView:
    """One node as the pool status needs it."""

    name: str
    ready: bool
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False

    @classmethod
    def of(cls, node: Mapping[str, Any]) -> NodeView:
        meta, spec, status = node.get("metadata") or {}, node.get("spec") or {}, node.get("status") or {}
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
        taints = tuple(Taint(t.get("key", ""), t.get("effect", ""), t.get("value") or "") for t in spec.get("taints") or [])
        return cls(name=meta.get("name", ""), ready=ready, labels=dict(meta.get("labels") or {}), taints=taints,
                   unschedulable=bool(spec.get("unschedulable")))


@dataclass(frozen=True)
class PlaceholderView:
    """One warm-capacity placeholder pod of a ComputePool (ComputePool minNodes) as observed."""

    name: str
    namespace: str
    pool: str
    owner_uid: str = ""  # the ComputePool's uid (owner reference): a placeholder of a deleted namesake is not ours
    phase: str = PENDING
    node: str | None = None
    deleting: bool = False
    spec_hash: str = ""  # naming.ANNOTATION_PLACEHOLDER_SPEC

    @property
    def warm(self) -> bool:
        """Holds a node: Running and not being deleted (a pre-empted one is deleted by the scheduler)."""
        return self.phase == RUNNING and not self.deleting and self.node is not None

    @classmethod
    def of(cls, pod: Mapping[str, Any]) -> PlaceholderView:
        meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
        owner = next((o.get("uid", "") for o in meta.get("ownerReferences") or []
                      if o.get("kind") == naming.POOL_KIND), "")
        return cls(name=meta.get("name", ""), namespace=meta.get("namespace", "default"),
                   pool=(meta.get("labels") or {}).get(naming.LABEL_POOL, ""), owner_uid=owner,
                   phase=status.get("phase") or PENDING, node=spec.get("nodeName"),
                   deleting=bool(meta.get("deletionTimestamp")),
                   spec_hash=(meta.get("annotations") or {}).get(naming.ANNOTATION_PLACEHOLDER_SPEC, ""))
