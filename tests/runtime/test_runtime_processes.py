"""`python -m kubepool.runtime` as real processes: instances on loopback IPs 127.0.5.2-4 (this suite's range),
one contract file, per-instance env, as the operator would set them on pods.

Ray startups are the expensive part on small machines, so each Ray test starts one cluster and checks
everything about it: three nodes, the payload sees them, workers leave on the head's word, the head's exit
code is the payload's; then 2 of 3 after the min wait; then the timeout with 1 of 3.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from kubepool.contract import (
    ENV_BASE_DIR,
    ENV_CONTRACT_FILE,
    ENV_HEAD_LOST_TIMEOUT,
    ENV_INSTANCE_ID,
    ENV_PAYLOAD_DIR,
    ENV_POD_IP,
    ENV_RAY_PORT_OFFSET,
    ENV_RAY_TEMP_DIR,
    ENV_RESULT_DIR,
    ENV_TERMINATION_LOG,
    RESULT_FILENAME,
    Entrypoint,
    Group,
    JobContract,
    RaySettings,
    RunMode,
)

IPS = ["127.0.5.2", "127.0.5.3", "127.0.5.4"]
# Raylets bind their ports on all interfaces, and other suites on this machine run Ray too: every fixed port
# here lies in 20000-32767, clear of Ray's defaults, of other clusters' default worker ports (10002-19999)
# and of the ephemeral range, and the per-node offsets keep this suite's nodes apart.
RAY = RaySettings(gcs_port=23379, dashboard_port=23265, client_port=23001, object_store_memory_bytes=80 * 1024 * 1024)
PORT_OFFSETS = [17000, 17100, 17200]

HEAD_PAYLOAD = """
import os, sys, urllib.error, urllib.request
import ray

ray.init(address="auto", ignore_reinit_error=True)
alive = [n for n in ray.nodes() if n["Alive"]]
print("NODES", len(alive), sorted(n["NodeManagerAddress"] for n in alive))

@ray.remote(num_cpus=0.1)
def where():
    return ray.util.get_node_ip_address()

from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
workers = [n["NodeID"] for n in alive if "node_tag:worker" in n["Resources"]]
pinned = [where.options(scheduling_strategy=NodeAffinitySchedulingStrategy(w, soft=False)).remote() for w in workers]
print("WORKER_IPS", sorted(ray.get(pinned)))
print("ENV", os.environ["NODE_IP_ADDRESS"], os.environ["DASHBOARD_PORT"], os.environ["SNOWFLAKE_JOBS_COUNT"],
      os.environ["MLRS_MIN_INSTANCES"], os.environ["RAY_AUTH_MODE"])
try:
    urllib.request.urlopen(f"http://{os.environ['NODE_IP_ADDRESS']}:{os.environ['DASHBOARD_PORT']}/api/version", timeout=10)
    print("DASHBOARD open")
except urllib.error.HTTPError as e:
    print("DASHBOARD", e.code)
from ray.job_submission import JobSubmissionClient  # the seed's way in: it sends the token from the env
print("JOBS_API", type(JobSubmissionClient(f"http://{os.environ['NODE_IP_ADDRESS']}:{os.environ['DASHBOARD_PORT']}").list_jobs()).__name__)
sys.exit(int(sys.argv[1]))
"""

# The shape of SageMaker's hello-world heterogeneous script: branch on the group, print the topology.
SAGEMAKER_PAYLOAD = """
import json, os, sys
env = json.loads(os.environ["SM_TRAINING_ENV"])
rc = json.load(open(os.path.join(os.environ["SM_INPUT_CONFIG_DIR"], "resourceconfig.json")))
print("HELLO", os.environ["SM_CURRENT_HOST"], os.environ["SM_CURRENT_INSTANCE_GROUP"], os.environ["SM_HOSTS"],
      os.environ["SM_CURRENT_INSTANCE_GROUP_HOSTS"], rc["current_group_name"], sys.argv[1:],
      os.environ.get("RANK", "-"), os.environ.get("WORLD_SIZE", "-"), os.environ.get("MASTER_ADDR", "-"),
      sorted(os.listdir(os.environ["SM_CHANNEL_TRAIN"])) if "SM_CHANNEL_TRAIN" in os.environ else "-")
