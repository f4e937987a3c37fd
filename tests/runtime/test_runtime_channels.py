"""Channel data: sharding (disjoint, complete, stable), group assignment, mounted dirs, and S3 over HTTP
against a real S3-compatible server on loopback (moto's ThreadedMotoServer)."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest

from kubepool.contract import Channel, ChannelSource, Distribution, Group, JobContract, shard
from kubepool.runtime import channels
from support.s3 import s3_server

S3_HOST = "127.0.5.20"


def contract(chans: list[Channel]) -> JobContract:
    return JobContract(
        job_name="j", namespace="ns", job_uid="u",
        groups=[Group(name="a", instance_type="t", count=3), Group(name="b", instance_type="t", count=2)],
        target_instances=5, min_instances=5, channels=chans,
    )


@pytest.mark.parametrize("n_keys,n_shards", [(0, 3), (2, 5), (10, 3), (101, 7)])
def test_shard_is_disjoint_complete_and_stable(n_keys: int, n_shards: int) -> None:
    keys = [f"part-{i:05d}.csv" for i in range(n_keys)]
    shards = [shard(keys, n_shards, i) for i in range(n_shards)]
    flat = [k for s in shards for k in s]
    assert sorted(flat) == sorted(keys) and len(flat) == len(set(flat))
    shuffled = random.Random(1).sample(keys, len(keys))
    assert [shard(shuffled, n_shards, i) for i in range(n_shards)] == shards
    assert max(map(len, shards)) - min(map(len, shards)) <= 1


def test_shard_rejects_bad_index() -> None:
    with pytest.raises(ValueError):
        shard(["a"], 2, 2)


def test_sharding_counts_only_the_channels_groups() -> None:
    ch = Channel(name="t", distribution=Distribution.SHARDED_BY_S3_KEY, source=ChannelSource(local_path="/x"), instance_groups=["b"])
    c = contract([ch])
    assert channels.shard_position(c, ch, c.identity(3)) == (2, 0)
    assert channels.shard_position(c, ch, c.identity(4)) == (2, 1)
    keys = [f"k{i}" for i in range(5)]
    assert channels.select(keys, c, ch, c.identity(3)) + channels.select(keys, c, ch, c.identity(4)) == ["k0", "k2", "k4", "k1", "k3"]


def test_local_path_channels(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    for name in ("a.csv", "b.csv", "sub/c.csv"):
        (src / name).write_text(name)
    chans = [
        Channel(name="full", source=ChannelSource(local_path=str(src))),
        Channel(name="part", distribution=Distribution.SHARDED_BY_S3_KEY, source=ChannelSource(local_path=str(src)), instance_groups=["a"]),
        Channel(name="bonly", source=ChannelSource(local_path=str(src)), instance_groups=["b"]),
    ]
    c = contract(chans)
    placed = {i: channels.materialize(c, c.identity(i), tmp_path / f"data{i}", {}) for i in range(3)}
    assert all(p["full"] == ["a.csv", "b.csv", "sub/c.csv"] for p in placed.values())
    assert [p["part"] for p in placed.values()] == [["a.csv"], ["b.csv"], ["sub/c.csv"]]
    assert "bonly" not in placed[0] and not (tmp_path / "data0/bonly").exists()
    assert (tmp_path / "data2/part/sub/c.csv").read_text() == "sub/c.csv"
    assert (tmp_path / "data0/full/sub/c.csv").read_text() == "sub/c.csv"


def test_configmap_mount_layout_is_read_once(tmp_path: Path) -> None:
    """Kubernetes' atomic writer: `f -> ..data/f`, `..data -> ..2026_11_29`, the real file inside."""
    src = tmp_path / "cm"
    (src / "..2026_11_29").mkdir(parents=True)
    (src / "..2026_11_29" / "f.csv").write_text("x")
    (src / "..data").symlink_to("..2026_11_29")
    (src / "f.csv").symlink_to("..data/f.csv")
    c = contract([Channel(name="cm", source=ChannelSource(local_path=str(src)))])
    assert channels.materialize(c, c.identity(0), tmp_path / "data", {}) == {"cm": ["f.csv"]}
    assert (tmp_path / "data/cm/f.csv").read_text() == "x"


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    with s3_server(S3_HOST) as url:
        yield url


@pytest.fixture()
def aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(k, v)


def test_s3_channels_over_http(s3_endpoint: str, aws_env: None, tmp_path: Path) -> None:
    s3 = boto3.client("s3", endpoint_url=s3_endpoint)
    s3.create_bucket(Bucket="data")
    keys = [f"train/part-{i}.csv" for i in range(7)] + ["train/nested/x.csv", "other/y.csv"]
    for k in keys:
        s3.put_object(Bucket="data", Key=k, Body=k.encode())
    chans = [
        Channel(
            name="train",
            distribution=Distribution.SHARDED_BY_S3_KEY,
            source=ChannelSource(s3_uri="s3://data/train/", s3_endpoint_url=s3_endpoint),
        ),
        # No endpoint on the channel: AWS_ENDPOINT_URL, as the operator sets it for MinIO and friends.
        Channel(name="one", source=ChannelSource(s3_uri="s3://data/other/y.csv")),
    ]
    c = contract(chans)
    got: list[str] = []
    for i in range(5):
        placed = channels.materialize(c, c.identity(i), tmp_path / f"d{i}", {"AWS_ENDPOINT_URL": s3_endpoint})
        got += placed["train"]
        for key in placed["train"]:
            assert (tmp_path / f"d{i}/train" / key.removeprefix("train/")).read_text() == key
        assert (tmp_path / f"d{i}/one/y.csv").read_text() == "other/y.csv"
    assert sorted(got) == sorted(k for k in keys if k.startswith("train/"))


def test_s3_keys_never_escape_the_channel_dir(s3_endpoint: str, aws_env: None, tmp_path: Path) -> None:
    """A key with `..` parts would overwrite the job's code: the channel is refused, nothing is written."""
    s3 = boto3.client("s3", endpoint_url=s3_endpoint)
    s3.create_bucket(Bucket="evil")
    s3.put_object(Bucket="evil", Key="data/ok.csv", Body=b"ok")
    s3.put_object(Bucket="evil", Key="data/../../code/train.py", Body=b"print('owned')")
    c = contract([Channel(name="train", source=ChannelSource(s3_uri="s3://evil/data/", s3_endpoint_url=s3_endpoint))])
    dest = tmp_path / "base" / "input" / "data"
    with pytest.raises(ValueError, match=r"'data/\.\./\.\./code/train\.py' would be written outside the channel"):
        channels.materialize(c, c.identity(0), dest, {})
    assert [p.name for p in tmp_path.rglob("*") if p.is_file()] == []  # refused before anything was fetched
