"""Kueue's Workload of an MLJob: one pod set per instance group, each with the group's instance count and the
pod template Kueue reads its quota from (the instance's requests, node selector and tolerations, as the
operator will create the pods), and the minCount that lets Kueue admit fewer instances (partial admission)
where the job can start with fewer. Pure."""

from __future__ import annotations

from collections.abc import Sequence

from kubepool import naming
from kubepool.api import ComputePool, MLJob
from kubepool.controller.builders.common import JobRef, Obj, Placement, laid_out, pool_named
from kubepool.controller.builders.pods import build_instance_pod
from kubepool.controller.config import OperatorConfig

# What Kueue needs of an instance pod to count its quota and match flavors; the rest of the pod stays ours.
_TEMPLATE_SPEC_KEYS = ("nodeSelector", "tolerations", "priorityClassName")


def pod_sets(job: MLJob, pools: dict[str, ComputePool], cfg: OperatorConfig,
             layout: Sequence[Placement] | None = None) -> list[Obj]:
    """One pod set per group, in contract order (the head's group first): name, count and template."""
    out: dict[str, Obj] = {}
    for inst in laid_out(job, layout):
        name = naming.dns_label(inst.group)
        if name in out:
            out[name]["count"] += 1
            continue
        pod = build_instance_pod(job, pool_named(pools, inst.pool), inst, attempt=0, cfg=cfg)
        spec = pod["spec"]
        [container] = spec["containers"]
        template = {"containers": [{"name": container["name"], "image": container["image"],
                                    "resources": container["resources"]}],
                    **{k: spec[k] for k in _TEMPLATE_SPEC_KEYS if spec.get(k)}}
        out[name] = {"name": name, "count": 1, "template": {"spec": template}}
    sets = list(out.values())
    least = min_count(job, layout)
    if least is not None:
        sets[-1]["minCount"] = least
    return sets


def min_count(job: MLJob, layout: Sequence[Placement] | None = None) -> int | None:
    """The minCount of the Workload's last pod set (None: the job is admitted whole). A job of N instances and
    minInstances M < N may start with any count in [M, N] of its instances' prefix (the head first), as the
    pools admit it; Kueue reduces at most one pod set (its Workload webhook: "at most one podSet can use
    minCount"), to at least 1. So the instances Kueue may leave out are the layout's tail that belongs to its last
    pod set, at most N - M of them and never that pod set's last instance."""
    placed = laid_out(job, layout)
    if not placed:
        return None
    last = naming.dns_label(placed[-1].group)
    tail = next((n for n, p in enumerate(reversed(placed)) if naming.dns_label(p.group) != last), len(placed))
    in_last = sum(1 for p in placed if naming.dns_label(p.group) == last)
    spare = min(len(placed) - job.spec.resolved_min(), tail, in_last - 1)
    return in_last - spare if spare > 0 else None


def build_workload(job: MLJob, pools: dict[str, ComputePool], cfg: OperatorConfig, queue: str,
                   layout: Sequence[Placement] | None = None) -> Obj:
    """The Workload Kueue admits (or not) for `job`; owned by the job, so it goes with it."""
    ref = JobRef.of(job)
    meta = ref.metadata(naming.workload_name(ref.name, ref.uid), **{naming.LABEL_KUEUE_JOB_UID: ref.uid})
    meta["labels"][naming.LABEL_KUEUE_QUEUE] = queue
    return {"apiVersion": naming.KUEUE_API_VERSION, "kind": naming.WORKLOAD_KIND, "metadata": meta,
            "spec": {"queueName": queue, "podSets": pod_sets(job, pools, cfg, layout)}}
