"""What a PyTorch train function sees on its worker: `get_context()` and the objects it hands out.

Snowflake's names (`Context`, `get_context`, `MetricsReporter.log_metrics`, `ArtifactManager`), so a train
function written for `snowflake.ml.modeling.distributors.pytorch` runs unchanged. The worker task in
`kubepool.distributors.pytorch` builds the Context and installs it for the duration of one run.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from kubepool.contract import DEFAULT_BASE_DIR, ENV_BASE_DIR, ENV_INSTANCE_ID
from kubepool.distributors.data import ShardSpec, load_shard


def job_model_dir(env: Mapping[str, str] | None = None) -> Path | None:
    """Inside a kubepool job, this instance's SageMaker model dir (/opt/ml/model), which the runtime keeps after
    the job as model.tar.gz (spec.output); None elsewhere (a plain Ray cluster)."""
    env = os.environ if env is None else env
    if ENV_INSTANCE_ID not in env:
        return None
    return Path(env.get(ENV_BASE_DIR, DEFAULT_BASE_DIR)) / "model"


class MetricsReporter:
    """Collects `log_metrics` calls; the distributor returns rank 0's."""

    def __init__(self) -> None:
        self.history: list[dict[str, Any]] = []

    def log_metrics(self, metrics: dict[str, Any]) -> None:
        self.history.append(dict(metrics))

    def merged(self) -> dict[str, Any]:
        """Every reported name with its latest value."""
        out: dict[str, Any] = {}
        for m in self.history:
            out.update(m)
        return out


class ArtifactManager:
    """Checkpoints and other files under `artifact_stage_location`, a directory every node mounts."""

    def __init__(self, stage_location: str) -> None:
        self.root = Path(stage_location.removeprefix("file://"))
        self.root.mkdir(parents=True, exist_ok=True)

    def upload(self, local_path: str, name: str | None = None) -> str:
        """Copy a file or directory into the stage; returns its path there."""
        src = Path(local_path)
        dst = self.root / (name or src.name)
        if src.is_dir():
            shutil.copytree(src, dst, dirs_exist_ok=True)
        else:
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
        return str(dst)

    def download(self, name: str, local_path: str) -> str:
        src, dst = self.root / name, Path(local_path)
        if src.is_dir():
            shutil.copytree(src, dst, dirs_exist_ok=True)
        else:
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
        return str(dst)

    def list(self) -> list[str]:
        return sorted(str(p.relative_to(self.root)) for p in self.root.rglob("*") if p.is_file())


class DataShard:
    """One dataset of `dataset_map`, as this worker's rows; loaded on first use."""

    def __init__(self, spec: ShardSpec) -> None:
        self._spec = spec
        self._df: pd.DataFrame | None = None

    def get_shard(self) -> DataShard:
        """Snowflake's ShardedDataConnector call; the shard is already this worker's."""
        return self

    def to_pandas(self) -> pd.DataFrame:
        if self._df is None:
            self._df = load_shard(self._spec)
        return self._df

    def to_torch_dataset(self) -> Any:
        """A map-style torch Dataset of rows as {column: tensor} over the numeric and boolean columns;
        DataLoader's default collate batches it."""
        import torch
        from torch.utils.data import Dataset

        df = self.to_pandas().select_dtypes(include=["number", "bool"])
        cols = {c: torch.as_tensor(df[c].to_numpy()) for c in df.columns}
        n = len(df)

        class _Rows(Dataset[dict[str, Any]]):
            def __len__(self) -> int:
                return n

            def __getitem__(self, i: int) -> dict[str, Any]:
                return {c: t[i] for c, t in cols.items()}

        return _Rows()


@dataclass
class Context:
    """The distributed environment of one worker of one run."""

    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    node_rank: int
    master_addr: str
    master_port: int
    backend: str
    supported_backends: list[str]
    hyper_params: dict[str, str] | None
    dataset_map: dict[str, Any] | None
    model_dir: str
    artifact_manager: ArtifactManager | None = None
    metrics_reporter: MetricsReporter = field(default_factory=MetricsReporter)

    def get_rank(self) -> int:
        return self.rank

    def get_local_rank(self) -> int:
        return self.local_rank

    def get_world_size(self) -> int:
        return self.world_size

    def get_local_world_size(self) -> int:
        return self.local_world_size

    def get_node_rank(self) -> int:
        return self.node_rank

    def get_master_addr(self) -> str:
        return self.master_addr

    def get_master_port(self) -> int:
        return self.master_port

    def get_default_backend(self) -> str:
        return self.backend

    def get_supported_backends(self) -> list[str]:
        return list(self.supported_backends)

    def get_hyper_params(self) -> dict[str, str] | None:
        return self.hyper_params

    def get_dataset_map(self) -> dict[str, Any] | None:
        return self.dataset_map

    def get_model_dir(self) -> str:
        return self.model_dir

    def get_metrics_reporter(self) -> MetricsReporter:
        return self.metrics_reporter

    def get_artifact_manager(self) -> ArtifactManager | None:
        return self.artifact_manager


_current: Context | None = None


def set_context(ctx: Context | None) -> None:
    global _current
    _current = ctx


def get_context() -> Context:
    """The running worker's Context; only valid inside a train function started by PyTorchDistributor."""
    if _current is None:
        raise RuntimeError("no PyTorch context: get_context() works only inside a PyTorchDistributor train_func")
    return _current
