"""PyTorchDistributor: Snowflake's distributed PyTorch API on the job's Ray cluster, without Ray Train.

Owns the scaling config, the worker tasks (`num_workers_per_node` on each of `num_nodes` distinct Ray
nodes: one STRICT_SPREAD placement group with one bundle per node), the rendezvous and the result.
Why it is faster than Ray Train's TorchTrainer and torchrun:
- each rank is a Ray *task*, not an actor: Ray keeps the worker process in its idle pool afterwards, so
  the next run starts in a process that has already imported torch (no process start, no import), and
  no resources stay held between runs;
- one rendezvous per driver process: a TCPStore served by the driver on an OS-chosen port, reused by
  every run under its own key prefix (no port race, no rank-0 hand-off round trip);
- no controller actor, no storage or checkpoint machinery.
"""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import ray
import torch
import torch.distributed as dist

from kubepool.distributors.context import (
    ArtifactManager,
    Context,
    DataShard,
    get_context,
    job_model_dir,
    set_context,
)
from kubepool.distributors.data import ShardSpec, is_shardable, plan_shards
from kubepool.distributors.netif import interface_for
from kubepool.distributors.workers import (
    alive_nodes,
    driver_node_first,
    gather,
    guarded,
    in_bundle,
    node_bundles,
    release_tasks,
    reserve,
    ship_by_value,
)

__all__ = [
    "Context",
    "PyTorchDistributor",
    "PyTorchDistributorResult",
    "PyTorchScalingConfig",
    "WorkerResourceConfig",
    "get_context",
]

# Collectives that wait longer than this are a hung peer, not a slow one (torch's own default is 30 min).
PG_TIMEOUT = timedelta(minutes=30)


@dataclass(frozen=True)
class WorkerResourceConfig:
    """Resources reserved for each worker."""

    num_cpus: int = 1
    num_gpus: int = 0


@dataclass(frozen=True)
class PyTorchScalingConfig:
    """`num_workers_per_node` workers on each of `num_nodes` distinct nodes."""

    num_nodes: int
    num_workers_per_node: int
    resource_requirements_per_worker: WorkerResourceConfig = field(default_factory=WorkerResourceConfig)

    @property
    def world_size(self) -> int:
        return self.num_nodes * self.num_workers_per_node


@dataclass
class PyTorchDistributorResult:
    """Rank 0's reported metrics and the files it left in its model dir (also written to `model_dir`)."""

    metrics: dict[str, Any]
    metrics_history: list[dict[str, Any]]
    model_files: dict[str, bytes]
    model_dir: str | None


@dataclass(frozen=True)
class _RunSpec:
    """Everything one rank needs for one run, shipped with its task."""

    train_func: Callable[..., Any]
    store_prefix: str
    master_addr: str
    master_port: int
    hyper_params: dict[str, str] | None
    datasets: dict[str, ShardSpec | Any]
    artifact_stage_location: str | None


def collective_backend(num_gpus: float, cuda_devices: int) -> tuple[str, str | None]:
    """nccl when ranks hold GPUs that CUDA actually sees, else gloo; with a reason to log when GPUs were asked for
    but CUDA sees none (a CPU torch build, or no driver mounted), where nccl would fail at its first collective."""
    if num_gpus <= 0:
        return "gloo", None
    if cuda_devices <= 0:
        return "gloo", (f"each worker holds {num_gpus:g} GPU(s) but CUDA sees no device there (a CPU build of torch, "
                        "or the node's driver is not mounted): using gloo; run on the pool's GPU image for nccl")
    return "nccl", None


def _cuda_devices() -> int:
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _backends() -> list[str]:
    return ["gloo", "nccl"] if torch.cuda.is_available() else ["gloo"]


@dataclass(frozen=True)
class _Rank:
    rank: int
    local_rank: int
    node_rank: int
    world_size: int
    local_world_size: int
    backend: str


