"""Splitting training data across workers so each worker loads only its own shard.

The driver turns what the user passed (a pandas DataFrame, a `ray.data.Dataset`, parquet/CSV files, or a
directory such as a channel dir) into one small `ShardSpec` per worker; the worker turns its spec into a
pandas DataFrame with `load_shard`. Files are dealt to workers by name (`kubepool.contract.shard`), so a
worker reads only its files; with fewer files than workers every worker reads them and keeps its row range.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeAlias

import numpy as np
import pandas as pd
import ray

from kubepool.contract import shard

DATA_SUFFIXES = (".parquet", ".pq", ".csv")
Shardable: TypeAlias = pd.DataFrame | ray.data.Dataset | str | Path | Sequence[str | Path]


@dataclass(frozen=True)
class ShardSpec:
    """Where one worker's rows come from; small enough to ship with the actor call."""

    kind: Literal["object", "dataset", "files", "file_rows"]
    payload: Any  # ObjectRef of a DataFrame | MaterializedDataset | list of file paths
    index: int = 0
    count: int = 1


def is_shardable(value: object) -> bool:
    if isinstance(value, pd.DataFrame | ray.data.Dataset | str | Path):
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


def plan_shards(data: Shardable, count: int) -> list[ShardSpec]:
    """One ShardSpec per worker rank (driver side)."""
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
        return [ShardSpec("files", shard(files, count, i), i, count) for i in range(count)]
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
    df = read_files(spec.payload)
    return df.iloc[slice(*row_range(len(df), spec.index, spec.count))].reset_index(drop=True)
