"""spec.output in the runtime: instance 0's model.tar.gz and output.tar.gz always kept in SageMaker's layout,
another instance's only when it wrote something (under its host), to a real S3-compatible server and to a
mounted directory (a PVC); /opt/ml/output/failure read as SageMaker reads it."""

from __future__ import annotations

import io
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from kubepool.contract import Group, JobContract, OutputTarget, build_contract
from kubepool.runtime import outputs
from kubepool.runtime.sagemaker import Layout
from support.s3 import CREDENTIALS, client, s3_server

BUCKET = "outputs-unit"  # moto keeps one store per process: every test module has its own bucket


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    with s3_server("127.0.5.21") as url:
        client(url).create_bucket(Bucket=BUCKET)
        yield url


def contract(target: OutputTarget) -> JobContract:
    return build_contract(job_name="train", namespace="ns", job_uid="u", groups=[Group(name="g", instance_type="ml.m5.large", count=2)],
                          target_instances=2, min_instances=2, output=target)


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
    assert outputs.keep(c, c.identity(0), head, env) == [
        f"s3://{BUCKET}/runs/train/output/model.tar.gz", f"s3://{BUCKET}/runs/train/output/output.tar.gz"]
    assert outputs.keep(c, c.identity(1), worker, env) == [f"s3://{BUCKET}/runs/train/output/algo-2/output.tar.gz"]
    keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET)["Contents"])
    assert keys == ["runs/train/output/algo-2/output.tar.gz", "runs/train/output/model.tar.gz", "runs/train/output/output.tar.gz"]
    got = members(s3.get_object(Bucket=BUCKET, Key="runs/train/output/model.tar.gz")["Body"].read())
    assert got == {"weights.bin": b"w0", "sub/cfg.json": b"{}"}
    assert members(s3.get_object(Bucket=BUCKET, Key="runs/train/output/output.tar.gz")["Body"].read()) == {}
    assert members(s3.get_object(Bucket=BUCKET, Key="runs/train/output/algo-2/output.tar.gz")["Body"].read()) == {
        "metrics.csv": b"loss,1\n"}


def test_a_mounted_volume(tmp_path: Path) -> None:
    mount = tmp_path / "pvc"
    c = contract(OutputTarget(location="pvc://results/team", local_path=str(mount)))
    layout = Layout(tmp_path / "ml")
    layout.create()
    (layout.model_dir / "m.txt").write_text("m")
    assert outputs.keep(c, c.identity(0), layout, {})[0] == "pvc://results/team/train/output/model.tar.gz"
    assert members((mount / "train/output/model.tar.gz").read_bytes()) == {"m.txt": b"m"}
    assert not list(mount.rglob("*.part"))


def test_no_output_location_keeps_nothing(tmp_path: Path) -> None:
    c = build_contract(job_name="train", namespace="ns", job_uid="u", groups=[Group(name="g", instance_type="x", count=1)],
                       target_instances=1, min_instances=1)
    assert outputs.keep(c, c.identity(0), Layout(tmp_path), {}) == []


def test_failure_file_is_the_reason(tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    layout.create()
    assert outputs.failure_reason(layout) is None
    (layout.output_dir / "failure").write_text("  bad labels in shard 3\n" + "x" * 2000)
    reason = outputs.failure_reason(layout)
    assert reason is not None and reason.startswith("bad labels in shard 3") and len(reason) == 1024
