"""PyTorchDistributor: Snowflake's distributed PyTorch API on the job's Ray cluster, without Ray Train.

Owns the scaling config, the worker actors (`num_workers_per_node` on each of `num_nodes` distinct Ray
nodes: one STRICT_SPREAD placement group with one bundle per node), the single rendezvous (a TCPStore on
rank 0 that every run reuses under its own key prefix) and the result. Why it is faster than Ray Train's
TorchTrainer: no controller actor, no storage/checkpoint machinery, actors start while the driver shards
the data, and a distributor built with `keep_warm=True` reuses its actors and store across runs.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import ray
import torch
import torch.distributed as dist

from kubepool.distributors.context import ArtifactManager, Context, DataShard, get_context, set_context
from kubepool.distributors.data import ShardSpec, is_shardable, plan_shards
from kubepool.distributors.netif import interface_for
from kubepool.distributors.workers import (
    alive_nodes,
    gather,
    guarded,
    in_bundle,
    node_bundles,
    release,
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
    """Everything one worker needs for one run; shipped once per run."""

    train_func: Callable[..., Any]
    store_prefix: str
    master_addr: str
    master_port: int
    hyper_params: dict[str, str] | None
    datasets: dict[str, ShardSpec | Any]
    artifact_stage_location: str | None


def _backends() -> list[str]:
    return ["gloo", "nccl"] if torch.cuda.is_available() else ["gloo"]


class _TorchWorker:
    """One rank. torch is imported when Ray loads this class, i.e. while the driver is still sharding data."""

    def __init__(self, rank: int, local_rank: int, node_rank: int, world_size: int, local_world_size: int, gpu: bool):
        self.rank, self.local_rank, self.node_rank = rank, local_rank, node_rank
        self.world_size, self.local_world_size = world_size, local_world_size
        self.backend = "nccl" if gpu else "gloo"
        self.ip = ray.util.get_node_ip_address()
        self.server: dist.TCPStore | None = None
        self.client: dist.TCPStore | None = None

    def host_store(self) -> tuple[str, int]:
        """Rank 0 only: the one rendezvous store of this worker group, on an OS-chosen port (no race)."""
        self.server = dist.TCPStore(self.ip, 0, self.world_size, True, timeout=PG_TIMEOUT, wait_for_workers=False)
        return self.ip, int(self.server.port)

    def run(self, spec: _RunSpec) -> dict[str, Any] | Any:
        return guarded(self.rank, lambda: self._run(spec))

    def _run(self, spec: _RunSpec) -> dict[str, Any]:
        self._export_env(spec)
        if self.client is None:
            self.client = self.server or dist.TCPStore(
                spec.master_addr, spec.master_port, self.world_size, False, timeout=PG_TIMEOUT
            )
        if self.backend == "nccl":
            torch.cuda.set_device(0 if torch.cuda.device_count() == 1 else self.local_rank)
        dist.init_process_group(
            self.backend,
            store=dist.PrefixStore(spec.store_prefix, self.client),
            rank=self.rank,
            world_size=self.world_size,
            timeout=PG_TIMEOUT,
        )
        model_dir = tempfile.mkdtemp(prefix=f"kubepool-model-r{self.rank}-")
        ctx = Context(
            rank=self.rank,
            local_rank=self.local_rank,
            world_size=self.world_size,
            local_world_size=self.local_world_size,
            node_rank=self.node_rank,
            master_addr=spec.master_addr,
            master_port=spec.master_port,
            backend=self.backend,
            supported_backends=_backends(),
            hyper_params=spec.hyper_params,
            dataset_map={k: DataShard(v) if isinstance(v, ShardSpec) else v for k, v in spec.datasets.items()},
            model_dir=model_dir,
            artifact_manager=ArtifactManager(spec.artifact_stage_location) if spec.artifact_stage_location else None,
        )
        set_context(ctx)
        original_init = dist.init_process_group
        dist.init_process_group = _already_initialised  # type: ignore[assignment]
        try:
            spec.train_func()
            files = _read_tree(model_dir) if self.rank == 0 else {}
        finally:
            dist.init_process_group = original_init
            set_context(None)
            if dist.is_initialized():
                dist.destroy_process_group()
            shutil.rmtree(model_dir, ignore_errors=True)
        return {"metrics": ctx.metrics_reporter.merged(), "history": ctx.metrics_reporter.history, "files": files}

    def _export_env(self, spec: _RunSpec) -> None:
        """torchrun's variables, for train functions and libraries that read them."""
        os.environ.update(
            MASTER_ADDR=spec.master_addr,
            MASTER_PORT=str(spec.master_port),
            RANK=str(self.rank),
            LOCAL_RANK=str(self.local_rank),
            WORLD_SIZE=str(self.world_size),
            LOCAL_WORLD_SIZE=str(self.local_world_size),
            NODE_RANK=str(self.node_rank),
            GROUP_RANK=str(self.node_rank),
        )
        iface = interface_for(self.ip)
        if iface:  # the interface of the node IP, e.g. `lo` for 127.0.6.x test nodes; a user setting wins
            os.environ.setdefault("GLOO_SOCKET_IFNAME", iface)
            os.environ.setdefault("NCCL_SOCKET_IFNAME", iface)


