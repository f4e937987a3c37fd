"""Splitting training data across workers so each worker loads only its own shard.

The driver turns what the user passed (a pandas DataFrame, a `ray.data.Dataset`, parquet/CSV files, a
directory, or a job input channel) into one small `ShardSpec` per worker; the worker turns its spec into a
pandas DataFrame with `load_shard`. Files are split by name into contiguous runs, so a worker reads only
its files and the shards in rank order are all rows in file order (as one process reading the sorted files
sees them: XGBEstimator's cuts depend on row order); with fewer files than workers every worker reads
them and keeps its row range.
A ShardedByS3Key channel already holds a different share on every node, so its workers read their own
node's copy of the channel directory, split among the workers of that node.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeAlias

import numpy as np
import pandas as pd
import ray

from kubepool.contract import DEFAULT_BASE_DIR, ENV_BASE_DIR, Distribution, load_contract

DATA_SUFFIXES = (".parquet", ".pq", ".csv")


@dataclass(frozen=True)
class ChannelData:
    """The job's input channel `name` as training data, at `<base>/input/data/<name>` on every node.

    `sharded=None` reads the channel's distribution from the runtime contract."""

    name: str
    sharded: bool | None = None
    base_dir: str | None = None

    @property
    def path(self) -> str:
        return str(Path(self.base_dir or os.environ.get(ENV_BASE_DIR, DEFAULT_BASE_DIR)) / "input" / "data" / self.name)

    def is_sharded(self) -> bool:
        if self.sharded is not None:
            return self.sharded
        contract, _ = load_contract()
        channel = next((c for c in contract.channels if c.name == self.name), None)
        if channel is None:
            raise KeyError(f"job {contract.job_name} has no channel {self.name!r}")
        return channel.distribution == Distribution.SHARDED_BY_S3_KEY


Shardable: TypeAlias = pd.DataFrame | ray.data.Dataset | ChannelData | str | Path | Sequence[str | Path]


@dataclass(frozen=True)
class ShardSpec:
    """Where one worker's rows come from; small enough to ship with the task. For `node_dir`,
    index/count are the worker's position among the workers of its node."""

    kind: Literal["object", "dataset", "files", "file_rows", "node_dir"]
    payload: Any  # ObjectRef of a DataFrame | MaterializedDataset | list of file paths | directory
    index: int = 0
    count: int = 1


def is_shardable(value: object) -> bool:
    if isinstance(value, pd.DataFrame | ray.data.Dataset | ChannelData | str | Path):
        return True
    return isinstance(value, list | tuple) and bool(value) and all(isinstance(v, str | Path) for v in value)


def list_files(paths: str | Path | Sequence[str | Path]) -> list[str]:
    """Data files under `paths` (files kept as given, directories searched recursively), sorted."""
    items = [paths] if isinstance(paths, str | Path) else list(paths)
    files: list[str] = []
    for item in map(Path, items):
        if item.is_dir():
            files += [str(p) for p in item.rglob("*") if p.is_file() and p.suffix.lower() in DATA_SUFFIXES]
        elif item.is_file():
            files.append(str(item))
        else:
            raise FileNotFoundError(f"no such data file or directory: {item}")
    if not files:
        raise FileNotFoundError(f"no {'/'.join(DATA_SUFFIXES)} files under {items}")
    return sorted(files)


def row_range(n_rows: int, index: int, count: int) -> tuple[int, int]:
    """Contiguous, balanced rows [start, stop) of part `index` of `count` (sizes differ by at most one)."""
    bounds = np.linspace(0, n_rows, count + 1).round().astype(int)
    return int(bounds[index]), int(bounds[index + 1])


def plan_shards(data: Shardable, count: int, per_node: int | None = None) -> list[ShardSpec]:
    """One ShardSpec per worker rank (driver side). `per_node`: workers per node when ranks are laid out
    node by node (needed for sharded channels; None when the layout is not fixed).

    Raises:
        ValueError: a sharded channel without workers on every node in a fixed per-node layout.
    """
    if isinstance(data, ChannelData):
        if not data.is_sharded():
            return plan_shards(data.path, count)  # replicated: every node, the driver's included, has it all
        nodes = sum(1 for n in ray.nodes() if n.get("Alive"))
        if per_node is None or count != per_node * nodes:
            # every node holds a different part: a node without workers would leave its rows out
            raise ValueError(f"sharded channel {data.name!r} needs the same number of workers on each of the {nodes} nodes")
        return [ShardSpec("node_dir", data.path, rank % per_node, per_node) for rank in range(count)]
    if isinstance(data, pd.DataFrame):
        parts = [data.iloc[slice(*row_range(len(data), i, count))] for i in range(count)]
        return [ShardSpec("object", ray.put(p), i, count) for i, p in enumerate(parts)]
    if isinstance(data, ray.data.Dataset):
        # Split by row count, not by block: a one-block dataset would otherwise leave workers empty.
        n = data.count()
        cuts = [row_range(n, i, count)[1] for i in range(count - 1)]
        splits = data.split_at_indices(cuts) if cuts else [data.materialize()]
        return [ShardSpec("dataset", s, i, count) for i, s in enumerate(splits)]
    files = list_files(data)
    if len(files) >= count:
        return [ShardSpec("files", files[slice(*row_range(len(files), i, count))], i, count) for i in range(count)]
    return [ShardSpec("file_rows", files, i, count) for i in range(count)]


def read_files(files: Sequence[str]) -> pd.DataFrame:
    frames = [pd.read_csv(f) if f.lower().endswith(".csv") else pd.read_parquet(f) for f in files]
    return pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]


def load_shard(spec: ShardSpec) -> pd.DataFrame:
    """This worker's rows as one DataFrame (worker side)."""
    if spec.kind == "object":
        return ray.get(spec.payload) if isinstance(spec.payload, ray.ObjectRef) else spec.payload
    if spec.kind == "dataset":
        return spec.payload.to_pandas()
    if spec.kind == "files":
        return read_files(spec.payload).reset_index(drop=True)
    if spec.kind == "node_dir":  # this node's share of a sharded channel, split among its workers
        return load_shard(plan_shards(spec.payload, spec.count)[spec.index])
    df = read_files(spec.payload)
    return df.iloc[slice(*row_range(len(df), spec.index, spec.count))].reset_index(drop=True)
