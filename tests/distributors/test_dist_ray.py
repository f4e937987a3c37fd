"""PyTorchDistributor and XGBEstimator on a real 3-node Ray cluster (loopback IPs 127.0.6.2-4)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import ray
import xgboost as xgb

from kubepool.distributors.data import ChannelData, list_files, read_files
from kubepool.distributors.loopback import LoopbackRayCluster
from kubepool.distributors.pytorch import (
    PyTorchDistributor,
    PyTorchScalingConfig,
    WorkerResourceConfig,
    get_context,
)
from kubepool.distributors.xgboost import XGBEstimator, XGBScalingConfig

pytestmark = [pytest.mark.ray, pytest.mark.timeout(300)]

ONE_PER_NODE = PyTorchScalingConfig(3, 1, WorkerResourceConfig(num_cpus=1))


def _ddp_train() -> None:
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    ctx = get_context()
    dist.init_process_group(backend=ctx.get_default_backend())  # as written for Snowflake/torchrun: a no-op here
    df = ctx.get_dataset_map()["train"].get_shard().to_pandas()
    x = torch.tensor(df[["a", "b"]].to_numpy(), dtype=torch.float32)
    y = torch.tensor(df["y"].to_numpy(), dtype=torch.float32)
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(2, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(60):
        opt.zero_grad()
        loss = ((model(x).squeeze(-1) - y) ** 2).mean()
        loss.backward()
        opt.step()
    me = {
        "rank": ctx.get_rank(),
        "local_rank": ctx.get_local_rank(),
        "node_rank": ctx.get_node_rank(),
        "world": ctx.get_world_size(),
        "local_world": ctx.get_local_world_size(),
        "ip": __import__("ray").util.get_node_ip_address(),
        "rows": len(df),
        "lr": ctx.get_hyper_params()["lr"],
        "env_rank": os.environ["RANK"],
    }
    everyone: list[Any] = [None] * ctx.get_world_size()
    dist.all_gather_object(everyone, me)
    if ctx.get_rank() == 0:
        torch.save(model.module.state_dict(), os.path.join(ctx.get_model_dir(), "model.pt"))
        ctx.get_metrics_reporter().log_metrics({"loss": loss.item(), "workers": everyone, "master": ctx.get_master_addr()})


def test_pytorch_ddp_one_worker_per_node(ray_cluster: LoopbackRayCluster) -> None:
    rng = np.random.default_rng(0)
    df = pd.DataFrame({"a": rng.normal(size=300), "b": rng.normal(size=300)})
    df["y"] = 2 * df.a - df.b
    result = PyTorchDistributor(_ddp_train, ONE_PER_NODE).run(dataset_map={"train": df}, hyper_params={"lr": "0.1"})

    workers = result.metrics["workers"]
    assert [w["rank"] for w in workers] == [0, 1, 2] and [w["env_rank"] for w in workers] == ["0", "1", "2"]
    assert [w["node_rank"] for w in workers] == [0, 1, 2]
    assert {w["local_rank"] for w in workers} == {0} and {w["local_world"] for w in workers} == {1}
    assert {w["world"] for w in workers} == {3} and {w["lr"] for w in workers} == {"0.1"}
    assert sorted(w["ip"] for w in workers) == sorted(ray_cluster.ips)  # three distinct nodes
    assert [w["rows"] for w in workers] == [100, 100, 100]  # each rank got its own third
    assert result.metrics["master"] == workers[0]["ip"]
    assert result.metrics["loss"] < 1e-3  # DDP averaged the gradients: one model fits all shards
    assert list(result.model_files) == ["model.pt"] and (Path(result.model_dir or "") / "model.pt").is_file()


def _fails_on_rank_1() -> None:
    import torch
    import torch.distributed as dist

    if get_context().get_rank() == 1:
        raise ValueError("boom from rank 1")
    dist.barrier()  # ranks 0 and 2 would wait here for ever; the distributor must not
    torch.zeros(1)


def test_pytorch_failing_rank_surfaces_its_traceback(ray_cluster: LoopbackRayCluster) -> None:
    with pytest.raises(RuntimeError) as err:
        PyTorchDistributor(_fails_on_rank_1, ONE_PER_NODE).run()
    text = str(err.value)
    assert "rank 1" in text and "ValueError: boom from rank 1" in text
    assert "Traceback" in text and "_fails_on_rank_1" in text


def _tabular(n: int, seed: int, classes: int = 0) -> pd.DataFrame:
    """Continuous features (float64, as generated): a regression target (`classes=0`) or class labels."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 6))
    signal = 2 * x[:, 0] + np.sin(3 * x[:, 1]) - x[:, 2] * x[:, 3]
    df = pd.DataFrame(x, columns=FEATURES)
    if classes == 0:
        df["y"] = signal + rng.normal(size=n) * 0.1
    else:  # classes by quantile of the noisy signal: balanced
        noisy = signal + rng.normal(scale=0.5, size=n)
        df["y"] = np.searchsorted(np.quantile(noisy, np.linspace(0, 1, classes + 1)[1:-1]), noisy)
    return df


