"""Submission flow, the MLJob handle and list_jobs against an in-memory cluster (no cluster)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import cloudpickle
import pandas as pd
import pytest
from fakes import FakeKube, pool

from kubepool import contract, jobs, naming
from kubepool.api.mljob import RaySpec
from kubepool.contract import StoredResult
from kubepool.jobs.payload import MANIFEST_KEY
from kubepool.kube.errors import Forbidden, NotFound


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "ray_tasks.py"
    path.write_text("import ray\nray.init(address='auto')\n")
    return path


def keep(fake_kube: FakeKube, name: str, doc: dict[str, object], instance: int = 0, pod: str = "") -> None:
    """What an instance's runtime keeps on its job (runtime.result_store)."""
    data = base64.b64encode(cloudpickle.dumps(doc)).decode()
    kept = StoredResult(pod=pod or f"p-{instance}", instance=instance, success=bool(doc["success"]), data=data)
    meta = fake_kube.jobs[(fake_kube.namespace, name)].metadata
    meta.setdefault("annotations", {})[naming.result_annotation(instance)] = kept.model_dump_json(exclude_none=True)


def test_submit_file_creates_job_then_owned_configmap(fake_kube: FakeKube, script: Path) -> None:
    job = jobs.submit_file(script, "cpu", target_instances=3, args=["--n", 10], stage_name="ignored")
    assert job.id.startswith("team/ray-tasks-") and job.target_instances == 3 and job.min_instances == 3
    assert [c.split()[0] for c in fake_kube.calls] == ["get_pool", "create_job", "create_configmap"]
    stored = fake_kube.jobs[("team", job.name)]
    assert stored.spec.args == ["--n", "10"] and stored.spec.entrypoint.file == "ray_tasks.py"
    cm = fake_kube.configmaps[("team", f"{job.name}-payload")]
    assert cm.metadata.ownerReferences[0].uid == stored.metadata["uid"]  # type: ignore[index,union-attr]
    assert json.loads(cm.data[MANIFEST_KEY])["files"]["ray_tasks.py"]["path"] == "ray_tasks.py"  # type: ignore[index]


def test_unknown_pool_and_too_small_pool_are_refused_before_creating(fake_kube: FakeKube, script: Path) -> None:
    with pytest.raises(jobs.PoolNotFound, match="'gpu' does not exist.*kubepool pools"):
        jobs.submit_file(script, "gpu")
    fake_kube.pools["small"] = pool("small", max_nodes=2)
    with pytest.raises(ValueError, match=r"min_instances \(3\) exceeds the max_nodes \(2\)"):
        jobs.submit_file(script, "small", target_instances=3)
    assert fake_kube.jobs == {}


def test_forbidden_pool_read_is_left_to_the_operator(fake_kube: FakeKube, script: Path, monkeypatch) -> None:
    def forbidden(name: str) -> None:
        raise Forbidden("no", 403)

    monkeypatch.setattr(fake_kube, "get_pool", forbidden)
    assert jobs.submit_file(script, "anything").name


def test_min_over_target_fails_without_api_calls(fake_kube: FakeKube, script: Path) -> None:
    with pytest.raises(ValueError, match="less than or equal"):
        jobs.submit_file(script, "cpu", target_instances=2, min_instances=5)
    assert fake_kube.calls == []


def test_configmap_failure_rolls_the_job_back(fake_kube: FakeKube, script: Path) -> None:
    fake_kube.configmap_error = Forbidden("cannot create configmaps", 403)
    with pytest.raises(Forbidden):
        jobs.submit_file(script, "cpu", name="j1")
    assert fake_kube.calls[-1] == "delete_job j1" and fake_kube.jobs == {}


def test_submit_directory(fake_kube: FakeKube, tmp_path: Path) -> None:
    (tmp_path / "src" / "lib").mkdir(parents=True)
    (tmp_path / "src" / "main.py").write_text("import lib.x\n")
    (tmp_path / "src" / "lib" / "x.py").write_text("")
    job = jobs.submit_directory(tmp_path / "src", "cpu", entrypoint="main.py", target_instances=5,
                                min_instances=2, pip_requirements=["tqdm"], env_vars={"MODE": "fast"})
    spec = fake_kube.jobs[("team", job.name)].spec
    assert (spec.target_instances, spec.min_instances, spec.pip_requirements) == (5, 2, ["tqdm"])
    with pytest.raises(ValueError, match="not a file of"):
        jobs.submit_directory(tmp_path / "src", "cpu", entrypoint="missing.py")
    cmd = jobs.submit_directory(tmp_path / "src", "cpu", entrypoint=["bash", "-c", "echo hi"])
    assert fake_kube.jobs[("team", cmd.name)].spec.entrypoint.command == ["bash", "-c", "echo hi"]


