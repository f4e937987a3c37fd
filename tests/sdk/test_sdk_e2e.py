"""The seed flows end to end through the SDK and CLI, with the operator running the jobs on the local
nodes: a Ray-tasks file on 3 instances, `@remote` returning a value with min_instances 2 of 5, a
heterogeneous `Estimator.fit`, per-instance logs during and after the run, `kubepool logs -f` and
`kubepool list --output json`."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from kubepool import cli, jobs
from kubepool.sagemaker import Estimator, InstanceGroup

pytestmark = [pytest.mark.cluster, pytest.mark.ray]
JOB_TIMEOUT_S = 420

RAY_TASKS = """\
import time
import ray

ray.init(address="auto", ignore_reinit_error=True)
print(f"Available nodes: {len(ray.nodes())}", flush=True)


@ray.remote
def process_chunk(chunk):
    return sum(chunk)


chunks = [list(range(i, i + 10)) for i in range(0, 100, 10)]
print("total", sum(ray.get([process_chunk.remote(c) for c in chunks])), flush=True)
time.sleep(8)  # keeps the workers up long enough to read their logs while the job runs
"""


def _logs_while_running(job: jobs.MLJob, instances: int, deadline: float) -> dict[int, str]:
    """Each instance's log, read while the job is RUNNING."""
    seen: dict[int, str] = {}
    while len(seen) < instances:
        assert time.monotonic() < deadline, f"logs of instances {sorted(set(range(instances)) - set(seen))} never readable"
        assert job.status in ("PENDING", "RUNNING"), f"job ended {job.status} before every log was read: {job.message}"
        for k in set(range(instances)) - set(seen):
            try:
                text = job.get_logs(instance_id=k)
            except Exception:  # noqa: BLE001 - no pod or container yet: retry
                continue
            if text:  # a pod that has not started yet has an empty log
                seen[k] = text  # type: ignore[assignment]
        time.sleep(1)
    return seen