def _run_rank(me: _Rank, spec: _RunSpec) -> Any:
    """One rank of one run (a Ray task); failures come back as WorkerFailure with this rank's traceback."""
    model_dir = tempfile.mkdtemp(prefix=f"kubepool-model-r{me.rank}-")
    original_init = dist.init_process_group

    def cleanup() -> None:  # the process goes back to Ray's pool: leave nothing of this run in it
        dist.init_process_group = original_init
        set_context(None)
        if dist.is_initialized():
            dist.destroy_process_group()
        shutil.rmtree(model_dir, ignore_errors=True)

    return guarded(me.rank, lambda: _train(me, spec, model_dir), cleanup)


def _train(me: _Rank, spec: _RunSpec, model_dir: str) -> dict[str, Any]:
    _export_env(me, spec)
    if me.backend == "nccl":
        torch.cuda.set_device(cuda_device(torch.cuda.device_count(), ray.get_gpu_ids()))
    client = dist.TCPStore(spec.master_addr, spec.master_port, me.world_size, False, timeout=PG_TIMEOUT)
    dist.init_process_group(
        me.backend,
        store=dist.PrefixStore(spec.store_prefix, client),
        rank=me.rank,
        world_size=me.world_size,
        timeout=PG_TIMEOUT,
    )
    ctx = Context(
        rank=me.rank,
        local_rank=me.local_rank,
        world_size=me.world_size,
        local_world_size=me.local_world_size,
        node_rank=me.node_rank,
        master_addr=spec.master_addr,
        master_port=spec.master_port,
        backend=me.backend,
        supported_backends=_backends(),
        hyper_params=spec.hyper_params,
        dataset_map={k: DataShard(v) if isinstance(v, ShardSpec) else v for k, v in spec.datasets.items()},
        model_dir=model_dir,
        artifact_manager=ArtifactManager(spec.artifact_stage_location) if spec.artifact_stage_location else None,
    )
    set_context(ctx)
    dist.init_process_group = _already_initialised
    spec.train_func()
    files = _read_tree(model_dir) if me.rank == 0 else {}
    return {"metrics": ctx.metrics_reporter.merged(), "history": ctx.metrics_reporter.history, "files": files}


def cuda_device(visible: int, assigned: Sequence[int | str]) -> int:
    """This rank's CUDA device index. Ray makes a task's own GPUs its only visible ones, so it is 0 (not
    the local rank: a worker with 2 GPUs sees 2 devices whatever its local rank); when that isolation is
    off, every GPU of the node is visible and the first assigned GPU's id is the index."""
    if assigned and visible > len(assigned):
        return int(assigned[0])
    return 0


def _export_env(me: _Rank, spec: _RunSpec) -> None:
    """torchrun's variables, for train functions and libraries that read them."""
    os.environ.update(
        MASTER_ADDR=spec.master_addr,
        MASTER_PORT=str(spec.master_port),
        RANK=str(me.rank),
        LOCAL_RANK=str(me.local_rank),
        WORLD_SIZE=str(me.world_size),
        LOCAL_WORLD_SIZE=str(me.local_world_size),
        NODE_RANK=str(me.node_rank),
        GROUP_RANK=str(me.node_rank),
    )
    iface = interface_for(ray.util.get_node_ip_address())
    if iface:  # the interface of the node IP, e.g. `lo` for 127.0.6.x test nodes; a user setting wins
        os.environ.setdefault("GLOO_SOCKET_IFNAME", iface)
        os.environ.setdefault("NCCL_SOCKET_IFNAME", iface)


def _already_initialised(*_: Any, **__: Any) -> None:
    """Stands in for `dist.init_process_group` during train_func: train functions written for torchrun or
    Snowflake initialise the group themselves, and the distributor has already done it."""


def _read_tree(root: str) -> dict[str, bytes]:
    base = Path(root)
    return {str(p.relative_to(base)): p.read_bytes() for p in sorted(base.rglob("*")) if p.is_file()}


@functools.cache
def _rendezvous(ip: str) -> dist.TCPStore:
    """The driver's store server, one per process: every run of every distributor uses it under its own
    key prefix, so there is no port to find and no rank-0 start-up to wait for."""
    return dist.TCPStore(ip, 0, 1, True, timeout=PG_TIMEOUT, wait_for_workers=False)


