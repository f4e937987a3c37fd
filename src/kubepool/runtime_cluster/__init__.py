"""Snowflake's `runtime_cluster` API inside a kubepool job: look at the Ray cluster and resize it.

`get_nodes`, `get_available_cpu`, `get_available_gpu`, `get_num_cpus_per_node` and `get_ray_dashboard_url`
read Ray. `scale_cluster` patches the running MLJob (name and namespace from the runtime contract) with
the pod's ServiceAccount through lightkube, then waits for Ray nodes to join or leave, rolling the patch
back on timeout. The JSON-patch building and the wait loop are pure functions (tested without a cluster);
the operator does the actual pod changes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kubepool import naming
from kubepool.contract import load_contract

__all__ = [
    "get_available_cpu",
    "get_available_gpu",
    "get_nodes",
    "get_num_cpus_per_node",
    "get_ray_dashboard_url",
    "scale_cluster",
]

log = logging.getLogger(__name__)

DEFAULT_ROLLBACK_AFTER_S = 720  # Snowflake's default: 12 minutes, then the old size is restored
_POLL_S = 2.0

JsonPatch = list[dict[str, Any]]


def _ray() -> Any:
    import ray

    if not ray.is_initialized():
        ray.init(address="auto", ignore_reinit_error=True)
    return ray


def nodes_from_ray(ray_nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Snowflake's node records (`name` is the node IP) for the alive nodes of `ray.nodes()`."""
    return [
        {
            "name": n["NodeManagerAddress"],
            "cpus": int(n.get("Resources", {}).get("CPU", 0)),
            "gpus": int(n.get("Resources", {}).get("GPU", 0)),
        }
        for n in ray_nodes
        if n.get("Alive")
    ]


def get_nodes() -> list[dict[str, Any]]:
    """Active nodes as `[{"name": <ip>, "cpus": int, "gpus": int}]`."""
    return nodes_from_ray(_ray().nodes())


def get_available_cpu() -> int:
    return int(_ray().available_resources().get("CPU", 0))


def get_available_gpu() -> int:
    return int(_ray().available_resources().get("GPU", 0))


def get_num_cpus_per_node() -> int:
    """CPUs of the smallest node: what a one-worker-per-node job can count on everywhere."""
    nodes = get_nodes()
    return min(n["cpus"] for n in nodes) if nodes else 0


def get_ray_dashboard_url() -> str:
    from ray._private.worker import get_dashboard_url

    _ray()
    url = get_dashboard_url()
    if not url:
        raise RuntimeError("the Ray dashboard is not running in this cluster")
    return url if url.startswith("http") else f"http://{url}"


# --- scale_cluster: pure parts ---------------------------------------------------------------------


@dataclass(frozen=True)
class ScaleOptions:
    """`options` of scale_cluster: restore the old size after `rollback_after_seconds` (0: never), and
    return as soon as `block_until_min_cluster_size` nodes are up (default: the expected size)."""

    rollback_after_seconds: float = DEFAULT_ROLLBACK_AFTER_S
    block_until_min_cluster_size: int | None = None

    @classmethod
    def parse(cls, options: Mapping[str, Any] | None) -> ScaleOptions:
        options = dict(options or {})
        unknown = set(options) - {"rollback_after_seconds", "block_until_min_cluster_size"}
        if unknown:
            raise ValueError(f"unknown scale_cluster options: {sorted(unknown)}")
        return cls(**options)


def current_size(spec: Mapping[str, Any]) -> int:
    """Instances of the job as the spec asks for them (head included)."""
    groups = spec.get("instanceGroups")
    if groups:
        return sum(int(g["instanceCount"]) for g in groups)
    return int(spec.get("targetInstances") or 1)


def scale_patch(spec: Mapping[str, Any], group: str, size: int) -> JsonPatch:
    """JSON patch that makes the job `size` instances: `targetInstances` for a single pool (its one group),
    `group`'s `instanceCount` for grouped jobs (other groups keep theirs); `minInstances` follows a shrink
    because the CRD requires minInstances <= the total."""
    if size < 1:
        raise ValueError(f"expected_cluster_size must be >= 1 (the head), got {size}")
    groups = spec.get("instanceGroups")
    if groups:
        index = next((i for i, g in enumerate(groups) if g.get("name") == group), None)
        if index is None:
            names = [g.get("name") for g in groups]
            raise ValueError(f"group {group!r} is not in the job's instanceGroups {names}")
        others = current_size(spec) - int(groups[index]["instanceCount"])
        if size - others < 1:
            whose = "the head's group" if index == 0 else f"group {group!r}"
            raise ValueError(f"size {size} leaves no instance in {whose} (other groups hold {others})")
        ops: JsonPatch = [
            {"op": "test", "path": f"/spec/instanceGroups/{index}/name", "value": group},
            {"op": "replace", "path": f"/spec/instanceGroups/{index}/instanceCount", "value": size - others},
        ]
    else:
        verb = "replace" if "targetInstances" in spec else "add"
        ops = [{"op": verb, "path": "/spec/targetInstances", "value": size}]
    if int(spec.get("minInstances") or 0) > size:
        ops.append({"op": "replace", "path": "/spec/minInstances", "value": size})
    return ops