FEATURES = [f"f{i}" for i in range(6)]


def _single_process(
    params: dict[str, Any], train: pd.DataFrame, test: pd.DataFrame, rounds: int
) -> tuple[xgb.Booster, dict[str, dict[str, list[float]]]]:
    """The reference: one process, all training rows, the same params (xgboost's own default cuts)."""
    history: dict[str, dict[str, list[float]]] = {}
    dtrain = xgb.DMatrix(train[FEATURES], train["y"])
    dtest = xgb.DMatrix(test[FEATURES], test["y"])
    evals = [(dtest, "test")]
    booster = xgb.train({"tree_method": "hist", **params}, dtrain, rounds, evals=evals, evals_result=history, verbose_eval=False)
    return booster, history


def _rmse(pred: np.ndarray, y: pd.Series) -> float:
    return float(np.sqrt(np.mean((pred - y.to_numpy()) ** 2)))


def _logloss(prob: np.ndarray, y: pd.Series) -> float:
    y = y.to_numpy()
    p = prob if prob.ndim == 2 else np.stack([1 - prob, prob], axis=1)
    return float(-np.mean(np.log(np.clip(p[np.arange(len(y)), y], 1e-15, 1))))


def test_xgb_regression_on_continuous_features_matches_single_process(ray_cluster: LoopbackRayCluster) -> None:
    df = _tabular(3000, 1)
    train, test = df.iloc[:2400], df.iloc[2400:]
    params = {"max_depth": 4, "eta": 0.3}
    model = XGBEstimator(n_estimators=20, params=params, scaling_config=XGBScalingConfig(3, 1)).fit(
        train, input_cols=FEATURES, label_col="y", eval_set=[(ray.data.from_pandas(test), "test")]
    )
    ref, ref_history = _single_process({**params, "objective": "reg:squarederror"}, train, test, 20)
    pred, ref_pred = model.predict(test), ref.predict(xgb.DMatrix(test[FEATURES]))
    assert model.num_boosted_rounds() == ref.num_boosted_rounds() == 20
    assert _rmse(pred, test["y"]) == pytest.approx(_rmse(ref_pred, test["y"]), rel=0.01)
    # same cuts, same trees: the predictions agree row by row, not just on average
    np.testing.assert_allclose(pred, ref_pred, rtol=1e-4, atol=1e-4)
    # the Ray Dataset eval set was split by rows across the workers; the allreduced metric covers all of them
    assert list(model.evals_result) == ["test"] and list(model.evals_result["test"]) == ["rmse"]
    np.testing.assert_allclose(model.evals_result["test"]["rmse"], ref_history["test"]["rmse"], rtol=1e-4)


