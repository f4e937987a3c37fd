"""Where rank 0's model dir (get_context().get_model_dir()) ends up on the driver: inside a kubepool job, the
instance's SageMaker model dir (/opt/ml/model), which the runtime keeps after the job as model.tar.gz
(spec.output; tests/runtime/test_runtime_outputs.py); elsewhere a temp dir; under an artifact stage when given."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubepool.contract import ENV_BASE_DIR, ENV_INSTANCE_ID
from kubepool.distributors import pytorch
from kubepool.distributors.context import job_model_dir


def test_in_a_job_the_model_goes_where_the_runtime_keeps_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_INSTANCE_ID, "0")
    monkeypatch.setenv(ENV_BASE_DIR, str(tmp_path / "ml"))
    where = pytorch._write_model({"model.pt": b"weights", "sub/cfg.json": b"{}"}, None)
    assert where == str(tmp_path / "ml" / "model") == str(job_model_dir())
    assert (tmp_path / "ml" / "model" / "model.pt").read_bytes() == b"weights"
    assert (tmp_path / "ml" / "model" / "sub" / "cfg.json").read_bytes() == b"{}"
    staged = pytorch._write_model({"model.pt": b"w"}, f"file://{tmp_path / 'stage'}")
    assert staged == str(tmp_path / "stage" / "model")  # an explicit artifact stage still wins


def test_outside_a_job_a_temp_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_INSTANCE_ID, raising=False)
    assert job_model_dir() is None
    where = pytorch._write_model({"model.pt": b"w"}, None)
    assert where is not None and Path(where, "model.pt").read_bytes() == b"w" and "kubepool-model-" in where
    assert pytorch._write_model({}, None) is None
    assert job_model_dir({ENV_INSTANCE_ID: "3"}) == Path("/opt/ml/model")
