"""ClusterView's reads: models parsed once per resourceVersion, the status this process wrote wins without
touching the cached model, claims reused while job and status are unchanged."""

from __future__ import annotations

from typing import Any

import pytest

from kubepool import naming
from kubepool.api import ComputePool, MLJob, MLJobStatus
from kubepool.controller import jobwatch
from kubepool.controller.jobreconcile import reconcile_job
from kubepool.controller.view import JOB_INDEX, POOL_INDEX, ClusterView
from kubepool.kube.errors import KubeError
from support.factories import job, pool
from support.operator import operator_state


def body(model: MLJob | ComputePool, rv: str) -> dict[str, Any]:
    out = model.model_dump(mode="json", by_alias=True, exclude_none=True)
    out["metadata"]["resourceVersion"] = rv
    return out


def test_models_are_parsed_once_per_resource_version(monkeypatch: pytest.MonkeyPatch) -> None:
    view = ClusterView(written={})
    view.indexes = {JOB_INDEX: {("ns", "train"): [body(job(), "1")]}, POOL_INDEX: {"cpu": [body(pool(), "1")]}}
    first, pools = view.job(("ns", "train")), view.pools()
    calls: list[str] = []
    original = MLJob.model_validate
    monkeypatch.setattr(MLJob, "model_validate", lambda b: calls.append("job") or original(b))
    monkeypatch.setattr(ComputePool, "model_validate", lambda b: calls.append("pool") or pool())
    assert first is not None and view.job(("ns", "train"))[0] is first[0]  # type: ignore[index]
    assert view.pools()["cpu"] is pools["cpu"] and view.claims()[0] is view.claims()[0]
    assert calls == []
    view.indexes[JOB_INDEX][("ns", "train")] = [body(job(targetInstances=2), "2")]
    calls.clear()  # the factory validates too
    assert view.claims()[0].min_instances == 2 and calls == ["job"]
    view.indexes[POOL_INDEX] = {}
    assert view.pools() == {} and view.parsed_pools == {}


def test_written_status_wins_without_mutating_the_cached_model() -> None:
    written: dict[str, MLJobStatus] = {}
    view = ClusterView(written=written)
    view.indexes = {JOB_INDEX: {("ns", "train"): [body(job(), "1")]}}
    written["uid-train"] = MLJobStatus(phase="PENDING", reason="Queued")
    found = view.job(("ns", "train"))
    assert found is not None and found[0].status is written["uid-train"]
    assert view.parsed_jobs[("ns", "train")][1].status is None


async def test_a_status_the_watch_caught_up_with_is_held_once() -> None:
    """The echo of this process' status write parses to an equal status: the cached model holds the written object
    itself (one copy per live job, not two); a watched status that differs keeps its own."""
    op, _, _ = operator_state([job(targetInstances=1)], [pool()])
    await reconcile_job(op, ("ns", "train"))
    mine = op.status.written["uid-train"]
    echo = body(op.view.job(("ns", "train"))[0], "7")  # type: ignore[index]
    jobwatch.file(op, echo)
    found = op.view.job(("ns", "train"))
    assert found is not None and found[0].status is mine and op.view.parsed_jobs[("ns", "train")][1] is found[0]
    older = {**echo, "metadata": {**echo["metadata"], "resourceVersion": "8"}, "status": {"phase": "PENDING"}}
    jobwatch.file(op, older)
    found = op.view.job(("ns", "train"))
    assert found is not None and found[0].status is mine
    assert op.view.parsed_jobs[("ns", "train")][1].status is not mine


async def test_a_finished_job_the_watch_shows_as_written_costs_its_body_alone() -> None:
    """Once the watch shows a finished job's final status as this process wrote it, neither its parsed model nor
    the written status is kept (thousands of finished jobs left in the cluster: P6); a finished status written
    and not yet watched is kept, and read."""
    op, _, _ = operator_state([job(targetInstances=1)], [pool()])
    key = ("ns", "train")
    done = MLJobStatus(phase="DONE", reason="Completed")
    op.status.written["uid-train"] = done
    watched = body(op.view.job(key)[0], "7")  # type: ignore[index]
    watched.pop("status", None)
    jobwatch.file(op, watched)
    found = op.view.job(key)
    assert found is not None and found[0].status is done, "a written status not yet watched is read"
    assert "uid-train" in op.status.written
    echo = {**watched, "metadata": {**watched["metadata"], "resourceVersion": "8"},
            "status": done.model_dump(mode="json", by_alias=True, exclude_none=True)}
    jobwatch.file(op, echo)
    found = op.view.job(key)
    assert found is not None and found[0].status == done
    assert "uid-train" not in op.status.written and key not in op.view.parsed_jobs
    op.status.unflushed["uid-other"] = False  # a flush still pending keeps its status
    op.status.written["uid-other"] = done
    op.status.settle("uid-other")
    assert op.status.written["uid-other"] is done


