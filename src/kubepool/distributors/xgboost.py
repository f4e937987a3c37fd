"""XGBEstimator: one XGBoost model trained across Ray workers with xgboost's own collective.

Owns the scaling config, the worker tasks (one placement-group bundle each, spread over nodes), the
RabitTracker on the driver and the trained-model wrapper. Each worker loads only its shard of the data
(see `kubepool.distributors.data`) and joins the tracker through `xgboost.collective.init`;
histograms are allreduced and every rank bins its rows with the same cuts (`shard_cuts`: up to
`EXACT_CUTS_MAX_VALUES` feature values, the very cuts one process computes on all rows), so the model is
the one `xgboost.train` would build on all rows. Why it is
faster than Ray Train's XGBoostTrainer: workers are Ray tasks, so later fits reuse pooled processes that
have imported xgboost; no controller, no storage/checkpoint machinery, no Ray Data pipeline unless the
user passes a Ray Dataset.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import ray
import xgboost as xgb
from xgboost import collective
from xgboost.tracker import RabitTracker

from kubepool.distributors.data import ChannelData, Shardable, ShardSpec, list_files, load_shard, plan_shards
from kubepool.distributors.workers import alive_nodes, gather, guarded, in_bundle, release_tasks, reserve

__all__ = ["XGBEstimator", "XGBModel", "XGBScalingConfig"]

# Bootstrap of the collective (all workers connecting to the tracker); training itself is not limited.
TRACKER_TIMEOUT_S = 300
# Up to this many feature values (all rows x input columns), rank 0 sketches the histogram cuts on all
# rows, so the model equals single-process `xgboost.train`'s; each rank receives the values once (32 MiB
# as float32). Above it, xgboost's distributed sketch (each rank summarises its own rows, see `shard_cuts`).
EXACT_CUTS_MAX_VALUES = 1 << 23


@dataclass(frozen=True)
class XGBScalingConfig:
    """`num_workers=-1`: one worker per Ray node; `num_cpu_per_worker=-1`: all CPUs of the smallest node."""

    num_workers: int = -1
    num_cpu_per_worker: int = -1
    use_gpu: bool | None = None


@dataclass
class XGBModel:
    """The trained booster, the feature columns it expects and the evaluation history."""

    booster: xgb.Booster
    input_cols: list[str]
    evals_result: dict[str, dict[str, list[float]]] = field(default_factory=dict)

    def predict(self, data: pd.DataFrame | np.ndarray | xgb.DMatrix) -> np.ndarray:
        if isinstance(data, pd.DataFrame):
            data = xgb.DMatrix(data[self.input_cols])
        elif isinstance(data, np.ndarray):
            data = xgb.DMatrix(data, feature_names=self.input_cols)
        return np.asarray(self.booster.predict(data))

    def save_model(self, path: str | Path) -> None:
        self.booster.save_model(str(path))

    def num_boosted_rounds(self) -> int:
        return int(self.booster.num_boosted_rounds())


def resolve_scaling(
    cfg: XGBScalingConfig, node_cpus: Sequence[float], node_gpus: Sequence[float]
) -> tuple[int, int, bool]:
    """(workers, cpus per worker, gpu) with Snowflake's -1/None = auto rules, from the alive nodes' CPUs and
    GPUs. Auto GPU means one GPU for every worker: a pool whose head has no GPU must not ask for them."""
    if not node_cpus:
        raise RuntimeError("no alive Ray nodes")
    workers = len(node_cpus) if cfg.num_workers == -1 else cfg.num_workers
    cpus = max(1, int(min(node_cpus))) if cfg.num_cpu_per_worker == -1 else cfg.num_cpu_per_worker
    if workers < 1 or cpus < 1:
        raise ValueError(f"num_workers and num_cpu_per_worker must be >= 1 or -1, got {cfg}")
    return workers, cpus, gpus_fit(workers, node_gpus) if cfg.use_gpu is None else cfg.use_gpu


def gpus_fit(workers: int, node_gpus: Sequence[float]) -> bool:
    """Whether `workers` one-GPU bundles can be placed: on distinct nodes when there are enough nodes
    (the estimator spreads them strictly then), else anywhere."""
    whole = [int(g) for g in node_gpus]
    if workers <= len(whole):
        return sum(1 for g in whole if g >= 1) >= workers
    return sum(whole) >= workers


def _cuda_usable() -> bool:
    """Whether xgboost can train on a GPU in this process: a CUDA build and the NVIDIA driver's device nodes."""
    return bool(xgb.build_info().get("USE_CUDA")) and os.path.exists("/dev/nvidiactl")


def _probe_cuda() -> bool:
    """`_cuda_usable` where a worker holding one GPU would run."""
    return bool(ray.get(ray.remote(num_gpus=1, num_cpus=0, max_retries=0)(_cuda_usable).remote()))


