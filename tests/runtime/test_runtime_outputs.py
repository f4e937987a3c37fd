"""spec.output in the runtime: model.tar.gz and output.tar.gz in SageMaker's layout, each the aggregate of every
host's files as SageMaker's are (always there, even empty), and each host's own under its host when it wrote
something, to a real S3-compatible server and to a mounted directory (a PVC); /opt/ml/output/failure read as
SageMaker reads it."""

from __future__ import annotations

import io
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from kubepool.contract import Group, JobContract, OutputTarget
from kubepool.runtime import outputs
from kubepool.runtime.sagemaker import Layout
from support.s3 import CREDENTIALS, client, s3_server

BUCKET = "outputs-unit"  # moto keeps one store per process: every test module has its own bucket


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    with s3_server("127.0.5.21") as url:
        client(url).create_bucket(Bucket=BUCKET)
        yield url


def contract(target: OutputTarget, groups: int = 1, count: int = 2) -> JobContract:
    gs = [Group(name=f"g{i}", instance_type="ml.m5.large", count=count) for i in range(groups)]
    return JobContract(job_name="train", namespace="ns", job_uid="u", groups=gs, target_instances=groups * count,
                       min_instances=groups * count, output=target)


def members(blob: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(blob), mode="r:gz") as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]


def test_s3_layout_per_instance(endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in CREDENTIALS.items():  # in a pod: the credentials Secret's keys, through envFrom
        monkeypatch.setenv(k, v)
    s3 = client(endpoint)
    c = contract(OutputTarget(location=f"s3://{BUCKET}/runs", s3_uri=f"s3://{BUCKET}/runs", s3_endpoint_url=endpoint))
    head, worker, idle = Layout(tmp_path / "0"), Layout(tmp_path / "1"), Layout(tmp_path / "2")
    for layout in (head, worker, idle):
        layout.create()
    (head.model_dir / "weights.bin").write_bytes(b"w0")
    (head.model_dir / "sub").mkdir()
    (head.model_dir / "sub" / "cfg.json").write_text("{}")
    (worker.output_data_dir / "metrics.csv").write_text("loss,1\n")
    env = dict(CREDENTIALS)
    base = f"s3://{BUCKET}/runs/train/output"
    assert outputs.keep(c, c.identity(0), head, env) == [
        f"{base}/algo-1/model.tar.gz", f"{base}/model.tar.gz", f"{base}/output.tar.gz"]
    assert outputs.keep(c, c.identity(1), worker, env) == [
        f"{base}/algo-2/output.tar.gz", f"{base}/model.tar.gz", f"{base}/output.tar.gz"]
    keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET, Prefix="runs/train/")["Contents"])
    assert keys == ["runs/train/output/algo-1/model.tar.gz", "runs/train/output/algo-2/output.tar.gz",
                    "runs/train/output/model.tar.gz", "runs/train/output/output.tar.gz"]
    got = members(s3.get_object(Bucket=BUCKET, Key="runs/train/output/model.tar.gz")["Body"].read())
    assert got == {"weights.bin": b"w0", "sub/cfg.json": b"{}"}
    # The worker's metrics are in the job's output.tar.gz, as SageMaker aggregates every host's.
    assert members(s3.get_object(Bucket=BUCKET, Key="runs/train/output/output.tar.gz")["Body"].read()) == {
        "metrics.csv": b"loss,1\n"}
    assert members(s3.get_object(Bucket=BUCKET, Key="runs/train/output/algo-2/output.tar.gz")["Body"].read()) == {
        "metrics.csv": b"loss,1\n"}


def test_a_mounted_volume(tmp_path: Path) -> None:
    mount = tmp_path / "pvc"
    c = contract(OutputTarget(location="pvc://results/team", local_path=str(mount)))
    layout = Layout(tmp_path / "ml")
    layout.create()
    (layout.model_dir / "m.txt").write_text("m")
    assert "pvc://results/team/train/output/model.tar.gz" in outputs.keep(c, c.identity(0), layout, {})
    assert members((mount / "train/output/model.tar.gz").read_bytes()) == {"m.txt": b"m"}
    assert not list(mount.rglob("*.part"))