def test_remote_returns_a_handle_per_call(fake_kube: FakeKube) -> None:
    @jobs.remote("cpu", target_instances=5, min_instances=2)
    def train(x: int) -> int:
        return x + 1

    first, second = train(1), train(2)
    assert first.name != second.name and first.name.startswith("train-")
    spec = fake_kube.jobs[("team", first.name)].spec
    assert spec.entrypoint.file == "kubepool_remote.py" and spec.entrypoint.function == "main"
    assert (spec.target_instances, spec.min_instances) == (5, 2)
    with pytest.raises(ValueError):
        jobs.remote("cpu", target_instances=1, min_instances=2)


def test_status_wait_and_result(fake_kube: FakeKube, script: Path) -> None:
    job = jobs.submit_file(script, "cpu", name="j")
    assert job.status == "PENDING"
    running = fake_kube.set_phase("j", "RUNNING", readyInstances=1)
    done = fake_kube.set_phase("j", "DONE")
    fake_kube.jobs[("team", "j")] = fake_kube.set_phase("j", "PENDING")
    fake_kube.watch_events = [("MODIFIED", running), ("MODIFIED", done)]
    seen: list[str] = []
    assert job.wait(30, on_update=lambda o: seen.append(str(o.status.phase if o.status else None))) == "DONE"
    assert seen == ["PENDING", "RUNNING", "DONE"]
    keep(fake_kube, "j", {"success": True, "value": 42})
    job._obj = None  # read the job again (the fake's watch events carried none of it)
    forged = "KUBEPOOL_RESULT gASVCgAAAAAAAAB9lC4="  # a line a payload printed: it decides nothing
    fake_kube.logs[0] = ["ML job started", forged]
    assert job.result() == 42  # from what the head kept, whatever the log says
    assert job.get_logs() == f"ML job started\n{forged}"


def test_wait_times_out(fake_kube: FakeKube, script: Path) -> None:
    job = jobs.submit_file(script, "cpu", name="slow")
    with pytest.raises(TimeoutError, match="did not finish within 0.5s"):
        job.wait(0.5)
    assert any(c.startswith("watch_job slow 1") for c in fake_kube.calls)


def test_failed_job_without_result_raises_its_message(fake_kube: FakeKube, script: Path) -> None:
    job = jobs.submit_file(script, "cpu", name="f")
    fake_kube.set_phase("f", "FAILED", message="instances unavailable after 720s")
    fake_kube.logs[0] = ["boom"]
    with pytest.raises(RuntimeError, match="ended FAILED: instances unavailable"):
        job.result()


RAY_BANNER = ["Local node IP: 127.101.0.2", "--------------------", "Ray runtime started.", "--------------------"]
START, END = contract.LOG_START_MSG.splitlines(), contract.LOG_END_MSG.splitlines()


def test_default_logs_are_the_payloads_output(fake_kube: FakeKube, script: Path) -> None:
    """Snowflake's `get_logs(verbose=False)`: the payload's output (a traceback included) between the banners;
    a log without banners whole; `verbose=True` is the log (tests/sdk/unit/test_logs.py: against the wheel's extraction)."""
    job = jobs.submit_file(script, "cpu", name="v", target_instances=2)
    head = [*RAY_BANNER, "kubepool[0]: 2/2 instances", *START, "epoch 1", "(raylet) task log", "Traceback (most recent call last):",
            '  File "train.py"', *END, "2026-12-01 INFO ray shutdown"]  # fmt: skip
    fake_kube.logs = {0: head, 1: [*RAY_BANNER, "kubepool[1]: worker joined"]}
    assert job.get_logs(as_list=True) == ["epoch 1", "(raylet) task log", "Traceback (most recent call last):",
                                          '  File "train.py"']  # fmt: skip
    assert job.get_logs(instance_id=1) == "\n".join([*RAY_BANNER, "kubepool[1]: worker joined"])
    assert job.get_logs(limit=2, as_list=True) == ["Traceback (most recent call last):", '  File "train.py"']
    assert job.get_logs(verbose=True, as_list=True) == head


def test_logs_per_instance(fake_kube: FakeKube, script: Path) -> None:
    job = jobs.submit_file(script, "cpu", name="l", target_instances=3)
    fake_kube.logs = {0: ["head"], 1: ["w1 a", "w1 b"], 2: ["w2"]}
    assert [job.get_logs(instance_id=k, verbose=True) for k in range(3)] == ["head", "w1 a\nw1 b", "w2"]
    assert job.get_logs(limit=1, instance_id=1, as_list=True, verbose=True) == ["w1 b"]
    with pytest.raises(ValueError, match="instance_id must be in 0..2"):
        job.get_logs(instance_id=7)
    del fake_kube.logs[2]
    with pytest.raises(NotFound, match="no pod for instance 2"):
        job.get_logs(instance_id=2)