def training_params(params: dict[str, Any] | None, objective: str, cpus: int, gpu: bool) -> dict[str, Any]:
    """User params over our defaults; the thread count follows the reserved CPUs, the device the GPU flag."""
    out: dict[str, Any] = {"objective": objective, "tree_method": "hist", "nthread": cpus}
    out.update(params or {})
    out.pop("n_estimators", None)
    if out["tree_method"] not in ("hist", "auto"):  # workers bin their rows in QuantileDMatrix: hist only
        raise ValueError(f"XGBEstimator trains with tree_method 'hist', got {out['tree_method']!r}")
    if gpu:
        out["device"] = "cuda"  # no ordinal: Ray sets CUDA_VISIBLE_DEVICES per worker
    return out


def named_evals(eval_set: Sequence[tuple[Shardable, str]] | dict[str, Shardable] | None) -> list[tuple[str, Shardable]]:
    """`eval_set` as (name, data) pairs: a dict maps name → data, a list holds xgboost's (data, name) tuples."""
    if isinstance(eval_set, dict):
        return list(eval_set.items())
    return [(name, data) for data, name in eval_set or []]


def _fit_rank(rank: int, job: _FitJob, train: ShardSpec, evals: list[tuple[str, ShardSpec]]) -> Any:
    """One worker of one fit (a Ray task, so its process, xgboost imported, returns to Ray's pool)."""
    joined: list[bool] = []

    def leave() -> None:  # after a failure is time-stamped: leaving makes the peers fail too
        if joined:
            collective.finalize()

    return guarded(rank, lambda: _fit(rank, job, train, evals, joined), leave)


def _fit(
    rank: int, job: _FitJob, train: ShardSpec, evals: list[tuple[str, ShardSpec]], joined: list[bool]
) -> dict[str, Any]:
    frames = [(name, load_shard(spec)) for name, spec in evals]
    df = load_shard(train)
    result: dict[str, dict[str, list[float]]] = {}
    collective.init(**job.comm_args, dmlc_task_id=f"{rank:08d}")
    joined.append(True)
    # DMatrices are built after joining: their quantile sketches are merged across workers.
    max_bin = int(job.params.get("max_bin", 256))  # QuantileDMatrix must agree with the booster
    features = df[job.input_cols]
    cuts = shard_cuts(features, max_bin, job.exact_cuts_max_values)
    dtrain = xgb.QuantileDMatrix(features, df[job.label_col], max_bin=max_bin, ref=cuts)
    dvals = [
        (xgb.QuantileDMatrix(f[job.input_cols], f[job.label_col], ref=dtrain, max_bin=max_bin), name)
        for name, f in frames
    ]
    booster = xgb.train(job.params, dtrain, job.num_round, evals=dvals, evals_result=result, verbose_eval=False)
    return {"model": bytes(booster.save_raw("ubj")) if rank == 0 else b"", "evals": result}


def shard_cuts(features: pd.DataFrame, max_bin: int, max_values: int) -> xgb.QuantileDMatrix | None:
    """A matrix carrying the histogram cuts of all ranks' rows, to build this rank's training matrix from
    (`ref`); None: let the training matrix sketch its own rows (xgboost's distributed sketch). Collective.

    Why: xgboost's distributed sketch prunes every rank's summary before merging, so its cuts differ from
    the ones one process computes on all rows, and on continuous features that moves the model's error by
    several percent (as much as changing max_bin by one). With up to `max_values` feature values in all,
    rank 0 receives every rank's features and sketches them alone (the other ranks add empty matrices to the
    merge): exactly the cuts of single-process xgboost on the rows in rank order. Above it, no rank holds
    more than its own rows and the cuts are the distributed sketch's (within xgboost's sketch error).
    """
    rows = int(collective.allreduce(np.array([len(features)], dtype=np.int64), collective.Op.SUM)[0])
    if rows * features.shape[1] > max_values:
        return None
    rank = collective.get_rank()
    mine = features.to_numpy(dtype=np.float32, na_value=np.nan)
    parts: list[np.ndarray] = []
    for root in range(collective.get_world_size()):  # broadcast reaches every rank; only rank 0 keeps them
        part: Any = collective.broadcast(mine if root == rank else None, root)
        if rank == 0:
            parts.append(part)
    everything = np.concatenate(parts) if rank == 0 else mine[:0]
    return xgb.QuantileDMatrix(everything, max_bin=max_bin, feature_names=list(features.columns))


@dataclass(frozen=True)
class _FitJob:
    comm_args: dict[str, Any]
    params: dict[str, Any]
    num_round: int
    input_cols: list[str]
    label_col: str
    exact_cuts_max_values: int


