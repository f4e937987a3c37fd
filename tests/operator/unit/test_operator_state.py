"""OperatorState's reads: models parsed once per resourceVersion, the status this process wrote wins without
touching the cached model, claims reused while job and status are unchanged."""

from __future__ import annotations

from typing import Any, cast

import pytest
from operator_factories import job, pool

from kubepool.api import ComputePool, MLJob, MLJobStatus
from kubepool.controller.config import OperatorConfig
from kubepool.controller.state import OperatorState
from kubepool.kube.aio import Api


def body(model: MLJob | ComputePool, rv: str) -> dict[str, Any]:
    out = model.model_dump(mode="json", by_alias=True, exclude_none=True)
    out["metadata"]["resourceVersion"] = rv
    return out


def test_models_are_parsed_once_per_resource_version(monkeypatch: pytest.MonkeyPatch) -> None:
    op = OperatorState(cfg=OperatorConfig(), api=cast(Api, None))
    op.indexes = {"mljob_index": {("ns", "train"): [body(job(), "1")]}, "pool_index": {"cpu": [body(pool(), "1")]}}
    first, pools = op.job(("ns", "train")), op.pools()
    calls: list[str] = []
    original = MLJob.model_validate
    monkeypatch.setattr(MLJob, "model_validate", lambda b: calls.append("job") or original(b))
    monkeypatch.setattr(ComputePool, "model_validate", lambda b: calls.append("pool") or pool())
    assert first is not None and op.job(("ns", "train"))[0] is first[0]  # type: ignore[index]
    assert op.pools()["cpu"] is pools["cpu"] and op.claims()[0] is op.claims()[0]
    assert calls == []
    op.indexes["mljob_index"][("ns", "train")] = [body(job(targetInstances=2), "2")]
    calls.clear()  # the factory validates too
    assert op.claims()[0].min_instances == 2 and calls == ["job"]
    op.indexes["pool_index"] = {}
    assert op.pools() == {} and op.parsed_pools == {}


def test_written_status_wins_without_mutating_the_cached_model() -> None:
    op = OperatorState(cfg=OperatorConfig(), api=cast(Api, None))
    op.indexes = {"mljob_index": {("ns", "train"): [body(job(), "1")]}}
    op.written["uid-train"] = MLJobStatus(phase="PENDING", reason="Queued")
    found = op.job(("ns", "train"))
    assert found is not None and found[0].status is op.written["uid-train"]
    assert op.parsed_jobs[("ns", "train")][1].status is None


def test_finished_jobs_leave_the_claims_for_good_until_forgotten(monkeypatch: pytest.MonkeyPatch) -> None:
    op = OperatorState(cfg=OperatorConfig(), api=cast(Api, None))
    op.indexes = {"mljob_index": {("ns", "train"): [body(job(), "1")], ("ns", "other"): [body(job(name="other"), "1")]}}
    assert {c.name for c in op.claims()} == {"train", "other"}
    op.written["uid-train"] = MLJobStatus(phase="DONE", reason="Completed")
    assert {c.name for c in op.claims()} == {"other"} and op.finished == {("ns", "train")}
    looked: list[object] = []
    original = OperatorState._parsed_job
    monkeypatch.setattr(OperatorState, "_parsed_job", lambda self, k, b: looked.append(k) or original(self, k, b))
    assert {c.name for c in op.claims()} == {"other"} and looked == [("ns", "other")]  # no look at the finished job
    op.forget(("ns", "train"), "uid-train")  # deleted: a new job of the same name is unfinished
    op.indexes["mljob_index"][("ns", "train")] = [body(job(), "5")]
    assert {c.name for c in op.claims()} == {"train", "other"}