def test_finished_jobs_leave_the_claims_for_good_until_forgotten(monkeypatch: pytest.MonkeyPatch) -> None:
    written: dict[str, MLJobStatus] = {}
    view = ClusterView(written=written)
    view.indexes = {JOB_INDEX: {("ns", "train"): [body(job(), "1")], ("ns", "other"): [body(job(name="other"), "1")]}}
    assert {c.name for c in view.claims()} == {"train", "other"}
    written["uid-train"] = MLJobStatus(phase="DONE", reason="Completed")
    assert {c.name for c in view.claims()} == {"other"} and view.finished == {"uid-train"}
    looked: list[object] = []
    original = ClusterView._parsed_job
    monkeypatch.setattr(ClusterView, "_parsed_job", lambda self, k, b: looked.append(k) or original(self, k, b))
    assert {c.name for c in view.claims()} == {"other"} and looked == [("ns", "other")]  # no look at the finished job
    view.indexes[JOB_INDEX][("ns", "train")] = []  # deleted: kopf's index drops it before the handler runs
    view.forget(("ns", "train"), "uid-train")  # (the status writer forgets its uid): a new job of the name is unfinished
    written.pop("uid-train")
    view.indexes[JOB_INDEX][("ns", "train")] = [body(job(), "5")]
    assert {c.name for c in view.claims()} == {"train", "other"}


def _renamed_uid(b: dict[str, Any], uid: str, created: str) -> dict[str, Any]:
    b["metadata"].update(uid=uid, creationTimestamp=created)
    return b


def test_a_job_created_under_a_finished_jobs_name_claims_before_the_deletion_is_seen() -> None:
    """After a watch gap, the re-list shows the new job of a name before the old one's deletion: the old one was
    finished (keyed by name, the new one was skipped: its capacity was given twice)."""
    written: dict[str, MLJobStatus] = {}
    view = ClusterView(written=written)
    view.indexes = {JOB_INDEX: {("ns", "train"): [body(job(), "1")]}}
    written["uid-train"] = MLJobStatus(phase="DONE", reason="Completed")
    assert view.claims() == []
    newer = _renamed_uid(body(job(targetInstances=2), "7"), "uid-train-2", "2026-01-01T12:05:00Z")
    view.indexes[JOB_INDEX][("ns", "train")] = [body(job(), "1"), newer]  # both watched until the deletion is seen
    claims = view.claims()
    assert [(c.name, c.min_instances) for c in claims] == [("train", 2)]
    found = view.job(("ns", "train"))
    assert found is not None and found[0].metadata["uid"] == "uid-train-2"


async def test_a_late_deletion_keeps_the_newer_jobs_state() -> None:
    """The deletion of an earlier job of the name seen after the newer job (a watch gap resynced): what is kept by
    name (locks, deadlines, what the handlers acted on) stays the newer job's; the old uid's state goes."""
    op, _, _ = operator_state([job(targetInstances=1)], [pool()])
    await reconcile_job(op, ("ns", "train"))
    op.view.seen_jobs[("ns", "train")] = ("uid-train", 1, False)
    lock = op.queue.lock(("ns", "train"))
    op.forget(("ns", "train"), "uid-old")
    assert op.view.seen_jobs[("ns", "train")] == ("uid-train", 1, False)
    assert op.queue.lock(("ns", "train")) is lock and "uid-train" in op.status.written


async def test_forgetting_a_job_leaves_nothing_of_it() -> None:
    """Every piece of the state forgets a deleted job: no cache keyed by it or its uid keeps an entry."""
    op, _, _ = operator_state([job(targetInstances=1)], [pool()])
    await reconcile_job(op, ("ns", "train"))
    op.view.seen_jobs[("ns", "train")] = ("uid-train", 1, False)
    assert op.view.claims() and op.view.claim_cache and op.status.written and op.children.ready
    op.forget(("ns", "train"), "uid-train")
    for part in (op.view, op.queue, op.status, op.children):
        for name, value in vars(part).items():
            if isinstance(value, dict | set):
                assert ("ns", "train") not in value and "uid-train" not in value, f"{type(part).__name__}.{name}"