class XGBEstimator:
    """Snowflake's distributed XGBoost estimator.

    Args:
        n_estimators: boosting rounds.
        objective: used unless `params` sets one.
        params: xgboost training parameters.
        scaling_config: workers and resources; default one worker per node using the node's CPUs.

    `exact_cuts_max_values` (set it on an instance): up to this many feature values (rows x input columns),
    the histogram cuts are single-process xgboost's exactly (see `shard_cuts`); 0 always uses xgboost's
    distributed sketch.
    """

    exact_cuts_max_values: int = EXACT_CUTS_MAX_VALUES

    def __init__(
        self,
        n_estimators: int = 100,
        objective: str = "reg:squarederror",
        params: dict[str, Any] | None = None,
        scaling_config: XGBScalingConfig | None = None,
    ) -> None:
        self.n_estimators = n_estimators
        self.objective = objective
        self.params = dict(params or {})
        self.scaling_config = scaling_config or XGBScalingConfig()

    def fit(
        self,
        data: Shardable,
        input_cols: list[str] | None = None,
        label_col: str | None = None,
        eval_set: Sequence[tuple[Shardable, str]] | dict[str, Shardable] | None = None,
    ) -> XGBModel:
        """Train one model over all rows of `data`, each worker loading only its shard.

        `eval_set` is sharded the same way; the reported metrics are over all its rows.

        Raises:
            ValueError: no label column.
            RuntimeError: a worker failed (the message holds its rank and traceback) or cannot be placed.
        """
        if label_col is None:
            raise ValueError("label_col is required")
        if not ray.is_initialized():
            ray.init(address="auto")
        nodes = alive_nodes()
        workers, cpus, gpu = resolve_scaling(
            self.scaling_config, [n["Resources"].get("CPU", 0) for n in nodes], [n["Resources"].get("GPU", 0) for n in nodes]
        )
        if gpu and self.scaling_config.use_gpu is None and not _probe_cuda():
            gpu = False  # auto: only where xgboost can use the devices Ray advertises
            print("kubepool: XGBEstimator: the nodes advertise GPUs but xgboost cannot use them there (no CUDA "
                  "build or no driver): training on CPUs; run GPU pools on the CUDA image", flush=True)
        bundle = {"CPU": float(cpus), **({"GPU": 1.0} if gpu else {})}
        one_per_node = workers <= len(nodes)
        strategy = "STRICT_SPREAD" if one_per_node and workers > 1 else "SPREAD"
        pg = reserve([dict(bundle) for _ in range(workers)], strategy, "XGBEstimator")
        refs: list[ray.ObjectRef] = []
        try:
            per_node = 1 if one_per_node else None
            eval_specs = [(name, plan_shards(d, workers, per_node)) for name, d in named_evals(eval_set)]
            train_specs = plan_shards(data, workers, per_node)
            cols = input_cols or _columns_of(data, label_col)
            # The tracker binds the driver's node IP, which every worker can reach (in a pod: the pod IP).
            tracker = RabitTracker(
                n_workers=workers, host_ip=ray.util.get_node_ip_address(), sortby="task", timeout=TRACKER_TIMEOUT_S
            )
            tracker.start()
            job = _FitJob(
                {**tracker.worker_args(), "dmlc_timeout": 1800},
                training_params(self.params, self.objective, cpus, gpu),
                self.n_estimators,
                cols,
                label_col,
                self.exact_cuts_max_values,
            )
            task = ray.remote(max_retries=0)(_fit_rank)  # a re-run rank would rejoin a finished collective
            refs = [
                task.options(num_cpus=cpus, num_gpus=1 if gpu else 0, scheduling_strategy=in_bundle(pg, r)).remote(
                    r, job, train_specs[r], [(name, specs[r]) for name, specs in eval_specs]
                )
                for r in range(workers)
            ]
            rank0 = gather(refs, list(range(workers)), "XGBEstimator")[0]
            tracker.wait_for(TRACKER_TIMEOUT_S)
        finally:
            release_tasks(refs, pg)
        booster = xgb.Booster(model_file=bytearray(rank0["model"]))
        return XGBModel(booster=booster, input_cols=cols, evals_result=rank0["evals"])


def _columns_of(data: Shardable, label_col: str) -> list[str]:
    """Every column but the label, read from the data's schema (no rows are loaded on the driver)."""
    if isinstance(data, ChannelData):
        return _columns_of(data.path, label_col)
    if isinstance(data, pd.DataFrame):
        names = list(data.columns)
    elif isinstance(data, ray.data.Dataset):
        names = list(data.schema().names)
    else:
        first = list_files(data)[0]
        names = list(pd.read_csv(first, nrows=0).columns) if first.lower().endswith(".csv") else _parquet_names(first)
    return [c for c in names if c != label_col]


def _parquet_names(path: str) -> list[str]:
    import pyarrow.parquet as pq

    return list(pq.read_schema(path).names)