"""


@dataclass
class Instances:
    """Runs instances of one job as local processes."""

    root: Path
    contract: JobContract
    ray_root: Path
    token: str = field(default_factory=lambda: secrets.token_hex(32))
    procs: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)

    def env(self, iid: int) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "KUBEPOOL_", "SM_"))}
        env.update({
            ENV_CONTRACT_FILE: str(self.root / "contract.json"),
            ENV_INSTANCE_ID: str(iid),
            ENV_POD_IP: IPS[iid],
            ENV_BASE_DIR: str(self.root / f"opt-ml-{iid}"),
            ENV_PAYLOAD_DIR: str(self.root / "payload"),
            ENV_TERMINATION_LOG: str(self.root / f"termination-{iid}"),
            ENV_RESULT_DIR: str(self.root / f"result-{iid}"),
            ENV_RAY_TEMP_DIR: str(self.ray_root / f"n{iid}"),  # short: Ray's socket paths are length-limited
            ENV_RAY_PORT_OFFSET: str(PORT_OFFSETS[iid]),
            ENV_HEAD_LOST_TIMEOUT: "8",
            "RAY_AUTH_TOKEN": self.token,
            "MLRS_INSTANCES_CHECK_INTERVAL": "1",
            "PYTHONUNBUFFERED": "1",
        })
        return env

    def start(self, *ids: int) -> None:
        (self.root / "contract.json").write_text(self.contract.dumps())
        for iid in ids:
            (self.root / f"result-{iid}").mkdir(exist_ok=True)
            out = open(self.root / f"log-{iid}", "wb")  # noqa: SIM115 - closed with the process
            self.procs[iid] = subprocess.Popen(
                [sys.executable, "-m", "kubepool.runtime"], env=self.env(iid), stdout=out, stderr=subprocess.STDOUT
            )
            out.close()

    def wait(self, iid: int, timeout: float) -> int:
        try:
            return self.procs[iid].wait(timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"instance {iid} still running after {timeout}s:\n{self.log(iid)[-3000:]}")

    def log(self, iid: int) -> str:
        return (self.root / f"log-{iid}").read_text(errors="replace")

    def result(self, iid: int) -> dict[str, Any]:
        """The payload's outcome as the runtime recorded it (its result file: the API is not here to keep it)."""
        path = self.root / f"result-{iid}" / RESULT_FILENAME
        assert path.is_file(), self.log(iid)[-3000:]
        doc: dict[str, Any] = json.loads(path.read_text())
        return doc

    def termination(self, iid: int) -> dict[str, object]:
        doc: dict[str, object] = json.loads((self.root / f"termination-{iid}").read_text())
        return doc

    def stop_all(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs.values():
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        kill_leftovers(self.ray_root)


def kill_leftovers(marker: Path) -> None:
    """Safety net: any Ray process of this test (found by its unique temp dir) that outlived its instance."""
    for pid in ray_processes(marker):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def job(mode: RunMode, groups: list[Group], entrypoint: Entrypoint, **kw: object) -> JobContract:
    c = JobContract(
        job_name="rt", namespace="ns", job_uid="u", groups=groups, entrypoint=entrypoint, mode=mode, ray=RAY,
        target_instances=kw.pop("target", 3), min_instances=kw.pop("minimum", 3), **kw,  # type: ignore[arg-type]
    )
    # No cluster DNS here: each instance's stable name is its loopback IP.
    instances = [i.model_copy(update={"dns": IPS[i.instance_id]}) for i in c.instances]
    return c.model_copy(update={"instances": instances, "head_address": IPS[0]})


@pytest.fixture()
def instances(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Instances]:
    contract, payload = request.param
    (tmp_path / "payload").mkdir()
    (tmp_path / "payload" / "main.py").write_text(payload)
    ray_root = Path(tempfile.mkdtemp(prefix="kprt", dir="/tmp"))
    runner = Instances(tmp_path, contract, ray_root)
    try:
        yield runner
    finally:
        runner.stop_all()
        shutil.rmtree(ray_root, ignore_errors=True)


ONE_GROUP = [Group(name="homogeneousCluster", instance_type="cpu", count=3, cpus=1)]


@pytest.mark.ray
@pytest.mark.parametrize(
    "instances", [(job(RunMode.HEAD, ONE_GROUP, Entrypoint(path="main.py", args=["7"])), HEAD_PAYLOAD)], indirect=True
)
def test_three_instances_form_one_cluster(instances: Instances) -> None:
    instances.start(0, 1, 2)
    head = instances.wait(0, 240)
    out = instances.log(0)
    assert head == 7, out[-3000:]  # the payload's exit code
    assert "NODES 3 ['127.0.5.2', '127.0.5.3', '127.0.5.4']" in out
    assert "WORKER_IPS ['127.0.5.3', '127.0.5.4']" in out
    assert "ENV 127.0.5.2 23265 3 3 token" in out
    assert "DASHBOARD 401" in out  # token auth guards the Jobs API
    assert "JOBS_API list" in out
    assert out.index("ML job started") < out.index("NODES") < out.index("ML job finished")
    res = instances.result(0)
    assert res["success"] is False and "code 7" in res["error"]
    assert "KUBEPOOL_RESULT" not in out  # the outcome is never a log line a payload could print
    assert instances.termination(0)["exitCode"] == 7
    for w in (1, 2):
        assert instances.wait(w, 60) == 0, instances.log(w)[-3000:]
        assert "the head finished the job; leaving" in instances.log(w)


@pytest.mark.ray
@pytest.mark.parametrize(
    "instances",
    [(job(RunMode.HEAD, ONE_GROUP, Entrypoint(path="main.py", args=["0"]), minimum=2, min_wait_seconds=3, instances_timeout_seconds=120), HEAD_PAYLOAD)],
    indirect=True,
)
def test_min_instances_runs_on_two_of_three_after_min_wait(instances: Instances) -> None:
    instances.start(0, 1)  # instance 2 never comes
    assert instances.wait(0, 180) == 0, instances.log(0)[-3000:]
    out = instances.log(0)
    assert "Minimum instance requirement met: 2 instances available" in out
    assert "NODES 2" in out and "WORKER_IPS ['127.0.5.3']" in out
    assert instances.wait(1, 60) == 0
    assert instances.result(0)["success"] is True


@pytest.mark.ray
@pytest.mark.parametrize(
    "instances",
    [(job(RunMode.HEAD, ONE_GROUP, Entrypoint(path="main.py", args=["0"]), minimum=2, min_wait_seconds=1, instances_timeout_seconds=6), HEAD_PAYLOAD)],
    indirect=True,
)
def test_gate_times_out_with_one_of_three(instances: Instances) -> None:
    instances.start(0)
    assert instances.wait(0, 120) != 0
    out = instances.log(0)
    assert "waiting for 2 instances, only 1 available" in out
    assert "ML job started" not in out
    assert "only 1 available" in str(instances.termination(0)["error"])


TWO_GROUPS = [Group(name="data_group", instance_type="ml.c5.xlarge", count=1), Group(name="dnn_group", instance_type="ml.m4.xlarge", count=2)]


@pytest.mark.parametrize(
    "instances",
    [(job(RunMode.SAGEMAKER, TWO_GROUPS, Entrypoint(path="main.py"), hyperparameters={"epochs": "2"},
          distribution_instance_groups=["dnn_group"]), SAGEMAKER_PAYLOAD)],
    indirect=True,
)
def test_sagemaker_two_groups(instances: Instances) -> None:
    instances.start(0, 1, 2)
    codes = [instances.wait(i, 60) for i in range(3)]
    assert codes == [0, 0, 0], [instances.log(i)[-2000:] for i in range(3)]
    hosts = '["algo-1","algo-2","algo-3"]'
    expected = [
        f"HELLO algo-1 data_group {hosts} [\"algo-1\"] data_group ['--epochs', '2'] - - -",
        f"HELLO algo-2 dnn_group {hosts} [\"algo-2\",\"algo-3\"] dnn_group ['--epochs', '2'] 0 2 127.0.5.3",
        f"HELLO algo-3 dnn_group {hosts} [\"algo-2\",\"algo-3\"] dnn_group ['--epochs', '2'] 1 2 127.0.5.3",
    ]
    for i, line in enumerate(expected):
        assert line in instances.log(i), instances.log(i)[-2000:]
        assert (instances.root / f"opt-ml-{i}" / "output" / "success").exists()


PARALLEL_PAYLOAD = """
import os, signal
if os.environ["SNOWFLAKE_JOB_INDEX"] == "2":
    os.kill(os.getpid(), signal.SIGKILL)  # as the OOM killer would
print("PAR", os.environ["SNOWFLAKE_JOB_INDEX"], os.environ["SNOWFLAKE_JOBS_COUNT"], os.environ["MLRS_HEAD_IP"],
      os.environ["MLRS_NODE_IPS"], os.environ["MLRS_RDZV_PORT"])
__return__ = int(os.environ["SNOWFLAKE_JOB_INDEX"]) * 10
"""


@pytest.mark.parametrize(
    "instances", [(job(RunMode.PARALLEL, ONE_GROUP, Entrypoint(path="main.py")), PARALLEL_PAYLOAD)], indirect=True
)
def test_parallel_mode_runs_everywhere_and_reports_a_killed_payload(instances: Instances) -> None:
    instances.start(0, 1, 2)
    for i in range(2):
        assert instances.wait(i, 60) == 0, instances.log(i)[-2000:]
        assert f"PAR {i} 3 127.0.5.2 127.0.5.2,127.0.5.3,127.0.5.4 29500" in instances.log(i)
        assert instances.result(i)["value"] == i * 10
    assert instances.wait(2, 60) == 137
    assert instances.termination(2)["error"] == "the payload was killed by signal 9"


SLEEPER = "import time\nprint('SLEEPING', flush=True)\ntime.sleep(600)\n"
TWO = [Group(name="g", instance_type="cpu", count=2)]


def wait_for_line(instances: Instances, iid: int, text: str) -> None:
    deadline = time.monotonic() + 240  # Ray starts slowly on a loaded 2-core machine
    while text not in instances.log(iid):
        assert time.monotonic() < deadline and instances.procs[iid].poll() is None, instances.log(iid)[-3000:]
        time.sleep(0.5)


@pytest.mark.ray
@pytest.mark.parametrize(
    "instances", [(job(RunMode.HEAD, TWO, Entrypoint(path="main.py"), target=2, minimum=2), SLEEPER)], indirect=True
)
def test_sigterm_on_the_head_stops_payload_and_ray_and_releases_workers(instances: Instances) -> None:
    instances.start(0, 1)
    wait_for_line(instances, 0, "SLEEPING")
    instances.procs[0].send_signal(signal.SIGTERM)
    assert instances.wait(0, 60) == 143
    assert "SIGTERM: stopped the payload and Ray" in instances.log(0)
    assert instances.wait(1, 60) == 0
    assert_no_processes_left(instances.ray_root)


def assert_no_processes_left(marker: Path) -> None:
    deadline = time.monotonic() + 10  # Ray's own workers exit shortly after their raylet
    while (left := ray_processes(marker)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not left, [Path(f"/proc/{p}/cmdline").read_bytes() for p in left]


@pytest.mark.ray
@pytest.mark.parametrize(
    "instances", [(job(RunMode.HEAD, TWO, Entrypoint(path="main.py"), target=2, minimum=2), SLEEPER)], indirect=True
)
def test_worker_fails_when_the_head_vanishes(instances: Instances) -> None:
    instances.start(0, 1)
    wait_for_line(instances, 0, "SLEEPING")
    instances.procs[0].kill()  # no word to the workers: SIGKILL, then everything the head started
    instances.procs[0].wait()
    kill_leftovers(instances.ray_root / "n0")
    assert instances.wait(1, 90) == 1
    assert "leaving without the head's word: head-lost" in instances.log(1)
    assert "head-lost" in str(instances.termination(1)["error"])


def ray_processes(marker: Path) -> list[int]:
    """Processes of this test's instances: their env or command line names the instance's Ray temp dir."""
    found = []
    for pid_dir in Path("/proc").iterdir():
        try:
            if pid_dir.name.isdigit() and any(
                str(marker).encode() in (pid_dir / f).read_bytes() for f in ("cmdline", "environ")
            ):
                found.append(int(pid_dir.name))
        except OSError:
            continue
    return found


def test_a_broken_contract_fails_with_the_reason(tmp_path: Path) -> None:
    (tmp_path / "contract.json").write_text("{}")
    env = {**os.environ, ENV_CONTRACT_FILE: str(tmp_path / "contract.json"), ENV_INSTANCE_ID: "0",
           ENV_TERMINATION_LOG: str(tmp_path / "termination")}
    proc = subprocess.run([sys.executable, "-m", "kubepool.runtime"], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert json.loads((tmp_path / "termination").read_text())["error"].startswith("ValidationError: ")


def test_a_packed_payload_runs_from_its_tree(tmp_path: Path) -> None:
    """The SDK's payload ConfigMap (flat keys + manifest), mounted as Kubernetes mounts it: one file per key."""
    from kubepool.jobs.payload import directory_payload, pack

    proj = tmp_path / "proj"
    (proj / "pkg").mkdir(parents=True)
    (proj / "pkg" / "__init__.py").write_text("")
    (proj / "pkg" / "util.py").write_text("GREETING = 'hello from a package'\n")
    (proj / "main.py").write_text("import sys\nfrom pkg.util import GREETING\nprint(GREETING, sys.argv[1:])\n")
    mounted = tmp_path / "payload"
    mounted.mkdir()
    packed = pack(directory_payload(proj))
    for key, text in packed.data.items():
        (mounted / key).write_text(text)
    c = job(RunMode.PARALLEL, [Group(name="g", instance_type="cpu", count=1)], Entrypoint(path="main.py", args=["--x", "1"]),
            target=1, minimum=1)
    runner = Instances(tmp_path, c, tmp_path / "ray")
    runner.start(0)
    assert runner.wait(0, 60) == 0, runner.log(0)
    assert "hello from a package ['--x', '1']" in runner.log(0)
    assert (tmp_path / "opt-ml-0" / "code" / "pkg" / "util.py").is_file()
