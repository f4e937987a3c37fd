"""Pure helpers of the distributors: sharding, interface choice, scaling rules, context objects."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pandas as pd
import pytest

from kubepool.distributors.context import ArtifactManager, MetricsReporter, get_context
from kubepool.distributors.data import (
    ChannelData,
    ShardSpec,
    list_files,
    load_shard,
    plan_shards,
    read_files,
    row_range,
)
from kubepool.distributors.netif import pick_interface
from kubepool.distributors.workers import node_bundles
from kubepool.distributors.xgboost import XGBScalingConfig, resolve_scaling, training_params


@pytest.mark.parametrize("n_rows,count", [(10, 3), (3, 3), (2, 3), (1000, 7), (0, 2)])
def test_row_ranges_are_disjoint_complete_and_balanced(n_rows: int, count: int) -> None:
    parts = [row_range(n_rows, i, count) for i in range(count)]
    assert parts[0][0] == 0 and parts[-1][1] == n_rows
    assert all(a[1] == b[0] for a, b in zip(parts, parts[1:], strict=False))
    sizes = [b - a for a, b in parts]
    assert max(sizes) - min(sizes) <= 1


def _write(tmp: Path, names: list[str], rows: int = 4) -> None:
    for i, name in enumerate(names):
        df = pd.DataFrame({"x": range(i * rows, (i + 1) * rows)})
        p = tmp / name
        p.parent.mkdir(parents=True, exist_ok=True)
        df.to_csv(p, index=False) if name.endswith(".csv") else df.to_parquet(p)


def test_files_are_dealt_to_workers_and_each_reads_only_its_own(tmp_path: Path) -> None:
    _write(tmp_path, ["a.parquet", "b.parquet", "sub/c.csv", "d.parquet", "e.parquet"])
    (tmp_path / "README.txt").write_text("not data")
    specs = plan_shards(str(tmp_path), 2)
    assert [s.kind for s in specs] == ["files", "files"] and [len(s.payload) for s in specs] == [2, 3]
    assert sum((s.payload for s in specs), []) == list_files(tmp_path)
    rows = [load_shard(s)["x"].tolist() for s in specs]
    assert not set(rows[0]) & set(rows[1])
    # the shards in rank order are all rows as one process reading the sorted files sees them
    in_file_order = [*range(8), *range(12, 20), *range(8, 12)]  # a, b, d, e, sub/c
    assert rows[0] + rows[1] == read_files(list_files(tmp_path))["x"].tolist() == in_file_order


def test_fewer_files_than_workers_split_rows(tmp_path: Path) -> None:
    _write(tmp_path, ["only.parquet"], rows=7)
    specs = plan_shards([tmp_path / "only.parquet"], 3)
    assert {s.kind for s in specs} == {"file_rows"}
    assert sum((load_shard(s)["x"].tolist() for s in specs), []) == list(range(7))


def test_missing_data_path_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        list_files(tmp_path / "nope")
    with pytest.raises(FileNotFoundError):
        list_files(tmp_path)  # exists, but holds no data files


def test_in_process_dataframe_shard_loads_as_is() -> None:
    df = pd.DataFrame({"x": [1, 2]})
    assert load_shard(ShardSpec("object", df)).equals(df)


LO = ipaddress.IPv4Interface("127.0.0.1/8")
ETH = ipaddress.IPv4Interface("10.1.2.3/24")


@pytest.mark.parametrize(
    "ip,expected",
    [("127.0.6.3", "lo"), ("10.1.2.3", "eth0"), ("10.1.2.77", "eth0"), ("192.168.1.1", None)],
)
def test_gloo_interface_is_the_one_carrying_the_node_ip(ip: str, expected: str | None) -> None:
    assert pick_interface(ip, {"lo": LO, "eth0": ETH}) == expected


def test_one_bundle_per_node_spread_strictly() -> None:
    bundles, strategy = node_bundles(3, {"CPU": 2, "GPU": 0})
    assert bundles == [{"CPU": 2}] * 3 and strategy == "STRICT_SPREAD"
    assert node_bundles(1, {"CPU": 0, "GPU": 0}) == ([{"CPU": 0.001}], "PACK")


@pytest.mark.parametrize(
    "cfg,cpus,gpus,expected",
    [
        (XGBScalingConfig(), [4, 2, 8], [0, 0, 0], (3, 2, False)),
        (XGBScalingConfig(num_workers=2, num_cpu_per_worker=1, use_gpu=False), [4], [1], (2, 1, False)),
        (XGBScalingConfig(use_gpu=None), [4, 4], [1, 2], (2, 4, True)),
        # a CPU head with two GPU workers: one worker per node would leave the head without a GPU
        (XGBScalingConfig(), [4, 4, 4], [0, 1, 1], (3, 4, False)),
        (XGBScalingConfig(num_workers=2), [4, 4, 4], [0, 1, 1], (2, 4, True)),
        # more workers than nodes: any node's GPUs count
        (XGBScalingConfig(num_workers=4, num_cpu_per_worker=1), [4, 4], [3, 1], (4, 1, True)),
        (XGBScalingConfig(num_workers=4, num_cpu_per_worker=1), [4, 4], [2, 0.5], (4, 1, False)),
        (XGBScalingConfig(use_gpu=True), [4], [0], (1, 4, True)),  # asked for: placement reports the shortage
    ],
)
def test_xgb_auto_scaling(
    cfg: XGBScalingConfig, cpus: list[float], gpus: list[float], expected: tuple[int, int, bool]
) -> None:
    assert resolve_scaling(cfg, cpus, gpus) == expected


def test_xgb_params_follow_resources() -> None:
    p = training_params({"eta": 0.1, "objective": "binary:logistic"}, "reg:squarederror", 3, gpu=True)
    assert p == {"objective": "binary:logistic", "tree_method": "hist", "nthread": 3, "eta": 0.1, "device": "cuda"}
    with pytest.raises(ValueError):
        resolve_scaling(XGBScalingConfig(num_workers=0), [2], [0])
    with pytest.raises(ValueError, match="tree_method"):  # on the driver, before any worker starts
        training_params({"tree_method": "approx"}, "reg:squarederror", 1, gpu=False)


def test_metrics_reporter_keeps_history_and_latest() -> None:
    m = MetricsReporter()
    m.log_metrics({"loss": 2.0, "epoch": 0})
    m.log_metrics({"loss": 1.0})
    assert m.merged() == {"loss": 1.0, "epoch": 0} and len(m.history) == 2


def test_artifact_manager_round_trip(tmp_path: Path) -> None:
    src = tmp_path / "ckpt"
    src.mkdir()
    (src / "w.bin").write_bytes(b"w")
    am = ArtifactManager(f"file://{tmp_path / 'stage'}")
    am.upload(str(src), "epoch-1")
    assert am.list() == ["epoch-1/w.bin"]
    am.download("epoch-1", str(tmp_path / "back"))
    assert (tmp_path / "back" / "w.bin").read_bytes() == b"w"


def test_get_context_outside_a_worker_fails() -> None:
    with pytest.raises(RuntimeError, match="PyTorchDistributor"):
        get_context()


def test_replicated_channel_is_a_directory_dealt_by_file(tmp_path: Path) -> None:
    _write(tmp_path / "input" / "data" / "train", ["a.parquet", "b.parquet"])
    ch = ChannelData("train", sharded=False, base_dir=str(tmp_path))
    assert ch.path == str(tmp_path / "input" / "data" / "train")
    specs = plan_shards(ch, 2)
    assert [len(s.payload) for s in specs] == [1, 1]


def test_sharded_channel_workers_split_their_nodes_files(tmp_path: Path) -> None:
    _write(tmp_path, ["a.parquet", "b.parquet", "c.parquet"])
    rows = [load_shard(ShardSpec("node_dir", str(tmp_path), i, 2))["x"].tolist() for i in range(2)]
    assert sorted(rows[0] + rows[1]) == list(range(12)) and not set(rows[0]) & set(rows[1])


@pytest.mark.parametrize("distribution,sharded", [("ShardedByS3Key", True), ("FullyReplicated", False)])
def test_channel_distribution_comes_from_the_contract(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, distribution: str, sharded: bool
) -> None:
    from kubepool import contract

    doc = contract.JobContract(
        job_name="j",
        namespace="ns",
        job_uid="u",
        groups=[contract.Group(name="g", instance_type="cpu", count=2)],
        target_instances=2,
        min_instances=2,
        channels=[contract.Channel(name="train", distribution=distribution, source={"s3Uri": "s3://b/p"})],
    )
    (tmp_path / "c.json").write_text(doc.dumps())
    monkeypatch.setenv(contract.ENV_CONTRACT_FILE, str(tmp_path / "c.json"))
    monkeypatch.setenv(contract.ENV_INSTANCE_ID, "0")
    assert ChannelData("train").is_sharded() is sharded
    with pytest.raises(KeyError):
        ChannelData("other").is_sharded()


def test_torch_dataset_of_a_shard_has_the_numeric_columns() -> None:
    from torch.utils.data import DataLoader

    from kubepool.distributors.context import DataShard

    df = pd.DataFrame({"x": [1.0, 2.0, 3.0], "y": [0, 1, 0], "name": ["a", "b", "c"]})
    batch = next(iter(DataLoader(DataShard(ShardSpec("object", df)).get_shard().to_torch_dataset(), batch_size=3)))
    assert set(batch) == {"x", "y"} and batch["x"].tolist() == [1.0, 2.0, 3.0]


def test_failure_report_blames_the_earliest_failing_rank() -> None:
    from kubepool.distributors.workers import WorkerFailure, _failure_report

    effect = WorkerFailure(2, "10.0.0.3", "DistBackendError: connection closed", "tb2", at=5.0)
    cause = WorkerFailure(1, "10.0.0.2", "ValueError: boom", "tb1", at=4.0)
    text = _failure_report("PyTorchDistributor", [effect, cause])
    assert text.startswith("PyTorchDistributor: rank 1 on 10.0.0.2 failed: ValueError: boom")
    assert "ranks 2 failed too" in text and text.endswith("tb1")


def test_eval_set_accepts_a_dict_and_xgboost_style_pairs() -> None:
    from kubepool.distributors.xgboost import named_evals

    assert named_evals({"test": "a.parquet", "val": "b.parquet"}) == [("test", "a.parquet"), ("val", "b.parquet")]
    assert named_evals([("a.parquet", "test")]) == [("test", "a.parquet")]
    assert named_evals(None) == []


@pytest.mark.parametrize(
    "visible,assigned,expected",
    [
        (1, ["3"], 0),  # Ray's isolation: the task sees only its GPU
        (2, ["2", "3"], 0),  # two GPUs per worker: the first of its own, whatever its local rank
        (8, ["5"], 5),  # isolation off (RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES): the physical id
        (1, [], 0),
    ],
)
def test_nccl_rank_picks_its_own_gpu(visible: int, assigned: list[str], expected: int) -> None:
    from kubepool.distributors.pytorch import cuda_device

    assert cuda_device(visible, assigned) == expected
