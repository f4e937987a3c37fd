"""The operator as Kueue's controller of MLJobs (Kueue's `externalFrameworks`): what to do next for one job
labelled `kueue.x-k8s.io/queue-name`, given its Workloads. Pure; `kueuereconcile` carries the steps out.

The protocol is the one Kueue's own job integrations follow: a queued job has a Workload (one pod set per
instance group) and stays suspended until Kueue admits the Workload (condition Admitted); admitted, the job
runs (spec.suspend false); evicted (preempted, or its admission check failed), the job is suspended again and,
once its pods are gone, the Workload gives its quota back (its admission cleared) so Kueue can queue it again;
finished, the Workload is marked Finished and Kueue frees the quota. The gate is spec.suspend, the same field
a person or any other queue manager holds a job with.

While admitted, the Workload's PodsReady condition says whether every instance the job counts is ready (in head
mode: joined the Ray cluster; the job's InstancesReady condition), so Kueue's waitForPodsReady evicts and requeues
a job whose instances cannot all start. The ResourceFlavors Kueue assigned to each pod set reach that group's
instances (their nodeLabels as nodeSelector, their tolerations) through the job's placement annotation, written
with the resume and removed with the suspend, as Kueue's own integrations write the admission into the job. So does
a partial admission's count (the Workload's minCount, where the job can start with fewer): the job runs with the
instances Kueue admitted (`as_admitted`), as Kueue's batch Job integration lowers a Job's parallelism."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from kubepool import naming
from kubepool.api import JobPhase, MLJob, MLJobStatus
from kubepool.api.podsettings import SUBDOMAIN_PATTERN
from kubepool.controller import vocabulary
from kubepool.controller.builders.podsettings import kueue_placement

Obj = dict[str, Any]
ADMITTED, QUOTA_RESERVED, EVICTED, FINISHED = "Admitted", "QuotaReserved", "Evicted", "Finished"
PARTIAL_ADMISSION = "KueuePartialAdmission"  # the job's Event when Kueue admitted fewer instances than it counts
# Kueue's PodsReady condition and its reasons (sigs.k8s.io/kueue apis/kueue/v1beta2, workload_types.go).
PODS_READY, WAIT_FOR_START, WAIT_FOR_RECOVERY, STARTED, RECOVERED = (
    "PodsReady", "WaitForStart", "WaitForRecovery", "Started", "Recovered")
# A LocalQueue's name (a DNS subdomain, as Kueue's Workload.spec.queueName requires); a label value may be
# `Team_A`, which no Workload can name.
_QUEUE_NAME = re.compile(SUBDOMAIN_PATTERN)


@dataclass(frozen=True)
class Steps:
    """What one pass does, in this order."""

    invalid: str = ""  # why no Workload can be written (the job is held, and says so)
    delete: tuple[str, ...] = ()  # stale Workloads (finished by an earlier run, or of an older spec)
    create: Obj | None = None
    suspend: bool | None = None  # the job's spec.suspend to write, if it must change
    release: str = ""  # the Workload whose quota reservation to clear (evicted, and the job has stopped)
    finish: Obj | None = None  # the Finished condition to add to the job's Workload
    workload: Obj = field(default_factory=dict)  # the Workload that `release`/`finish`/`pods_ready` write to
    pods_ready: Obj | None = None  # the PodsReady condition to set on the admitted Workload

    @property
    def empty(self) -> bool:
        return not (self.invalid or self.delete or self.create or self.suspend is not None or self.release
                    or self.finish or self.pods_ready)


def condition(workload: Obj, kind: str) -> bool:
    return any(c.get("type") == kind and c.get("status") == "True"
               for c in (workload.get("status") or {}).get("conditions") or [])


def _counts(pod_sets: list[Obj]) -> list[tuple[str, int, int | None]]:
    return [(str(p.get("name")), int(p.get("count", 0)), p.get("minCount")) for p in pod_sets]


def finished_condition(job: MLJob, now: datetime) -> Obj:
    st = job.status
    ok = st is not None and st.phase is JobPhase.DONE
    return {"type": FINISHED, "status": "True", "reason": "Succeeded" if ok else "Failed",
            "message": (f"MLJob {st.phase}: {st.message or st.reason or ''}" if st is not None else "")[:32768],
            "lastTransitionTime": now.strftime("%Y-%m-%dT%H:%M:%SZ")}


@dataclass
class _Pass:
    """What the steps of one decision share: the job, its live Workloads (`current`, less the stale ones once
    `_stale` ran) and the Workloads to delete."""

    job: MLJob
    wanted: Obj | None
    now: datetime
    finished: bool
    current: list[Obj]
    delete: tuple[str, ...] = ()


def decide(job: MLJob, workloads: list[Obj], wanted: Obj | None, now: datetime) -> Steps:
    """The next steps for `job` (labelled with a LocalQueue) whose Workloads (owned by it) are `workloads`;
    `wanted` is the Workload the job needs now (None when it cannot be built yet: a pool not there). The first of
    DECIDE_STEPS that answers decides; else only the stale Workloads go."""
    st = job.status
    p = _Pass(job, wanted, now, finished=st is not None and st.phase is not None and st.phase.finished,
              current=[w for w in workloads if not w.get("metadata", {}).get("deletionTimestamp")])
    for step in DECIDE_STEPS:
        steps = step(p)
        if steps is not None:
            return steps
    return Steps(delete=p.delete)


def _invalid_queue(p: _Pass) -> Steps | None:
    """A label that names no possible LocalQueue: the job is held and says why."""
    queue = queue_of(p.job)
    if p.finished or (len(queue) <= 253 and _QUEUE_NAME.match(queue)):
        return None
    return Steps(invalid=f"label {naming.LABEL_KUEUE_QUEUE}={queue!r} is not a LocalQueue name (lower case "
                         "letters, digits, '-' and '.'): the job is held and no Workload is written",
                 suspend=None if p.job.spec.suspend else True)


def _finished(p: _Pass) -> Steps | None:
    """A finished job's live Workload is Finished, so Kueue's next job starts."""
    if not p.finished:
        return None
    live = [w for w in p.current if not condition(w, FINISHED)]
    return Steps(finish=finished_condition(p.job, p.now), workload=live[0]) if live else Steps()


def _stale(p: _Pass) -> Steps | None:
    """A Workload finished by an earlier run of this job (it was resumed since), or one whose pod sets no longer
    match the job (resized while it waited) and that holds no quota yet: replaced."""
    wanted = p.wanted
    stale = [w for w in p.current if condition(w, FINISHED) or (
        wanted is not None and not condition(w, QUOTA_RESERVED)
        and _counts(w.get("spec", {}).get("podSets") or []) != _counts(wanted["spec"]["podSets"]))]
    p.current = [w for w in p.current if w not in stale]
    p.delete = tuple(w["metadata"]["name"] for w in stale)
    return None


def _create(p: _Pass) -> Steps | None:
    """No Workload left: the one the job needs now. Kueue's jobs never run unadmitted: a job that is not
    suspended (nothing suspended it at creation) is."""
    if p.current:
        return None
    hold = None if p.job.spec.suspend else True
    if p.wanted is not None and p.wanted["metadata"]["name"] in p.delete:
        return Steps(delete=p.delete, suspend=hold)  # the new one once the old one is gone
    return Steps(delete=p.delete, create=p.wanted, suspend=hold)


def _admitted(p: _Pass) -> Steps | None:
    """Admitted and not evicted: the job runs, and its Workload's PodsReady follows its instances."""
    wl = p.current[0]
    if not condition(wl, ADMITTED) or condition(wl, EVICTED):
        return None
    ready = pods_ready_condition(p.job, wl, p.now)
    return Steps(delete=p.delete, suspend=False if p.job.spec.suspend else None, pods_ready=ready,
                 workload=wl if ready else {})


