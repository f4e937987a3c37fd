"""PURE: a ComputePool's status from its nodes, the jobs' claims, its placeholders and the time; which pools a
node change can move; whether a new pool status must be written. No I/O, no clock."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta

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


def compute_pool_status(pool: ComputePool, nodes: Iterable[NodeView], claims: Iterable[Claim],
                        now: datetime, placeholders: Iterable[PlaceholderView] = (), *,
                        warm_capacity: bool = True) -> ComputePoolStatus:
    """The pool's status. `pool.status` is the previous one: idleSince carries over from it, so the
    auto-suspend timer survives operator restarts. `placeholders`: the warm-capacity pods observed."""
    name = pool.metadata.get("name", "")
    uid = pool.metadata.get("uid", "")
    ready = sum(1 for n in nodes if n.ready and not n.unschedulable and node_matches(pool, n))
    mine = [c for c in claims if name in c.pools]
    in_use = usage(mine)[name]
    running = sum(1 for c in mine if not c.waiting)
    queued = len(mine) - running
    before = pool.status or ComputePoolStatus()
    # Idle: no admitted and no queued job. A queued job counts as activity: it resumes an auto-suspended pool
    # (Snowflake's AUTO_RESUME), and admission does not refuse auto-suspended pools.
    idle_since = None if mine else (before.idle_since or now)
    after = pool.spec.auto_suspend_seconds
    auto_suspended = bool(after) and idle_since is not None and now >= idle_since + timedelta(seconds=after or 0)
    if pool.spec.suspend or auto_suspended:
        phase = PoolPhase.SUSPENDED
    else:
        phase = PoolPhase.ACTIVE if in_use else PoolPhase.IDLE
    warm = sum(1 for p in placeholders if p.pool == name and p.warm and (not uid or not p.owner_uid or p.owner_uid == uid))
    wanted = desired_placeholders(pool, in_use, suspended=phase is PoolPhase.SUSPENDED, enabled=warm_capacity)
    generation = pool.metadata.get("generation")
    prev = {c.type: c for c in before.conditions}
    if pool.spec.suspend:
        suspended = (True, vocabulary.SUSPENDED, "spec.suspend is set: no new jobs are admitted; running jobs finish")
    elif auto_suspended:
        assert idle_since is not None
        suspended = (True, AUTO_SUSPENDED,
                     f"idle since {_stamp(idle_since)}, over autoSuspendSeconds={after}: warm nodes released; "
                     "a new job resumes the pool")
    else:
        suspended = (False, "Active" if mine else "Idle", "")
    if not warm_capacity:
        warm_cond = (False, "WarmCapacityOff", "warm capacity is turned off in the operator's configuration")
    else:
        warm_cond = (warm >= wanted, "WarmNodesHeld" if warm >= wanted else "WarmingUp",
                     f"{warm} of {wanted} placeholder(s) running (minNodes={pool.spec.min_nodes}, {in_use} in use)")
    conditions = [
        _pool_condition(prev, "Ready", bool(ready), "NodesReady" if ready else "NoReadyNodes",
                        f"{ready} ready node(s) match the pool; {in_use} of {pool.spec.max_nodes} instances in use",
                        now, generation),
        _pool_condition(prev, "Suspended", *suspended, now, generation),
        _pool_condition(prev, "Warm", *warm_cond, now, generation),
    ]
    return ComputePoolStatus(phase=phase, ready_nodes=ready, instances_in_use=in_use, running_jobs=running,
                             queued_jobs=queued, warm_instances=warm, idle_since=idle_since, conditions=conditions,
                             observed_generation=generation)


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