class PyTorchDistributor:
    """Runs `train_func` on every worker of `scaling_config` with torch.distributed initialised.

    Args:
        train_func: called with no arguments on every worker (use `get_context()` inside it).
        scaling_config: nodes, workers per node and resources per worker; default 1 node x 1 worker.
    """

    def __init__(self, train_func: Callable[..., Any], scaling_config: PyTorchScalingConfig | None = None) -> None:
        self.train_func = train_func
        ship_by_value(train_func)
        self.scaling_config = scaling_config or PyTorchScalingConfig(1, 1, WorkerResourceConfig())

    def run(
        self,
        *,
        dataset_map: Mapping[str, Any] | None = None,
        hyper_params: dict[str, str] | None = None,
        artifact_stage_location: str | None = None,
    ) -> PyTorchDistributorResult:
        """Train on every worker; DataFrames, Ray Datasets, data files and channels in `dataset_map` reach
        each worker as its own shard (by world rank), other values as they are.

        Raises:
            RuntimeError: a worker failed (the message holds its rank and traceback) or cannot be placed.
        """
        if not ray.is_initialized():
            ray.init(address="auto")
        cfg, res = self.scaling_config, self.scaling_config.resource_requirements_per_worker
        nodes = alive_nodes()
        if cfg.num_nodes > len(nodes):
            raise RuntimeError(f"num_nodes={cfg.num_nodes} but the Ray cluster has {len(nodes)} alive nodes")
        per_node = {"CPU": res.num_cpus * cfg.num_workers_per_node, "GPU": res.num_gpus * cfg.num_workers_per_node}
        pg = reserve(*node_bundles(cfg.num_nodes, per_node), what="PyTorchDistributor")
        refs: list[ray.ObjectRef] = []
        try:
            datasets: dict[str, Any] = {
                name: plan_shards(data, cfg.world_size, cfg.num_workers_per_node)
                if is_shardable(data)
                else [data] * cfg.world_size
                for name, data in (dataset_map or {}).items()
            }
            ip = ray.util.get_node_ip_address()
            store = _rendezvous(ip)
            task = ray.remote(max_retries=0)(_run_rank)  # a re-run rank would rejoin a finished collective
            bundles = driver_node_first(pg)
            seen = 0
            if res.num_gpus > 0:  # what CUDA sees where the ranks run, holding what a rank holds
                probe = ray.remote(max_retries=0)(_cuda_devices).options(
                    num_cpus=0, num_gpus=res.num_gpus, scheduling_strategy=in_bundle(pg, bundles[0]))
                seen = int(ray.get(probe.remote()))
            backend, why = collective_backend(res.num_gpus, seen)
            if why:
                print(f"kubepool: PyTorchDistributor: {why}", flush=True)
            prefix = f"run-{uuid.uuid4().hex[:12]}/"
            for rank in range(cfg.world_size):
                node, local = divmod(rank, cfg.num_workers_per_node)
                me = _Rank(rank, local, node, cfg.world_size, cfg.num_workers_per_node, backend)
                shards = {name: per_rank[rank] for name, per_rank in datasets.items()}
                spec = _RunSpec(
                    self.train_func, prefix, ip, int(store.port), hyper_params, shards, artifact_stage_location
                )
                refs.append(
                    task.options(
                        num_cpus=res.num_cpus, num_gpus=res.num_gpus, scheduling_strategy=in_bundle(pg, bundles[node])
                    ).remote(me, spec)
                )
            rank0 = gather(refs, list(range(cfg.world_size)), "PyTorchDistributor")[0]
        finally:
            release_tasks(refs, pg)
        return PyTorchDistributorResult(
            metrics=rank0["metrics"],
            metrics_history=rank0["history"],
            model_files=rank0["files"],
            model_dir=_write_model(rank0["files"], artifact_stage_location),
        )


def _write_model(files: dict[str, bytes], stage: str | None) -> str | None:
    """Rank 0's model dir on the driver: under the artifact stage when given; else, in a kubepool job, the
    instance's /opt/ml/model, kept after the job as model.tar.gz (spec.output) as SageMaker keeps it; else (a
    plain Ray cluster) a fresh temp dir."""
    if not files:
        return None
    kept = job_model_dir()
    root = (Path(stage.removeprefix("file://")) / "model" if stage else kept if kept is not None
            else Path(tempfile.mkdtemp(prefix="kubepool-model-")))
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return str(root)