def test_xgb_regression_with_the_distributed_sketch_stays_close(ray_cluster: LoopbackRayCluster) -> None:
    """Above the exact-cuts size every rank sketches its own rows (xgboost's merge): no rank holds all
    rows, and the model is a different but as good one (cuts within the sketch's error, not the same)."""
    df = _tabular(3000, 1)
    train, test = df.iloc[:2400], df.iloc[2400:]
    params = {"max_depth": 4, "eta": 0.3}
    estimator = XGBEstimator(n_estimators=20, params=params, scaling_config=XGBScalingConfig(3, 1))
    estimator.exact_cuts_max_values = 0
    model = estimator.fit(train, input_cols=FEATURES, label_col="y")
    ref, _ = _single_process({**params, "objective": "reg:squarederror"}, train, test, 20)
    pred, ref_pred = model.predict(test), ref.predict(xgb.DMatrix(test[FEATURES]))
    assert model.num_boosted_rounds() == 20
    assert not np.allclose(pred, ref_pred, rtol=1e-4, atol=1e-4)  # the other path: different cuts
    assert _rmse(pred, test["y"]) == pytest.approx(_rmse(ref_pred, test["y"]), rel=0.25)


def test_xgb_classification_from_parquet_files_one_worker_per_node(
    ray_cluster: LoopbackRayCluster, tmp_path: Path
) -> None:
    df = _tabular(3000, 2, classes=2)
    train, test = df.iloc[:2400], df.iloc[2400:]
    for i in range(6):  # 6 files for 3 workers: each worker reads its own 2
        train.iloc[i * 400 : (i + 1) * 400].to_parquet(tmp_path / f"part-{i}.parquet")
    params = {"max_depth": 4, "eta": 0.3, "objective": "binary:logistic"}
    model = XGBEstimator(n_estimators=20, params=params, scaling_config=XGBScalingConfig(num_cpu_per_worker=1)).fit(
        str(tmp_path), label_col="y", eval_set={"test": test}
    )
    ref, ref_history = _single_process(params, train, test, 20)
    prob, ref_prob = model.predict(test), ref.predict(xgb.DMatrix(test[FEATURES]))
    acc, ref_acc = float(np.mean((prob > 0.5) == test["y"])), float(np.mean((ref_prob > 0.5) == test["y"]))
    assert model.num_boosted_rounds() == 20 and acc > 0.8
    assert acc == pytest.approx(ref_acc, rel=0.01)
    assert _logloss(prob, test["y"]) == pytest.approx(_logloss(ref_prob, test["y"]), rel=0.01)
    np.testing.assert_allclose(prob, ref_prob, atol=1e-4)
    np.testing.assert_allclose(model.evals_result["test"]["logloss"], ref_history["test"]["logloss"], rtol=1e-4)
    out = tmp_path / "model.ubj"
    model.save_model(out)
    assert xgb.Booster(model_file=str(out)).num_boosted_rounds() == 20


def test_xgb_multiclass_matches_single_process(ray_cluster: LoopbackRayCluster) -> None:
    df = _tabular(3000, 4, classes=3)
    train, test = df.iloc[:2400], df.iloc[2400:]
    params = {"max_depth": 4, "eta": 0.3, "objective": "multi:softprob", "num_class": 3}
    model = XGBEstimator(n_estimators=10, params=params, scaling_config=XGBScalingConfig(3, 1)).fit(
        train, label_col="y", eval_set=[(test, "test")]
    )
    ref, ref_history = _single_process(params, train, test, 10)
    prob, ref_prob = model.predict(test), ref.predict(xgb.DMatrix(test[FEATURES]))
    acc, ref_acc = float(np.mean(prob.argmax(1) == test["y"])), float(np.mean(ref_prob.argmax(1) == test["y"]))
    assert model.num_boosted_rounds() == ref.num_boosted_rounds() == 10 and prob.shape == (600, 3)
    assert acc == pytest.approx(ref_acc, rel=0.01) and acc > 0.6
    assert _logloss(prob, test["y"]) == pytest.approx(_logloss(ref_prob, test["y"]), rel=0.01)
    np.testing.assert_allclose(prob, ref_prob, atol=1e-4)
    assert len(model.evals_result["test"]["mlogloss"]) == 10
    np.testing.assert_allclose(model.evals_result["test"]["mlogloss"], ref_history["test"]["mlogloss"], rtol=1e-4)