def _hold(p: _Pass) -> Steps | None:
    """Not admitted (or evicted): the job is suspended."""
    return None if p.job.spec.suspend else Steps(delete=p.delete, suspend=True)


def _release(p: _Pass) -> Steps | None:
    """Evicted, and the job has stopped: its Workload's quota reservation is cleared, so Kueue admits it again."""
    wl, st = p.current[0], p.job.status
    stopped = st is not None and st.reason == vocabulary.SUSPENDED
    if condition(wl, EVICTED) and stopped and (condition(wl, QUOTA_RESERVED) or (wl.get("status") or {}).get("admission")):
        return Steps(delete=p.delete, release=wl["metadata"]["name"], workload=wl)
    return None


# The steps, in order of precedence: each returns the decision, or None to leave it to the next.
DECIDE_STEPS: tuple[Callable[[_Pass], Steps | None], ...] = (
    _invalid_queue, _finished, _stale, _create, _admitted, _hold, _release)


def _ready(st: MLJobStatus | None) -> bool:
    return st is not None and any(c.type == vocabulary.INSTANCES_READY_TYPE and c.status == "True" for c in st.conditions or [])


def _instances_ready(job: MLJob) -> bool:
    return _ready(job.status)


def instances_ready_changed(prev: MLJobStatus | None, new: MLJobStatus) -> bool:
    """Whether the pass changed the job's InstancesReady (its Workload's PodsReady follows)."""
    return _ready(prev) != _ready(new)