def test_cancel_list_get_delete(fake_kube: FakeKube, script: Path) -> None:
    a = jobs.submit_file(script, "cpu", name="a")
    jobs.submit_file(script, "cpu", name="b", target_instances=2)
    a.cancel()
    assert fake_kube.jobs[("team", "a")].spec.cancel is True and fake_kube.jobs[("team", "a")].spec.suspend is False
    assert a.status == "CANCELLING"  # Snowflake's: cancelled, the operator has not removed the pods yet
    fake_kube.set_phase("a", "CANCELLED")
    a._obj = None
    assert a.status == "CANCELLED"
    table = jobs.list_jobs()
    assert isinstance(table, pd.DataFrame)
    assert list(table["name"]) == ["b", "a"] and list(table["target_instances"]) == [2, 1]
    assert list(table["schema_name"]) == ["team", "team"] and list(table["compute_pool"]) == ["cpu", "cpu"]
    rows = jobs.list_jobs(limit=1, as_list=True)
    assert [r.name for r in rows] == ["b"] and rows[0].pool == "cpu"
    assert jobs.get_job("team/a").id == "team/a"
    with pytest.raises(NotFound):
        jobs.get_job("nope")
    jobs.delete_job("a")
    jobs.delete_job(jobs.get_job("b"))
    assert fake_kube.jobs == {}
    with pytest.raises(ValueError, match="Invalid job ID"):
        jobs.get_job("/x")


def test_dashboard_url(fake_kube: FakeKube, script: Path) -> None:
    job = jobs.submit_file(script, "cpu", name="d")
    assert job.get_ray_dashboard_url() == "http://algo-1.d-svc.team.svc:8265"
    fake_kube.set_phase("d", "RUNNING", rayDashboard="http://10.0.0.5:8265")
    assert job.get_ray_dashboard_url() == "http://10.0.0.5:8265"
    stored = fake_kube.jobs[("team", "d")]
    fake_kube.jobs[("team", "d")] = stored.model_copy(update={"spec": stored.spec.model_copy(update={"ray": RaySpec(dashboard=False)})})
    fake_kube.set_phase("d", "RUNNING")
    with pytest.raises(RuntimeError, match="no Ray dashboard"):
        job.get_ray_dashboard_url()


def test_failed_job_without_pods_raises_its_message(fake_kube: FakeKube, script: Path) -> None:
    job = jobs.submit_file(script, "cpu", name="gone")
    fake_kube.set_phase("gone", "FAILED", message="InstancesUnavailable")
    with pytest.raises(RuntimeError, match="ended FAILED: InstancesUnavailable"):
        job.result()


def _instances(codes: dict[int, int | None]) -> list[dict[str, object]]:
    return [{"instanceId": i, "group": "homogeneousCluster", "rankInGroup": i, "host": f"algo-{i + 1}",
             "pod": f"p-{i}", **({"exitCode": c} if c is not None else {})} for i, c in codes.items()]


def test_distributed_result_of_a_parallel_job(fake_kube: FakeKube, script: Path) -> None:
    job = jobs.submit_file(script, "cpu", target_instances=3, parallel=True, name="par")
    keep(fake_kube, "par", {"success": True, "value": {"loss": 0.1}})
    fake_kube.set_phase("par", "DONE", instances=_instances({0: 0, 1: 0, 2: 0}))
    res = job.distributed_result()
    assert res == jobs.DistributedResult(success=True, exit_codes={0: 0, 1: 0, 2: 0}, return_value={"loss": 0.1})


def test_distributed_result_raises_with_the_summary_and_the_remote_cause(fake_kube: FakeKube, script: Path) -> None:
    job = jobs.submit_file(script, "cpu", target_instances=3, parallel=True, name="par")
    boom = ValueError("shard 2 is empty")
    keep(fake_kube, "par", {"success": False, "error": boom, "traceback": "Traceback..."}, instance=1)
    fake_kube.set_phase("par", "FAILED", instances=_instances({0: 0, 1: 1, 2: None}))  # 2 never ran
    with pytest.raises(jobs.DistributedJobError, match="2/3 instances did not exit 0") as err:
        job.distributed_result()
    assert err.value.result is not None
    assert (err.value.result.exit_codes, err.value.result.failed_instance) == ({0: 0, 1: 1, 2: None}, 1)
    assert isinstance(err.value.__cause__, ValueError) and str(err.value.__cause__) == "shard 2 is empty"


def test_distributed_result_is_for_distributed_jobs_only(fake_kube: FakeKube, script: Path) -> None:
    job = jobs.submit_file(script, "cpu", target_instances=2, name="head-only")
    with pytest.raises(NotImplementedError, match="use result"):
        job.distributed_result()


def test_get_job_of_a_missing_job_raises_as_snowflake(fake_kube: FakeKube) -> None:
    with pytest.raises(jobs.JobNotFound, match="Job team/nope does not exist or could not be retrieved") as err:
        jobs.get_job("nope")
    assert err.value.sql_error_code == 2003 and isinstance(err.value, NotFound)
    with pytest.raises(ValueError, match="Invalid job ID"):
        jobs.get_job("team/")