def _already_initialised(*_: Any, **__: Any) -> None:
    """Stands in for `dist.init_process_group` during train_func: train functions written for torchrun or
    Snowflake initialise the group themselves, and the distributor has already done it."""


def _read_tree(root: str) -> dict[str, bytes]:
    base = Path(root)
    return {str(p.relative_to(base)): p.read_bytes() for p in sorted(base.rglob("*")) if p.is_file()}


class _WorkerGroup:
    """The actors of one scaling config, their placement group and rank 0's store address."""

    def __init__(self, cfg: PyTorchScalingConfig) -> None:
        res = cfg.resource_requirements_per_worker
        nodes = alive_nodes()
        if cfg.num_nodes > len(nodes):
            raise RuntimeError(f"num_nodes={cfg.num_nodes} but the Ray cluster has {len(nodes)} alive nodes")
        per_node = {"CPU": res.num_cpus * cfg.num_workers_per_node, "GPU": res.num_gpus * cfg.num_workers_per_node}
        self.pg = reserve(*node_bundles(cfg.num_nodes, per_node), what="PyTorchDistributor")
        actor = ray.remote(_TorchWorker)
        self.actors: list[Any] = []  # Ray actor handles
        for node in range(cfg.num_nodes):
            for local in range(cfg.num_workers_per_node):
                rank = node * cfg.num_workers_per_node + local
                self.actors.append(
                    actor.options(
                        num_cpus=res.num_cpus, num_gpus=res.num_gpus, scheduling_strategy=in_bundle(self.pg, node)
                    ).remote(rank, local, node, cfg.world_size, cfg.num_workers_per_node, res.num_gpus > 0)
                )
        self.ranks = list(range(cfg.world_size))
        self.address: tuple[str, int] | None = None

    def rendezvous(self) -> tuple[str, int]:
        if self.address is None:
            self.address = tuple(gather([self.actors[0].host_store.remote()], [0], "PyTorchDistributor")[0])
        return self.address

    def shutdown(self) -> None:
        release(self.actors, self.pg)


class PyTorchDistributor:
    """Runs `train_func` on every worker of `scaling_config` with torch.distributed initialised.

    Args:
        train_func: called with no arguments on every worker (use `get_context()` inside it).
        scaling_config: nodes, workers per node and resources per worker; default 1 node x 1 worker.
        keep_warm: keep the actors and the rendezvous between `run` calls until `shutdown()`; they hold
            their Ray resources meanwhile.
    """

    def __init__(
        self,
        train_func: Callable[..., Any],
        scaling_config: PyTorchScalingConfig | None = None,
        *,
        keep_warm: bool = False,
    ) -> None:
        self.train_func = train_func
        ship_by_value(train_func)
        self.scaling_config = scaling_config or PyTorchScalingConfig(1, 1, WorkerResourceConfig())
        self.keep_warm = keep_warm
        self._group: _WorkerGroup | None = None

    def run(
        self,
        *,
        dataset_map: Mapping[str, Any] | None = None,
        hyper_params: dict[str, str] | None = None,
        artifact_stage_location: str | None = None,
    ) -> PyTorchDistributorResult:
        """Train on every worker; DataFrames, Ray Datasets and data files in `dataset_map` reach each worker
        as its own shard (by world rank), other values as they are.

        Raises:
            RuntimeError: a worker failed (the message holds its rank and traceback) or cannot be placed.
        """
        if not ray.is_initialized():
            ray.init(address="auto")
        group = self._group or _WorkerGroup(self.scaling_config)  # actors start while we shard below
        self._group = None
        ok = False
        try:
            world = self.scaling_config.world_size
            datasets: dict[str, Any] = {
                name: plan_shards(data, world, self.scaling_config.num_workers_per_node)
                if is_shardable(data)
                else [data] * world
                for name, data in (dataset_map or {}).items()
            }
            addr, port = group.rendezvous()
            prefix = f"run-{uuid.uuid4().hex[:12]}/"
            refs = [
                a.run.remote(
                    _RunSpec(
                        self.train_func, prefix, addr, port, hyper_params,
                        {name: shards[rank] for name, shards in datasets.items()}, artifact_stage_location,
                    )
                )
                for rank, a in enumerate(group.actors)
            ]  # fmt: skip
            rank0 = gather(refs, group.ranks, "PyTorchDistributor")[0]
            ok = True
        finally:
            if ok and self.keep_warm:
                self._group = group
            else:
                group.shutdown()
        return PyTorchDistributorResult(
            metrics=rank0["metrics"],
            metrics_history=rank0["history"],
            model_files=rank0["files"],
            model_dir=_write_model(rank0["files"], artifact_stage_location),
        )

    def shutdown(self) -> None:
        """Release the actors kept by `keep_warm`."""
        if self._group is not None:
            self._group.shutdown()
            self._group = None

    def __enter__(self) -> PyTorchDistributor:
        return self

    def __exit__(self, *_: object) -> None:
        self.shutdown()


def _write_model(files: dict[str, bytes], stage: str | None) -> str | None:
    """Rank 0's model dir on the driver: under the artifact stage when given, else a fresh temp dir."""
    if not files:
        return None
    root = Path(stage.removeprefix("file://")) / "model" if stage else Path(tempfile.mkdtemp(prefix="kubepool-model-"))
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return str(root)