def pods_ready_condition(job: MLJob, workload: Obj, now: datetime) -> Obj | None:
    """The PodsReady condition of the admitted job's Workload, as Kueue's own job integrations write it
    (jobframework's generatePodsReadyCondition): True once every instance the job counts is ready (the job's
    InstancesReady condition: in head mode, joined its Ray cluster), reason Started, or Recovered after a
    WaitForRecovery; else False, WaitForStart until it first was True, WaitForRecovery after. None when the
    Workload already says so (type, status and reason), so an unchanged one is not written again."""
    old = next((c for c in (workload.get("status") or {}).get("conditions") or [] if c.get("type") == PODS_READY), None)
    was = (old or {}).get("reason")
    if _instances_ready(job):
        status, reason = "True", RECOVERED if was in (WAIT_FOR_RECOVERY, RECOVERED) else STARTED
        message = "All pods reached readiness and the workload is running"
    elif old is not None and (old.get("status") == "True" or was == WAIT_FOR_RECOVERY):
        status, reason, message = "False", WAIT_FOR_RECOVERY, "At least one pod has failed, waiting for recovery"
    else:
        status, reason, message = "False", WAIT_FOR_START, "Not all pods are ready or succeeded"
    if old is not None and (old.get("status"), was) == (status, reason):
        return None
    generation = workload.get("metadata", {}).get("generation")
    return {"type": PODS_READY, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
            **({"observedGeneration": generation} if generation is not None else {})}


def with_condition(workload: Obj, cond: Obj) -> Obj:
    """The Workload's status with `cond` in place of its condition of that type."""
    current = workload.get("status") or {}
    others = [c for c in current.get("conditions") or [] if c.get("type") != cond["type"]]
    return {**current, "conditions": [*others, cond]}


def flavors_of(workload: Obj) -> dict[str, list[str]]:
    """The ResourceFlavors Kueue assigned to each pod set of the admitted Workload (pod set name: flavor names)."""
    admission = (workload.get("status") or {}).get("admission") or {}
    return {str(a.get("name")): list(dict.fromkeys(str(f) for f in (a.get("flavors") or {}).values()))
            for a in admission.get("podSetAssignments") or []}


def placement(workload: Obj, flavors: dict[str, Obj], pools_selector: dict[str, dict[str, str]]) -> dict[str, Obj]:
    """Each pod set's nodeSelector and tolerations from its assigned ResourceFlavors (`flavors`: name: object),
    as Kueue's integrations apply an admission (podset.FromAssignment, then Merge). Raises ValueError, as Kueue
    refuses to start such a job, when a flavor's nodeLabels contradict each other or the group's pool's
    nodeSelector (`pools_selector`: pod set name: the pool's nodeSelector), when a flavor is missing, or when Kueue
    admitted fewer instances than a pod set's minCount (its count, where it has none). A partial admission (fewer,
    down to minCount) adds the pod set's admitted `count`, the instances the group runs with (Kueue's
    podset.FromAssignment: the assignment's count, else the pod set's)."""
    pod_sets = {str(p.get("name")): p for p in workload.get("spec", {}).get("podSets") or []}
    out: dict[str, Obj] = {}
    for a in ((workload.get("status") or {}).get("admission") or {}).get("podSetAssignments") or []:
        name = str(a.get("name"))
        full = int((pod_sets.get(name) or {}).get("count", 0))
        count = full if a.get("count") is None else int(a["count"])
        least = (pod_sets.get(name) or {}).get("minCount")
        if count < (full if least is None else int(least)):
            raise ValueError(f"Kueue admitted {count} of the {full} instances of group {name}: "
                             + ("an MLJob is admitted whole where its Workload sets no minCount" if least is None
                                else f"fewer than the pod set's minCount {least}"))
        selector = dict(pools_selector.get(name) or {})
        tolerations: list[Obj] = []
        for flavor in flavors_of(workload).get(name, []):
            spec = (flavors.get(flavor) or {}).get("spec")
            if spec is None:
                raise ValueError(f"ResourceFlavor {flavor} (assigned to group {name}) not found")
            for k, v in (spec.get("nodeLabels") or {}).items():
                if selector.setdefault(k, v) != v:
                    raise ValueError(f"ResourceFlavor {flavor}'s nodeLabel {k}={v} contradicts the group {name}'s "
                                     f"nodeSelector {k}={selector[k]}")
            tolerations += [t for t in spec.get("tolerations") or [] if t not in tolerations]
        extra = {k: v for k, v in selector.items() if k not in (pools_selector.get(name) or {})}
        short = {"count": count} if count < full else {}
        if extra or tolerations or short:
            out[name] = {**({"nodeSelector": extra} if extra else {}), **({"tolerations": tolerations} if tolerations else {}),
                         **short}
    return out