def test_ray_tasks_file_on_three_instances(operator: Any, compute_pool: Any, namespace: str, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    pool = compute_pool("cpu", max_nodes=3)
    script = tmp_path / "ray_tasks.py"
    script.write_text(RAY_TASKS)
    job = jobs.submit_file(script, pool, target_instances=3, namespace=namespace)
    deadline = time.monotonic() + JOB_TIMEOUT_S
    assert sorted(_logs_while_running(job, 3, deadline)) == [0, 1, 2]
    assert cli.main(["logs", job.id, "-f"]) == 0  # follows the head until it exits
    followed = capsys.readouterr().out
    assert "total 4950" in followed and "KUBEPOOL_RESULT" not in followed
    assert job.wait(JOB_TIMEOUT_S) == "DONE", job.message
    assert job.result() is None
    assert "Available nodes: 3" in job.get_logs()  # type: ignore[operator]
    for k in range(3):
        assert job.get_logs(instance_id=k), f"instance {k} has no log after the end"
    rows = json.loads(_out(capsys, ["list", "-n", namespace, "--output", "json"]))["items"]
    assert [(r["metadata"]["name"], r["status"]["phase"]) for r in rows] == [(job.name, "DONE")]
    status = json.loads(_out(capsys, ["status", job.id, "--output", "json"]))
    assert len(status["instances"]) == 3
    every = _out(capsys, ["logs", job.id, "--all", "--verbose"]).splitlines()
    assert {line.split(" ", 1)[0] for line in every} == {"[algo-1]", "[algo-2]", "[algo-3]"}
    assert "[algo-1] total 4950" in every


def test_the_jobs_env_sets_the_instances_clock(operator: Any, compute_pool: Any, namespace: str, tmp_path: Path) -> None:
    """#38 item 4: MLRS_INSTANCES_TIMEOUT and MLRS_INSTANCES_MIN_WAIT in the job's env are the head launcher's, its
    clock started when it starts waiting: 2 of 3 instances (the pool holds 2), a min wait longer than the timeout,
    and the gate times out 5 s into its wait, as Snowflake's launcher does; the payload never runs."""
    pool = compute_pool("cpu", max_nodes=2)
    script = tmp_path / "gated.py"
    script.write_text("print('the payload ran', flush=True)\n")
    job = jobs.submit_file(script, pool, target_instances=3, min_instances=2, namespace=namespace,
                           env_vars={"MLRS_INSTANCES_TIMEOUT": "5", "MLRS_INSTANCES_MIN_WAIT": "600"})
    assert job.wait(JOB_TIMEOUT_S) == "FAILED", job.message
    assert "MLRS_INSTANCES_TIMEOUT=5 since the launcher started waiting" in (job.message or ""), job.message
    assert "the payload ran" not in (job.get_logs(verbose=True) or "")


def _out(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert cli.main(argv) == 0
    return capsys.readouterr().out


def test_remote_returns_a_value_with_min_instances(operator: Any, compute_pool: Any, namespace: str) -> None:
    pool = compute_pool("cpu", max_nodes=3)

    @jobs.remote(pool, target_instances=5, min_instances=2, namespace=namespace, instances_timeout=120)
    def flexible(scale: int) -> dict[str, int]:
        import ray

        ray.init(address="auto", ignore_reinit_error=True)
        return {"nodes": len([n for n in ray.nodes() if n["Alive"]]), "value": scale * 7}

    job = flexible(6)
    out = job.result(timeout=JOB_TIMEOUT_S)
    assert out["value"] == 42 and 2 <= out["nodes"] <= 5
    assert job.status == "DONE"


def test_heterogeneous_estimator(operator: Any, compute_pool: Any, namespace: str, tmp_path: Path,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    # The local GPU nodes have 4 CPUs, less than GPU_NV_S's 6: size the instances to fit them.
    cpu, gpu = compute_pool("cpu", max_nodes=3), compute_pool("gpu", max_nodes=2, resources={"cpu": "2", "memory": "4Gi"})
    script = tmp_path / "train.py"
    script.write_text("import os\nprint('group', os.environ.get('SM_CURRENT_INSTANCE_GROUP'), "
                      "os.environ.get('SM_CURRENT_HOST'), flush=True)\n")
    est = Estimator(str(script), instance_groups=[InstanceGroup("instance_group_1", cpu, 2),
                                                  InstanceGroup("instance_group_2", gpu, 1)],
                    hyperparameters={"epochs": 1}, namespace=namespace, max_run=150)  # fail, never hang
    job = est.fit(wait=True, logs=True)
    assert job.status == "DONE"
    assert "group instance_group_1 algo-1" in capsys.readouterr().out
    assert "instance_group_2" in job.get_logs(instance_id=2)  # type: ignore[operator]


def test_directory_with_a_package_submitted_with_wait(operator: Any, compute_pool: Any, namespace: str,
                                                      tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pool = compute_pool("cpu", max_nodes=3)
    (tmp_path / "proj" / "pkg").mkdir(parents=True)
    (tmp_path / "proj" / "pkg" / "__init__.py").write_text("")
    (tmp_path / "proj" / "pkg" / "util.py").write_text("GREETING = 'hello from a package'\n")
    (tmp_path / "proj" / "main.py").write_text("import sys\nfrom pkg.util import GREETING\nprint(GREETING, sys.argv[1:])\n")
    # `submit --wait` streams the head's log while it waits (as kubectl-ray does), then prints the outcome.
    assert cli.main(["submit", str(tmp_path / "proj"), "--pool", pool, "--entrypoint", "main.py", "-n", namespace,
                     "--name", "pkg-job", "--wait", "--timeout", str(JOB_TIMEOUT_S), "--", "--x", "1"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"{namespace}/pkg-job" and out[-1] == "DONE"
    assert "hello from a package ['--x', '1']" in out[1:-1]
    assert jobs.get_job("pkg-job", namespace=namespace).status == "DONE"


def test_imports_ship_local_code_importable_by_its_module_path(operator: Any, compute_pool: Any, namespace: str,
                                                                tmp_path: Path) -> None:
    """Snowflake's `imports`: a package directory and a single file from elsewhere on the caller's disk reach the
    job importable as `shared` and `team.fmt`, beside the script itself."""
    pool = compute_pool("cpu", max_nodes=1)
    (tmp_path / "lib" / "shared").mkdir(parents=True)
    (tmp_path / "lib" / "shared" / "__init__.py").write_text("ANSWER = 42\n")
    (tmp_path / "other" / "fmt.py").parent.mkdir()
    (tmp_path / "other" / "fmt.py").write_text("def show(v):\n    return f'<{v}>'\n")
    script = tmp_path / "job" / "main.py"
    script.parent.mkdir()
    script.write_text("import shared\nfrom team.fmt import show\nprint('IMPORTED', show(shared.ANSWER))\n")
    job = jobs.submit_file(script, pool, namespace=namespace,
                           imports=[tmp_path / "lib" / "shared", (str(tmp_path / "other" / "fmt.py"), "team.fmt")])
    assert job.wait(JOB_TIMEOUT_S) == "DONE", job.message
    assert "IMPORTED <42>" in (job.get_logs() or "")


def test_code_kept_in_the_cluster_runs_jobs(operator: Any, compute_pool: Any, namespace: str, tmp_path: Path,
                                            kubectl: Any) -> None:
    """A code bundle and a job definition are stored once and run as jobs that mount them; a stage is code
    already in the cluster (here a ConfigMap of scripts)."""
    pool = compute_pool("cpu", max_nodes=3)
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "train.py").write_text("import sys\nfrom helper import NAME\nprint('RAN', NAME, sys.argv[1:])\n")
    (tmp_path / "proj" / "helper.py").write_text("NAME = 'first'\n")
    jobs.register_code_bundle(tmp_path / "proj", pool, stage_name="@unused", namespace=namespace, name="trainer")
    (tmp_path / "proj" / "helper.py").write_text("NAME = 'bundled'\n")  # registered again: replaced
    bundle = jobs.register_code_bundle(tmp_path / "proj", pool, stage_name="@unused", namespace=namespace, name="trainer")
    from_bundle = jobs.register_job_from_code_bundle(bundle, entrypoint="train.py", args=["b"])
    definition = jobs.MLJobDefinition.register(tmp_path / "proj", pool, "@unused", namespace=namespace, name="nightly",
                                               entrypoint="train.py", arg_protocol="cli", default_args=["--lr", "0.1"])
    from_definition = definition("d", lr=0.5)
    kubectl("create", "configmap", "scripts", "-n", namespace, "--from-literal=run.py=print('FROM STAGE')", check=True)
    from_stage = jobs.submit_from_stage("configmap://scripts", pool, entrypoint="run.py", namespace=namespace)
    for job, line in [(from_bundle, "RAN bundled ['b']"), (from_definition, "RAN bundled ['d', '--lr', '0.5']"),
                      (from_stage, "FROM STAGE")]:
        assert job.wait(JOB_TIMEOUT_S) == "DONE", (job.id, job.message)
        assert line in (job.get_logs() or ""), job.get_logs()
    bundle.delete()
    definition.delete()
    assert kubectl("get", "configmap", "trainer", "nightly", "-n", namespace).returncode != 0
