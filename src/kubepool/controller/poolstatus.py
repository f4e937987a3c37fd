"""PURE: a ComputePool's status from its nodes, the jobs' claims, its placeholders and the time; which pools a
node change can move; whether a new pool status must be written. No I/O, no clock."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from kubepool import objectmeta
from kubepool.api import ComputePool, ComputePoolStatus, Condition, ConditionStatus, PoolPhase
from kubepool.controller import vocabulary
from kubepool.controller.admission import Claim, usage
from kubepool.controller.builders.placeholders import desired_placeholders
from kubepool.controller.observed import NodeView, PlaceholderView


def node_matches(pool: ComputePool, node: NodeView) -> bool:
    """The node carries the pool's selector labels and every NoSchedule/NoExecute taint is tolerated."""
    if any(node.labels.get(k) != v for k, v in pool.spec.node_selector.items()):
        return False
    for taint in node.taints:
        if taint.effect not in ("NoSchedule", "NoExecute"):
            continue
        if not any((t.key in (None, "") and t.operator == "Exists") or (t.key == taint.key and (
                t.operator == "Exists" or (t.value or "") == taint.value)) and t.effect in (None, taint.effect)
                   for t in pool.spec.tolerations):
            return False
    return True


def pools_affected_by_node(pools: Mapping[str, ComputePool], old: NodeView | None,
                           new: NodeView | None) -> list[str]:
    """The pools whose status a node change can move: those the node matched before or matches now; none when
    nothing a pool reads changed (heartbeats and status-only updates)."""
    if old == new:
        return []
    return [name for name, p in pools.items() if any(n is not None and node_matches(p, n) for n in (old, new))]


# Pool condition reasons.
AUTO_SUSPENDED = "AutoSuspended"


def _pool_condition(prev: Mapping[str, Condition], ctype: str, true: bool, reason: str, message: str,
                    now: datetime, generation: int | None) -> Condition:
    """A pool condition that keeps its transition time while its status is unchanged."""
    status = ConditionStatus.TRUE if true else ConditionStatus.FALSE
    before = prev.get(ctype)
    since = before.last_transition_time if before is not None and before.status == status else now
    return Condition(type=ctype, status=status, reason=reason, message=message, observed_generation=generation,
                     last_transition_time=since)