def test_the_job_index_keeps_no_kept_results_nor_managed_fields() -> None:
    from kubepool.controller.view import indexed_job

    body = {"metadata": {"name": "j", "annotations": {naming.result_annotation(0): "x" * 100_000, "team": "a"}},
            "spec": {"computePool": "cpu"}}
    kept = indexed_job(body)
    assert kept["metadata"]["annotations"] == {"team": "a"} and kept["spec"] is body["spec"]
    assert naming.result_annotation(0) in body["metadata"]["annotations"]  # the event's body is left as it was
    plain = {"metadata": {"name": "j", "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}]}}
    assert indexed_job(plain) == {"metadata": {"name": "j"}} and "managedFields" in plain["metadata"]


def test_tracked_claims_read_a_job_again_only_after_it_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    """As the operator runs (tracking: the job handlers report every change): a job's claim is read once, then
    again only after its next event; a finished job is never read; a job is seen from the moment its index
    handler ran, and gone once deleted; `claims(pools)` gives only the claims on those pools."""
    view = ClusterView(written={})
    view.indexes = {JOB_INDEX: {("ns", "train"): [body(job(), "1")]}}
    view.track_open_jobs()
    done = body(job(name="old", status={"phase": "DONE", "reason": "Completed"}), "2")
    view.job_indexed(("ns", "old"))
    view.indexes[JOB_INDEX][("ns", "old")] = [done]
    view.job_event(("ns", "old"))
    looked: list[object] = []
    original = ClusterView._parsed_job
    monkeypatch.setattr(ClusterView, "_parsed_job", lambda self, k, b: looked.append(k) or original(self, k, b))
    assert [c.name for c in view.claims()] == ["train"] and looked == [("ns", "train")]
    assert [c.name for c in view.claims()] == ["train"] and looked == [("ns", "train")]  # unchanged: not read
    view.job_indexed(("ns", "new"))  # kopf stores the body after its index handler, before the event handler
    view.indexes[JOB_INDEX][("ns", "new")] = [body(job(name="new", computePool="gpu"), "3")]
    assert {c.name for c in view.claims()} == {"train", "new"}
    assert [c.name for c in view.claims(["gpu"])] == ["new"] and [c.name for c in view.claims(["cpu", "tpu"])] == ["train"]
    view.job_event(("ns", "new"))
    looked.clear()
    view.indexes[JOB_INDEX][("ns", "train")] = [body(job(targetInstances=2), "4")]  # seen only through its event
    assert [c.min_instances for c in view.claims(["cpu"])] == [1] and looked == [("ns", "new")]
    view.job_event(("ns", "train"))
    assert [c.min_instances for c in view.claims(["cpu"])] == [2] and looked == [("ns", "new"), ("ns", "train")]
    del view.indexes[JOB_INDEX][("ns", "train")]  # deleted: out of the index before the handler runs
    view.job_event(("ns", "train"))
    assert {c.name for c in view.claims()} == {"new"} and view.claims(["cpu"]) == [] and "cpu" not in view.kept_by_pool


async def test_tracked_claims_follow_the_status_writer() -> None:
    """What the status writer puts in `written` (an admission reserved and written, or given back when its write
    fails) is reported to the view, so a tracked claim is read again."""
    op, api, _ = operator_state([job()], [pool()])
    assert [c.granted for c in op.view.claims(["cpu"])] == [0]
    await reconcile_job(op, ("ns", "train"))
    assert [c.granted for c in op.view.claims(["cpu"])] == [1]
    op, api, _ = operator_state([job()], [pool()])
    seen: list[int] = []

    async def refused(*_: Any) -> None:
        seen.extend(c.granted for c in op.view.claims(["cpu"]))  # another job decides while the write is out
        raise KubeError("refused", 403)

    api.patch_job_status = refused
    with pytest.raises(KubeError):
        await reconcile_job(op, ("ns", "train"))
    assert seen == [1] and [c.granted for c in op.view.claims(["cpu"])] == [0]


def test_tracked_claims_see_a_job_recreated_under_a_finished_jobs_name() -> None:
    """A re-list after a watch gap: the new job of a finished job's name is indexed while the old body is still
    held. claims() never drops a key itself, so a decision between the index handler and the store cannot lose
    the new job; its event keeps it tracked."""
    view = ClusterView(written={})
    old = body(job(status={"phase": "DONE", "reason": "Completed"}), "1")
    view.indexes = {JOB_INDEX: {("ns", "train"): [old]}}
    view.track_open_jobs()
    view.job_event(("ns", "train"))
    assert view.claims() == [] and view.stale == set()
    view.job_indexed(("ns", "train"))
    assert view.claims() == []  # the new body not stored yet: the old one is finished
    newer = _renamed_uid(body(job(targetInstances=2), "7"), "uid-train-2", "2026-01-01T12:05:00Z")
    view.indexes[JOB_INDEX][("ns", "train")] = [old, newer]
    view.job_event(("ns", "train"))
    assert [(c.name, c.min_instances) for c in view.claims()] == [("train", 2)]


def test_phase_counts_read_the_written_status_first() -> None:
    written: dict[str, MLJobStatus] = {}
    view = ClusterView(written=written)
    view.indexes = {JOB_INDEX: {("ns", "train"): [body(job(), "1")],
                                ("ns", "a"): [body(job(name="a", status={"phase": "DONE"}), "1")],
                                ("ns", "b"): [body(job(name="b", status={"phase": "RUNNING"}), "1")]}}
    written["uid-b"] = MLJobStatus(phase="FAILED", reason="Failed")
    assert view.phase_counts() == {"DONE": 1, "FAILED": 1}