def wait_for_size(
    count_nodes: Callable[[], int],
    *,
    target: int,
    grow: bool,
    timeout: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> bool:
    """True once `count_nodes()` reaches `target` (>= when growing, <= when shrinking) before `timeout`
    seconds (<= 0: wait forever)."""
    deadline = clock() + timeout
    while True:
        n = count_nodes()
        if (n >= target) if grow else (n <= target):
            return True
        if timeout > 0 and clock() >= deadline:
            return False
        sleep(_POLL_S)


class JobScaler:
    """Reads and patches one MLJob; the only part of this module that talks to Kubernetes."""

    def __init__(self, name: str, namespace: str, client: Any = None) -> None:
        from lightkube.generic_resource import create_namespaced_resource

        self.name, self.namespace = name, namespace
        self.resource = create_namespaced_resource(
            naming.GROUP, naming.VERSION, naming.MLJOB_KIND, naming.MLJOB_PLURAL
        )
        if client is None:
            from lightkube import Client

            client = Client(field_manager="kubepool-runtime")  # in a pod: the ServiceAccount token
        self.client = client

    def spec(self) -> dict[str, Any]:
        return dict(self.client.get(self.resource, self.name, namespace=self.namespace)["spec"])

    def patch(self, ops: JsonPatch) -> None:
        from lightkube.types import PatchType

        self.client.patch(self.resource, self.name, ops, namespace=self.namespace, patch_type=PatchType.JSON)


def scale(
    scaler: JobScaler,
    group: str,
    expected_cluster_size: int,
    *,
    is_async: bool,
    options: ScaleOptions,
    count_nodes: Callable[[], int],
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> bool:
    """scale_cluster with its collaborators passed in."""
    spec = scaler.spec()
    before = current_size(spec)
    if expected_cluster_size == before:
        return True
    scaler.patch(scale_patch(spec, group, expected_cluster_size))
    log.info("MLJob %s/%s: %d -> %d instances", scaler.namespace, scaler.name, before, expected_cluster_size)
    if is_async:
        return True
    grow = expected_cluster_size > before
    target = (options.block_until_min_cluster_size or expected_cluster_size) if grow else expected_cluster_size
    if wait_for_size(count_nodes, target=target, grow=grow, timeout=options.rollback_after_seconds, clock=clock, sleep=sleep):
        return True
    log.warning("MLJob %s: %d nodes not reached in %ss, rolling back to %d", scaler.name, target, options.rollback_after_seconds, before)
    scaler.patch(scale_patch(scaler.spec(), group, before))
    return False


def scale_cluster(
    expected_cluster_size: int,
    *,
    notebook_name: str | None = None,
    is_async: bool = False,
    options: Mapping[str, Any] | None = None,
    group: str | None = None,
) -> bool:
    """Resize the running job to `expected_cluster_size` instances (head included).

    Blocks until the Ray cluster has that many nodes (or `block_until_min_cluster_size` when growing)
    unless `is_async`; on timeout (`rollback_after_seconds`, default 720) restores the old size and
    returns False. `notebook_name` is accepted for Snowflake compatibility and ignored.

    `group` (kubepool's addition, for jobs with instanceGroups): the group that grows or shrinks to make the
    total `expected_cluster_size`; default the head's group. Every other instance keeps its id, host (algo-N) and
    rank: new instances take new ids past every id the job used, and a shrink removes the group's highest ranks.

    Raises:
        FileNotFoundError/KeyError: not running inside a kubepool job (no runtime contract).
        ValueError: a size the job cannot take, or a group it does not have.
    """
    del notebook_name
    contract, _ = load_contract()
    names = [g.name for g in contract.groups]
    if group is not None and group not in names:  # before anything is patched or Ray is asked
        raise ValueError(f"group {group!r} is not one of the job's groups {names}")
    scaler = JobScaler(contract.job_name, contract.namespace)
    ray = _ray()
    return scale(
        scaler,
        group or contract.groups[0].name,  # the head is the first group's first instance
        expected_cluster_size,
        is_async=is_async,
        options=ScaleOptions.parse(options),
        count_nodes=lambda: sum(1 for n in ray.nodes() if n.get("Alive")),
    )
