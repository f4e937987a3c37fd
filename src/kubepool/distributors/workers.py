"""What both distributors share about their Ray worker tasks: placing them on distinct nodes, shipping
user code, telling failures apart from results, and collecting results fast (the first failure stops
everyone).

No framework code here (no torch, no xgboost): only Ray placement and the failure protocol.
"""

from __future__ import annotations

import sys
import sysconfig
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import ray
from ray.util.placement_group import PlacementGroup, placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

T = TypeVar("T")

# Waiting longer than this for a placement group means the cluster is too small, not slow.
PLACEMENT_TIMEOUT_S = 120.0
# After a failure, how long to wait for other ranks' failures: a rank that raised first makes its peers'
# collectives fail too, and those reports can reach the driver first.
FAILURE_GRACE_S = 3.0


@dataclass(frozen=True)
class WorkerFailure:
    """What a worker returns instead of raising, so the driver can show which rank failed and why."""

    rank: int
    node_ip: str
    error: str
    traceback: str
    at: float  # time.time() of the exception: the earliest failure is the cause, later ones its effects


def guarded(rank: int, fn: Callable[[], T], cleanup: Callable[[], None] | None = None) -> T | WorkerFailure:
    """Run `fn` on a worker; an exception becomes a WorkerFailure carrying the worker's own traceback.
    `cleanup` runs after the failure is time-stamped: tearing down a process group makes the peers fail,
    and their failures must not look earlier than this one."""
    try:
        return fn()
    except BaseException as e:  # noqa: BLE001 - every failure must reach the driver, SystemExit included
        error = f"{type(e).__name__}: {e}"
        return WorkerFailure(rank, ray.util.get_node_ip_address(), error, traceback.format_exc(), time.time())
    finally:
        if cleanup is not None:
            cleanup()


def _installed(path: str) -> bool:
    roots = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    return any(path.startswith(r) for r in roots) or "site-packages" in path or "dist-packages" in path


def ship_by_value(fn: Callable[..., Any]) -> None:
    """Pickle `fn`'s module by value when it is user code rather than an installed package: the payload
    dir is on the driver's sys.path only, so workers on other nodes could not import it by name."""
    module = sys.modules.get(getattr(fn, "__module__", "") or "")
    path = getattr(module, "__file__", None)
    if module is None or path is None or module.__name__ == "__main__" or module.__name__.startswith("kubepool"):
        return  # __main__ is pickled by value anyway; kubepool is installed on every node
    if not _installed(path):
        ray.cloudpickle.register_pickle_by_value(module)


def alive_nodes() -> list[dict[str, Any]]:
    """Alive Ray nodes, head first then by IP, so node order is stable between calls."""
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    head_ip = ray.util.get_node_ip_address()
    return sorted(nodes, key=lambda n: (n["NodeManagerAddress"] != head_ip, n["NodeManagerAddress"]))


def node_bundles(num_nodes: int, per_node: Mapping[str, float]) -> tuple[list[dict[str, float]], str]:
    """One bundle per node, placed STRICT_SPREAD so every bundle lands on a different node."""
    bundle = {k: v for k, v in per_node.items() if v > 0} or {"CPU": 0.001}  # Ray rejects empty bundles
    return [dict(bundle) for _ in range(num_nodes)], "STRICT_SPREAD" if num_nodes > 1 else "PACK"


def reserve(bundles: list[dict[str, float]], strategy: str, what: str) -> PlacementGroup:
    """Create a placement group and wait for it; a cluster that cannot hold it fails with its resources."""
    pg = placement_group(bundles, strategy=strategy)
    ready, _ = ray.wait([pg.ready()], timeout=PLACEMENT_TIMEOUT_S)
    if not ready:
        remove_placement_group(pg)
        raise RuntimeError(
            f"{what}: cannot place {len(bundles)} x {bundles[0]} ({strategy}) within {PLACEMENT_TIMEOUT_S:.0f}s; "
            f"cluster has {len(alive_nodes())} nodes, available {ray.available_resources()}"
        )
    return pg


def driver_node_first(pg: PlacementGroup) -> list[int]:
    """Bundle indexes with the driver's node's bundle first: node rank 0 then shares the driver's node,
    where the rendezvous store runs (Snowflake: master addr is node rank 0's)."""
    placed = ray.util.placement_group_table(pg)["bundles_to_node_id"]
    here = ray.get_runtime_context().get_node_id()
    return sorted(placed, key=lambda i: (placed[i] != here, i))


def in_bundle(pg: PlacementGroup, index: int) -> PlacementGroupSchedulingStrategy:
    return PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=index)


def gather(refs: Sequence[ray.ObjectRef], ranks: Sequence[int], what: str) -> list[Any]:
    """Results in order of `refs`. The first failure raises RuntimeError at once (collectives on the other
    ranks would otherwise wait for the failed one until their timeout), naming the earliest failing rank."""
    index = {ref: i for i, ref in enumerate(refs)}
    out: list[Any] = [None] * len(refs)
    pending = list(refs)
    while pending:
        done, pending = ray.wait(pending, num_returns=1)
        i = index[done[0]]
        try:
            value = ray.get(done[0])
        except ray.exceptions.RayError as e:
            raise RuntimeError(f"{what}: rank {ranks[i]} died: {e}") from e
        if isinstance(value, WorkerFailure):
            raise RuntimeError(_failure_report(what, [value, *_more_failures(pending)]))
        out[i] = value
    return out


def _more_failures(pending: list[ray.ObjectRef]) -> list[WorkerFailure]:
    done, _ = ray.wait(pending, num_returns=len(pending), timeout=FAILURE_GRACE_S) if pending else ([], [])
    values = []
    for ref in done:
        try:
            values.append(ray.get(ref))
        except ray.exceptions.RayError:
            continue
    return [v for v in values if isinstance(v, WorkerFailure)]


def _failure_report(what: str, failures: list[WorkerFailure]) -> str:
    first, *others = sorted(failures, key=lambda f: f.at)
    text = f"{what}: rank {first.rank} on {first.node_ip} failed: {first.error}\n"
    if others:
        text += f"(then ranks {', '.join(str(f.rank) for f in others)} failed too)\n"
    return text + f"--- traceback of rank {first.rank} ---\n{first.traceback}"


def release_tasks(refs: Sequence[ray.ObjectRef], pg: PlacementGroup) -> None:
    """Force-cancel the tasks still running (after a failure they may hang in a collective; cancelling
    kills their worker processes) and free the placement group. Finished tasks' processes stay pooled."""
    _, running = ray.wait(list(refs), num_returns=len(refs), timeout=0) if refs else ([], [])
    for ref in running:
        ray.cancel(ref, force=True)
    remove_placement_group(pg)
