"""PyTorchDistributor picks its collective backend by what CUDA sees where the ranks run, not by what Ray was
told: nodes that advertise GPUs to Ray but whose torch sees no device (a CPU build, no driver) train with gloo and
say why, instead of failing at nccl's first collective."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kubepool.distributors.loopback import LoopbackRayCluster
from kubepool.distributors.pytorch import (
    PyTorchDistributor,
    PyTorchScalingConfig,
    WorkerResourceConfig,
    collective_backend,
    get_context,
)

pytestmark = pytest.mark.ray


def test_backend_rule() -> None:
    assert collective_backend(0, 0) == ("gloo", None)
    assert collective_backend(0, 8) == ("gloo", None)  # ranks that hold no GPU never use nccl
    assert collective_backend(1, 1) == ("nccl", None)
    backend, why = collective_backend(1, 0)
    assert backend == "gloo" and why is not None and "CUDA sees no device" in why


@pytest.fixture(scope="module")
def gpu_claiming_cluster() -> Iterator[LoopbackRayCluster]:
    with LoopbackRayCluster(("127.0.6.5", "127.0.6.6"), num_cpus=1, num_gpus=1) as cluster:
        yield cluster


def _which_backend() -> None:
    import torch.distributed as dist

    dist.barrier()
    get_context().get_metrics_reporter().log_metrics({"backend": dist.get_backend()})


def test_gpus_claimed_but_not_seen_train_with_gloo(gpu_claiming_cluster: LoopbackRayCluster,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    config = PyTorchScalingConfig(2, 1, WorkerResourceConfig(num_cpus=1, num_gpus=1))
    result = PyTorchDistributor(_which_backend, config).run()
    assert result.metrics["backend"] == "gloo"
    assert "CUDA sees no device" in capsys.readouterr().out


def test_xgb_auto_gpu_trains_on_cpus_where_cuda_cannot_be_used(gpu_claiming_cluster: LoopbackRayCluster,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    import numpy as np
    import pandas as pd

    from kubepool.distributors.xgboost import XGBEstimator, XGBScalingConfig

    rng = np.random.default_rng(0)
    df = pd.DataFrame({"a": rng.normal(size=200), "b": rng.normal(size=200)})
    df["y"] = 3 * df.a - df.b
    est = XGBEstimator(n_estimators=5, objective="reg:squarederror", scaling_config=XGBScalingConfig(num_cpu_per_worker=1))
    model = est.fit(df, label_col="y")
    assert model is not None
    assert "xgboost cannot use them there" in capsys.readouterr().out