def _stamp(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class _PoolPass:
    """What the steps of one pool status computation read (the inputs) and fill in (`out`: the new status's
    fields). `before` is the previous status."""

    pool: ComputePool
    nodes: Iterable[NodeView]
    claims: Iterable[Claim]
    placeholders: Iterable[PlaceholderView]
    now: datetime
    warm_capacity: bool
    before: ComputePoolStatus
    mine: list[Claim] = field(default_factory=list)  # the claims on this pool
    auto_suspended: bool = False
    wanted: int = 0  # placeholders the pool should have
    out: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return objectmeta.name(self.pool)


def compute_pool_status(pool: ComputePool, nodes: Iterable[NodeView], claims: Iterable[Claim],
                        now: datetime, placeholders: Iterable[PlaceholderView] = (), *,
                        warm_capacity: bool = True) -> ComputePoolStatus:
    """The pool's status, from the named steps below in order. `pool.status` is the previous one: idleSince
    carries over from it, so the auto-suspend timer survives operator restarts. `placeholders`: the
    warm-capacity pods observed."""
    p = _PoolPass(pool, nodes, claims, placeholders, now, warm_capacity, pool.status or ComputePoolStatus())
    for step in POOL_STEPS:
        step(p)
    return ComputePoolStatus(**p.out, observed_generation=objectmeta.generation(pool))


def _ready_nodes(p: _PoolPass) -> None:
    p.out["ready_nodes"] = sum(1 for n in p.nodes if n.ready and not n.unschedulable and node_matches(p.pool, n))


def _jobs(p: _PoolPass) -> None:
    """The instances its admitted jobs hold, and its running and queued jobs."""
    p.mine = [c for c in p.claims if p.name in c.pools]
    running = sum(1 for c in p.mine if not c.waiting)
    p.out.update(instances_in_use=usage(p.mine)[p.name], running_jobs=running, queued_jobs=len(p.mine) - running)


def _phase(p: _PoolPass) -> None:
    """Idle: no admitted and no queued job. A queued job counts as activity: it resumes an auto-suspended pool
    (Snowflake's AUTO_RESUME), and admission does not refuse auto-suspended pools."""
    idle_since = None if p.mine else (p.before.idle_since or p.now)
    after = p.pool.spec.auto_suspend_seconds
    p.auto_suspended = bool(after) and idle_since is not None and p.now >= idle_since + timedelta(seconds=after or 0)
    if p.pool.spec.suspend or p.auto_suspended:
        phase = PoolPhase.SUSPENDED
    else:
        phase = PoolPhase.ACTIVE if p.out["instances_in_use"] else PoolPhase.IDLE
    p.out.update(idle_since=idle_since, phase=phase)


def _warm(p: _PoolPass) -> None:
    """The warm capacity: the pool's placeholders running (its own, by owner uid), and how many it wants."""
    uid = objectmeta.uid(p.pool)
    p.out["warm_instances"] = sum(1 for w in p.placeholders if w.pool == p.name and w.warm and (
        not uid or not w.owner_uid or w.owner_uid == uid))
    p.wanted = desired_placeholders(p.pool, p.out["instances_in_use"], suspended=p.out["phase"] is PoolPhase.SUSPENDED,
                                    enabled=p.warm_capacity)


def _conditions(p: _PoolPass) -> None:
    """Ready, Suspended and Warm, each keeping its transition time while unchanged."""
    pool, now, generation = p.pool, p.now, objectmeta.generation(p.pool)
    ready, in_use, warm, wanted = p.out["ready_nodes"], p.out["instances_in_use"], p.out["warm_instances"], p.wanted
    prev = {c.type: c for c in p.before.conditions}
    if pool.spec.suspend:
        suspended = (True, vocabulary.SUSPENDED, "spec.suspend is set: no new jobs are admitted; running jobs finish")
    elif p.auto_suspended:
        idle_since = p.out["idle_since"]
        assert idle_since is not None
        suspended = (True, AUTO_SUSPENDED,
                     f"idle since {_stamp(idle_since)}, over autoSuspendSeconds={pool.spec.auto_suspend_seconds}: "
                     "warm nodes released; a new job resumes the pool")
    else:
        suspended = (False, "Active" if p.mine else "Idle", "")
    if not p.warm_capacity:
        warm_cond = (False, "WarmCapacityOff", "warm capacity is turned off in the operator's configuration")
    else:
        warm_cond = (warm >= wanted, "WarmNodesHeld" if warm >= wanted else "WarmingUp",
                     f"{warm} of {wanted} placeholder(s) running (minNodes={pool.spec.min_nodes}, {in_use} in use)")
    p.out["conditions"] = [
        _pool_condition(prev, "Ready", bool(ready), "NodesReady" if ready else "NoReadyNodes",
                        f"{ready} ready node(s) match the pool; {in_use} of {pool.spec.max_nodes} instances in use",
                        now, generation),
        _pool_condition(prev, "Suspended", *suspended, now, generation),
        _pool_condition(prev, "Warm", *warm_cond, now, generation),
    ]


# The steps, in order: each reads what the earlier ones filled in.
POOL_STEPS: tuple[Callable[[_PoolPass], None], ...] = (_ready_nodes, _jobs, _phase, _warm, _conditions)


def pool_events(old: ComputePoolStatus | None, new: ComputePoolStatus) -> list[tuple[str, str, str]]:
    """The Events (type, reason, message) a status change announces: the pool lost or regained its ready nodes,
    was suspended (by spec or idleness) or resumed. A first status announces only what is wrong (no ready
    nodes) or suspended; warm-capacity counts change too often to announce."""
    before = {c.type: c for c in (old.conditions if old else [])}
    out = []
    for c in new.conditions:
        prev = before.get(c.type)
        if prev is not None and (prev.status, prev.reason) == (c.status, c.reason):
            continue
        true = c.status is ConditionStatus.TRUE
        if c.type == "Ready" and (prev is not None or not true):
            out.append(("Normal" if true else "Warning", c.reason or "", c.message or ""))
        elif c.type == "Suspended" and true:
            out.append(("Normal", c.reason or "", c.message or ""))
        elif c.type == "Suspended" and prev is not None and prev.status is ConditionStatus.TRUE:
            out.append(("Normal", "Resumed", f"{c.reason}: jobs are admitted again"))
    return out


def placeholders_wanted(pool: ComputePool, st: ComputePoolStatus, *, warm_capacity: bool = True) -> int:
    """Placeholders the pool should have, given its freshly computed status."""
    return desired_placeholders(pool, st.instances_in_use, suspended=st.phase is PoolPhase.SUSPENDED,
                                enabled=warm_capacity)


def auto_suspend_at(pool: ComputePool, st: ComputePoolStatus) -> datetime | None:
    """When an idle, not yet suspended pool auto-suspends (its status must be computed again then); None when
    nothing is due."""
    after = pool.spec.auto_suspend_seconds
    if not after or st.idle_since is None or st.phase is PoolPhase.SUSPENDED:
        return None
    return st.idle_since + timedelta(seconds=after)


def pool_status_changed(old: ComputePoolStatus | None, new: ComputePoolStatus) -> bool:
    """Whether `new` differs from `old` in anything but a condition's representation (conditions compare as
    written)."""
    return old is None or old.model_dump(exclude={"conditions"}) != new.model_dump(exclude={"conditions"}) \
        or [c.wire() for c in old.conditions] != [c.wire() for c in new.conditions]