@pytest.mark.parametrize("source", ["ray_dataset", "csv_files", "channel_dir"])
def test_xgb_every_input_kind_trains_the_single_process_model(
    ray_cluster: LoopbackRayCluster, tmp_path: Path, source: str
) -> None:
    """Each input kind reaches the workers as their own rows, in order: same rows, same cuts, same model."""
    df = _tabular(1500, 5)
    data: Any
    if source == "ray_dataset":  # one block: split by row counts
        data = ray.data.from_pandas(df)
    elif source == "csv_files":  # 4 files for 3 workers: contiguous runs of files
        data = []
        for i in range(4):
            df.iloc[i * 375 : (i + 1) * 375].to_csv(tmp_path / f"part-{i}.csv", index=False)
            data.append(str(tmp_path / f"part-{i}.csv"))
    else:  # a replicated job channel holding 2 files: every worker reads both and keeps its rows
        channel = tmp_path / "input" / "data" / "train"
        channel.mkdir(parents=True)
        df.iloc[:700].to_parquet(channel / "a.parquet")
        df.iloc[700:].to_parquet(channel / "b.parquet")
        data = ChannelData("train", sharded=False, base_dir=str(tmp_path))
    params = {"max_depth": 3, "eta": 0.3, "objective": "reg:squarederror"}
    model = XGBEstimator(n_estimators=5, params=params, scaling_config=XGBScalingConfig(3, 1)).fit(data, label_col="y")
    rows = read_files(list_files(tmp_path)) if source == "csv_files" else df  # what one process would read
    ref, _ = _single_process(params, rows, df, 5)
    assert model.input_cols == FEATURES and model.num_boosted_rounds() == 5
    np.testing.assert_allclose(model.predict(df), ref.predict(xgb.DMatrix(df[FEATURES])), atol=1e-5)


def test_xgb_failing_worker_surfaces_its_traceback(ray_cluster: LoopbackRayCluster) -> None:
    df = _tabular(300, 3)
    with pytest.raises(RuntimeError) as err:
        XGBEstimator(n_estimators=2, scaling_config=XGBScalingConfig(3, 1)).fit(df, input_cols=["f0", "nope"], label_col="y")
    assert "XGBEstimator: rank" in str(err.value) and "KeyError" in str(err.value) and "Traceback" in str(err.value)


def _two_local_ranks() -> None:
    import os

    import torch
    import torch.distributed as dist

    ctx = get_context()
    t = torch.tensor([float(ctx.get_rank() + 1)])
    dist.all_reduce(t)  # 1 + 2
    me = (ctx.get_rank(), ctx.get_local_rank(), ctx.get_local_world_size(), ctx.get_node_rank())
    everyone: list[Any] = [None] * ctx.get_world_size()
    dist.all_gather_object(everyone, me)
    am = ctx.get_artifact_manager()
    assert am is not None
    if ctx.get_rank() == 0:
        ckpt = os.path.join(ctx.get_model_dir(), "ckpt.txt")
        with open(ckpt, "w") as f:
            f.write("epoch 1")
        am.upload(ckpt, "checkpoints/ckpt.txt")
        ctx.get_metrics_reporter().log_metrics({"sum": t.item(), "ranks": everyone, "stage": am.list()})


def test_pytorch_two_workers_on_one_node_with_artifact_stage(ray_cluster: LoopbackRayCluster, tmp_path: Path) -> None:
    cfg = PyTorchScalingConfig(num_nodes=1, num_workers_per_node=2, resource_requirements_per_worker=WorkerResourceConfig(1))
    result = PyTorchDistributor(_two_local_ranks, cfg).run(artifact_stage_location=str(tmp_path / "stage"))
    assert result.metrics["sum"] == 3.0
    assert result.metrics["ranks"] == [(0, 0, 2, 0), (1, 1, 2, 0)]
    assert result.metrics["stage"] == ["checkpoints/ckpt.txt"]
    assert result.model_dir == str(tmp_path / "stage" / "model")
    assert (tmp_path / "stage" / "model" / "ckpt.txt").read_text() == "epoch 1"
