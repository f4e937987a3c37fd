"""S3 checkpoints in the runtime against a real S3-compatible server: restore what the prefix holds, upload only
what changed (periodic rounds and the last one), and never write outside the checkpoint dir."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kubepool.contract import OutputTarget
from kubepool.runtime import checkpoints
from support.s3 import CREDENTIALS, client, s3_server


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    with s3_server("127.0.5.23") as url:
        client(url).create_bucket(Bucket="ckpt-unit")
        yield url


@pytest.fixture(autouse=True)
def aws(monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in CREDENTIALS.items():  # in a pod: the credentials Secret's keys, through envFrom
        monkeypatch.setenv(k, v)


def target(endpoint: str, prefix: str) -> OutputTarget:
    uri = f"s3://ckpt-unit/{prefix}"
    return OutputTarget(location=uri, s3_uri=uri, s3_endpoint_url=endpoint)


def test_sync_then_restore_resumes(endpoint: str, tmp_path: Path) -> None:
    t = target(endpoint, "run-1")
    first = tmp_path / "attempt-0"
    first.mkdir()
    assert checkpoints.restore(t, first, {}) == []  # nothing yet
    syncer = checkpoints.Syncer(t, first, {})
    syncer.mark_current()
    (first / "epoch.txt").write_text("5")
    (first / "weights").mkdir()
    (first / "weights" / "w.bin").write_bytes(b"\x01\x02")
    assert syncer.sync() == ["epoch.txt", "weights/w.bin"]
    assert syncer.sync() == []  # unchanged: nothing uploaded again
    (first / "epoch.txt").write_text("6")
    syncer.start()
    assert syncer.stop() == ["epoch.txt"]
    second = tmp_path / "attempt-1"
    second.mkdir()
    assert sorted(checkpoints.restore(t, second, {})) == ["epoch.txt", "weights/w.bin"]
    assert (second / "epoch.txt").read_text() == "6" and (second / "weights/w.bin").read_bytes() == b"\x01\x02"


def test_a_key_escaping_the_dir_is_refused(endpoint: str, tmp_path: Path) -> None:
    client(endpoint).put_object(Bucket="ckpt-unit", Key="run-2/../../code/train.py", Body=b"evil")
    with pytest.raises(ValueError, match="outside"):
        checkpoints.restore(target(endpoint, "run-2"), tmp_path, {})
    assert not list(tmp_path.rglob("*"))
