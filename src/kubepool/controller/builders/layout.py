"""PURE: which global instance id each instance of a job holds. A job never resized has consecutive ids in group
order (the head is the first group's first). A resize (scale_cluster, `kubectl scale`) keeps every existing
instance's id: a group that grows takes new ids past every id handed out so far, one that shrinks gives up its
highest ranks. The result is recorded in status.instanceLayout (only once it differs from the consecutive ids),
and every reader derives the same layout from the spec and the status it holds, before or after that write."""

from __future__ import annotations

from collections.abc import Sequence

from kubepool import naming
from kubepool.api import GroupInstanceIds, InstanceLayout, MLJob, MLJobStatus

Ids = dict[str, list[int]]  # group -> its instance ids in rank order


def group_counts(job: MLJob) -> list[tuple[str, str, int]]:
    """(group, pool, instance count) of every group, in spec order."""
    spec = job.spec
    if spec.instance_groups:
        return [(g.name, g.compute_pool, g.instance_count) for g in spec.instance_groups]
    return [(naming.DEFAULT_GROUP, spec.compute_pool or "", spec.resolved_target())]


def consecutive(counts: Sequence[tuple[str, int]]) -> Ids:
    out: Ids = {}
    first = 0
    for group, count in counts:
        out[group] = list(range(first, first + count))
        first += count
    return out


def _recorded(st: MLJobStatus | None) -> tuple[Ids, int]:
    """The ids the status holds and the next free one. Without a recorded layout the status's instances are
    the granted prefix of the consecutive ids (instances never granted had no pod: their ids are free)."""
    if st is None:
        return {}, 0
    if st.instance_layout is not None:
        return {g.group: list(g.ids) for g in st.instance_layout.groups}, st.instance_layout.next_id
    ids: Ids = {}
    for inst in sorted(st.instances, key=lambda i: (i.group, i.rank_in_group)):
        ids.setdefault(inst.group, []).append(inst.instance_id)
    return ids, max((i.instance_id + 1 for i in st.instances), default=0)


def reconcile(counts: Sequence[tuple[str, int]], held: Ids, next_id: int) -> tuple[Ids, int]:
    """The ids for `counts` given those `held`: each group keeps its lowest ranks up to its count, then the groups
    short of their count take new ids, in group order, from past every id ever handed out."""
    nxt = max([next_id, *(i + 1 for ids in held.values() for i in ids)])
    out: Ids = {group: list(held.get(group, []))[:count] for group, count in counts}
    for group, count in counts:
        while len(out[group]) < count:
            out[group].append(nxt)
            nxt += 1
    return out, nxt


def instance_ids(job: MLJob, st: MLJobStatus | None = None) -> Ids:
    """Each group's instance ids for the job's spec, from `st` (default the job's own status)."""
    return _layout(job, st)[0]


def _layout(job: MLJob, st: MLJobStatus | None) -> tuple[Ids, int]:
    counts = [(g, n) for g, _, n in group_counts(job)]
    held, nxt = _recorded(st if st is not None else job.status)
    return reconcile(counts, held, nxt)


def layout_record(job: MLJob, st: MLJobStatus | None = None) -> InstanceLayout | None:
    """What status.instanceLayout records for the job: None while its ids are the consecutive ones and none was
    ever given up (a job never resized, or only grown at its last group), so such a job's status is as before."""
    ids, nxt = _layout(job, st)
    counts = [(g, n) for g, _, n in group_counts(job)]
    if ids == consecutive(counts) and nxt == sum(n for _, n in counts):
        return None
    return InstanceLayout(groups=[GroupInstanceIds(group=g, ids=ids[g]) for g, _ in counts], next_id=nxt)