def partial_admission(workload: Obj, placed: dict[str, Obj]) -> str:
    """What the job's Event says when Kueue admitted fewer instances than it counts ("" when it admitted all)."""
    full = {str(p.get("name")): int(p.get("count", 0)) for p in workload.get("spec", {}).get("podSets") or []}
    cut = {name: int(p["count"]) for name, p in placed.items() if "count" in p}
    if not cut:
        return ""
    groups = ", ".join(f"{n} of the {full.get(name, 0)} instances of group {name}" for name, n in cut.items())
    runs = sum(cut.get(name, n) for name, n in full.items())
    return (f"Kueue admitted {groups} (partial admission, down to its Workload's minCount): the job runs with "
            f"{runs} instances")


def as_admitted(job: MLJob) -> MLJob:
    """The job as Kueue admitted it: a group that its admission gave fewer instances than it counts (partial
    admission; the count in its placement annotation, written with the resume) runs that many, never more. As
    Kueue's batch Job integration lowers a Job's parallelism to the admitted count (RunWithPodSetsInfo) and
    restores it with the suspend, but the job's own spec is left as written: the count goes with the annotation
    when the job is suspended, so a re-admission runs with its own count. minInstances is lowered with it where
    it was raised past the admitted count after the admission. The job itself where nothing is cut."""
    if not queue_of(job):
        return job
    spec = job.spec
    if spec.instance_groups:
        groups = [g.model_copy(update={"instance_count": cap})
                  if (cap := _admitted_count(job, g.name)) is not None and cap < g.instance_count else g
                  for g in spec.instance_groups]
        if all(g is h for g, h in zip(groups, spec.instance_groups, strict=True)):
            return job
        cut = spec.model_copy(update={"instance_groups": groups})
    else:
        cap = _admitted_count(job, naming.DEFAULT_GROUP)
        if cap is None or cap >= spec.resolved_target():
            return job
        cut = spec.model_copy(update={"target_instances": cap})
    least = min(spec.resolved_min(), cut.resolved_target())
    return job.model_copy(update={"spec": cut.model_copy(update={"min_instances": least})})


def _admitted_count(job: MLJob, group: str) -> int | None:
    count = kueue_placement(job, naming.dns_label(group)).get("count")
    return count if isinstance(count, int) and not isinstance(count, bool) and count >= 1 else None


def released_status(workload: Obj, now: datetime) -> Obj:
    """The Workload's status after its job stopped on eviction: no admission, QuotaReserved and Admitted false
    (what Kueue's own integrations write, so its queue takes the Workload back)."""
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    generation = workload.get("metadata", {}).get("generation")
    conditions = [c for c in (workload.get("status") or {}).get("conditions") or []
                  if c.get("type") not in (QUOTA_RESERVED, ADMITTED)]
    for kind, reason in ((QUOTA_RESERVED, "Pending"), (ADMITTED, "NoReservation")):
        cond = {"type": kind, "status": "False", "reason": reason, "lastTransitionTime": stamp,
                "message": "the job stopped after its eviction"}
        conditions.append(cond | ({"observedGeneration": generation} if generation is not None else {}))
    return {**(workload.get("status") or {}), "admission": None, "conditions": conditions}


def queue_of(job: MLJob) -> str:
    return str((job.metadata.get("labels") or {}).get(naming.LABEL_KUEUE_QUEUE) or "")
