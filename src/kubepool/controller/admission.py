"""PURE admission of jobs to compute pools: a pool's maxNodes caps the instances of all its admitted
jobs; a job is admitted when at least its minInstances fit, strictly first-in-first-out per pool, so a
large job is never starved by smaller ones and no two jobs hold partial gangs while waiting."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from kubepool.controller import vocabulary


@dataclass(frozen=True)
class Claim:
    """What one unfinished job asks of its pools."""

    namespace: str
    name: str
    created: str  # creationTimestamp (RFC 3339 sorts as text): the queue order
    pools: tuple[str, ...]  # pool of each instance, in instance order (instance 0 = head)
    min_instances: int
    granted: int = 0  # instances admitted; 0 while waiting

    @property
    def order(self) -> tuple[str, str, str]:
        return (self.created, self.namespace, self.name)

    @property
    def waiting(self) -> bool:
        return self.granted == 0


@dataclass(frozen=True)
class Decision:
    admitted: bool
    granted: int = 0
    reason: str = ""
    message: str = ""


def usage(claims: Iterable[Claim]) -> Counter[str]:
    """Instances in use per pool by admitted jobs."""
    used: Counter[str] = Counter()
    for c in claims:
        used.update(c.pools[: c.granted])
    return used


def _prefix_fits(pools: tuple[str, ...], free: Mapping[str, int]) -> int:
    """Length of the longest prefix of instances that fits the free capacity."""
    left = dict(free)
    for n, pool in enumerate(pools):
        if left.get(pool, 0) <= 0:
            return n
        left[pool] -= 1
    return len(pools)


def _never_fits(c: Claim, capacity: Mapping[str, int]) -> bool:
    return _prefix_fits(c.pools, capacity) < c.min_instances


def decide(claim: Claim, claims: Iterable[Claim], capacity: Mapping[str, int], suspended: Iterable[str] = ()) -> Decision:
    """Admit `claim` (a waiting job) or say why it waits.

    Args:
        claim: the job to decide for.
        claims: every unfinished job (admitted and waiting), `claim` included or not.
        capacity: maxNodes of every existing pool.
        suspended: pools that admit nothing new.
    """
    others = [c for c in claims if (c.namespace, c.name) != (claim.namespace, claim.name)]
    needed = list(dict.fromkeys(claim.pools))
    missing = [p for p in needed if p not in capacity]
    if missing:
        return Decision(False, reason=vocabulary.POOL_NOT_FOUND, message=f"ComputePool {', '.join(missing)} does not exist")
    paused = sorted(set(needed) & set(suspended))
    if paused:
        return Decision(False, reason=vocabulary.POOL_SUSPENDED, message=f"ComputePool {', '.join(paused)} is suspended")
    if _never_fits(claim, capacity):
        caps = ", ".join(f"{p} maxNodes={capacity[p]}" for p in needed)
        return Decision(False, reason=vocabulary.POOL_TOO_SMALL,
                        message=f"minInstances={claim.min_instances} can never fit ({caps}); raise maxNodes")
    ahead = [c for c in others if c.waiting and c.order < claim.order and set(c.pools) & set(needed)
             and all(p in capacity and p not in set(suspended) for p in c.pools) and not _never_fits(c, capacity)]
    used = usage(others)
    free = {p: max(capacity[p] - used[p], 0) for p in capacity}
    if ahead:
        # Not how many: every admission would change the message of every job behind it, and so rewrite each one's
        # status (a FIFO queue of n jobs cost n² writes). The pool's status counts its queue (queuedJobs).
        return Decision(False, reason=vocabulary.QUEUED, message=f"queued behind older jobs for pool {', '.join(needed)}")
    granted = _prefix_fits(claim.pools, free)
    if granted >= claim.min_instances:
        return Decision(True, granted=granted)
    state = ", ".join(f"{p}: {free[p]} of {capacity[p]} free" for p in needed)
    return Decision(False, reason=vocabulary.QUEUED, message=f"waiting for capacity: needs {claim.min_instances} instance(s) ({state})")


def waiting_in_order(claims: Iterable[Claim], pools: Iterable[str]) -> list[Claim]:
    """The waiting claims on any of `pools`, oldest first: the order in which they re-decide after the pools'
    admitted set changed, so a job queued behind one that was just admitted (or left) is always looked at again."""
    names = set(pools)
    return sorted((c for c in claims if c.waiting and names & set(c.pools)), key=lambda c: c.order)


def regrant(claim: Claim, claims: Iterable[Claim], capacity: Mapping[str, int]) -> int:
    """How many instances an admitted job may hold after its size changed (scale_cluster): a shrink at once, a
    growth as far as the free capacity left by the other admitted jobs goes. Never fewer than it holds for lack
    of capacity (a pool's maxNodes lowered under a running job): only its own size takes instances away."""
    used = usage(c for c in claims if (c.namespace, c.name) != (claim.namespace, claim.name))
    free = {p: max(n - used[p], 0) for p, n in capacity.items()}
    return max(_prefix_fits(claim.pools, free), min(claim.granted, len(claim.pools)))