def test_the_model_saved_by_the_second_group_is_the_jobs_model(endpoint: str, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A 2-group job where only the second group saves /opt/ml/model/model.pt: model.tar.gz (what
    status.outputs.modelArtifacts and Estimator.model_data name) has it, whichever instance ends last."""
    for k, v in CREDENTIALS.items():
        monkeypatch.setenv(k, v)
    s3 = client(endpoint)
    c = contract(OutputTarget(location=f"s3://{BUCKET}/two", s3_uri=f"s3://{BUCKET}/two", s3_endpoint_url=endpoint),
                 groups=2, count=1)
    head, trainer = Layout(tmp_path / "0"), Layout(tmp_path / "1")
    for layout in (head, trainer):
        layout.create()
    (trainer.model_dir / "model.pt").write_bytes(b"weights")
    outputs.keep(c, c.identity(1), trainer, dict(CREDENTIALS))  # the trainer ends first, the head last
    outputs.keep(c, c.identity(0), head, dict(CREDENTIALS))
    got = members(s3.get_object(Bucket=BUCKET, Key="two/train/output/model.tar.gz")["Body"].read())
    assert got == {"model.pt": b"weights"}


def test_hosts_writing_the_same_path_keep_both_and_the_first_host_wins_the_aggregate(tmp_path: Path) -> None:
    mount = tmp_path / "pvc"
    c = contract(OutputTarget(location="pvc://results", local_path=str(mount)), count=3)
    layouts = [Layout(tmp_path / str(i)) for i in range(3)]
    for i, layout in enumerate(layouts):
        layout.create()
        (layout.model_dir / "model.pt").write_text(f"host {i}")
        (layout.model_dir / f"only-{i}.txt").write_text(str(i))
    for i in (2, 0, 1):
        outputs.keep(c, c.identity(i), layouts[i], {})
    assert members((mount / "train/output/model.tar.gz").read_bytes()) == {
        "model.pt": b"host 0", "only-0.txt": b"0", "only-1.txt": b"1", "only-2.txt": b"2"}
    assert members((mount / "train/output/algo-3/model.tar.gz").read_bytes())["model.pt"] == b"host 2"


def test_instances_ending_together_leave_an_aggregate_with_both(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two instances aggregating at once, in the one order that loses data unless the aggregate is re-read:
    instance 0 merges before instance 1's archive exists, instance 1 then ends entirely, and instance 0 writes
    last. Driven step by step (not by threads) so the interleaving happens on every run."""
    mount = tmp_path / "pvc"
    c = contract(OutputTarget(location="pvc://results", local_path=str(mount)), count=2)
    layouts = [Layout(tmp_path / str(i)) for i in range(2)]
    for i, layout in enumerate(layouts):
        layout.create()
        (layout.model_dir / f"part-{i}.bin").write_bytes(bytes([i]) * 100_000)
    real_merge, interleaved = outputs.merge, []

    def merge_then_the_other_ends(parts: list[Path], dest: Path) -> None:
        real_merge(parts, dest)
        if not interleaved:
            interleaved.append(len(parts))
            outputs.keep(c, c.identity(1), layouts[1], {})

    monkeypatch.setattr(outputs, "merge", merge_then_the_other_ends)
    outputs.keep(c, c.identity(0), layouts[0], {})
    assert interleaved == [1]  # instance 0's first merge had only its own archive
    assert set(members((mount / "train/output/model.tar.gz").read_bytes())) == {"part-0.bin", "part-1.bin"}


def test_no_output_location_keeps_nothing(tmp_path: Path) -> None:
    c = JobContract(job_name="train", namespace="ns", job_uid="u", groups=[Group(name="g", instance_type="x", count=1)],
                    target_instances=1, min_instances=1)
    assert outputs.keep(c, c.identity(0), Layout(tmp_path), {}) == []


def test_failure_file_is_the_reason(tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    layout.create()
    assert outputs.failure_reason(layout) is None
    (layout.output_dir / "failure").write_text("  bad labels in shard 3\n" + "x" * 2000)
    reason = outputs.failure_reason(layout)
    assert reason is not None and reason.startswith("bad labels in shard 3") and len(reason) == 1024
