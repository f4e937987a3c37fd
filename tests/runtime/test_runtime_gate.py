"""The instance gate: Snowflake's wait_for_instances rule, on a fake clock, against the launcher of the
snowflake-ml-python wheel run on the same clock, node counts and env."""

from __future__ import annotations

import pytest

from kubepool.runtime.gate import (
    GateSpec,
    InstancesTimeoutError,
    Verdict,
    decide,
    spec_from_env,
    wait_for_instances,
)
from support import snowflake_wheel

SPEC = GateSpec(target=3, minimum=2, min_wait=5.0, timeout=60.0)


@pytest.mark.parametrize(
    "alive,elapsed,verdict",
    [(3, 0, Verdict.GO), (2, 1, Verdict.WAIT), (2, 5, Verdict.GO), (1, 30, Verdict.WAIT), (1, 60, Verdict.TIMEOUT), (3, 61, Verdict.GO)],
)
def test_decide(alive: int, elapsed: float, verdict: Verdict) -> None:
    assert decide(SPEC, alive, elapsed).verdict is verdict


def test_timeout_message_names_counts() -> None:
    assert decide(SPEC, 1, 60.0).message == "Timed out waiting for 2 instances, only 1 available (the instances timeout since the launcher started waiting)"


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.sleeps.append(s)
        self.now += s


def run(spec: GateSpec, alive_at: list[tuple[float, int]]) -> tuple[int, FakeClock, list[str]]:
    clock, lines = FakeClock(), []
    start = clock.now

    def count() -> int:
        return max(n for t, n in alive_at if clock.now - start >= t)

    got = wait_for_instances(spec, count, clock=clock, sleep=clock.sleep, log=lines.append)
    return got, clock, lines


def test_goes_at_target_as_soon_as_it_is_reached() -> None:
    got, clock, lines = run(SPEC, [(0, 1), (3.5, 3)])
    assert got == 3 and clock.now - 100 < 8
    assert lines[-1].startswith("Target instance requirement met")
    assert clock.now - 100 == pytest.approx(3.5)  # seen at the first poll after it joined
    assert set(clock.sleeps) == {0.5}  # a fixed, short poll: no back-off


def test_goes_with_minimum_after_min_wait() -> None:
    got, clock, lines = run(SPEC, [(0, 2)])
    assert got == 2 and clock.now - 100 == pytest.approx(5.0)
    assert lines[-1].startswith("Minimum instance requirement met")


def test_times_out_with_counts() -> None:
    with pytest.raises(InstancesTimeoutError, match="waiting for 2 instances, only 1 available"):
        run(SPEC, [(0, 1)])


def test_single_instance_goes_at_once() -> None:
    got, clock, _ = run(GateSpec(target=1, minimum=1, min_wait=0, timeout=10), [(0, 1)])
    assert got == 1 and clock.sleeps == []


LAUNCHER = "snowflake/ml/jobs/_utils/scripts/mljob_launcher.py"
# (target, min, the job's env, when each count of alive nodes is reached)
SCENARIOS = [
    (5, 3, {"MLRS_INSTANCES_MIN_WAIT": "7", "MLRS_INSTANCES_TIMEOUT": "5"}, [(0, 3)]),
    (4, 2, {"MLRS_INSTANCES_MIN_WAIT": "10", "MLRS_INSTANCES_TIMEOUT": "60"}, [(0, 1), (3, 3)]),
    (4, 2, {}, [(0, 1), (2, 4)]),
    (4, 2, {}, [(0, 2)]),
    (3, 3, {"MLRS_INSTANCES_TIMEOUT": "20"}, [(0, 2)]),
    (2, 1, {"MLRS_INSTANCES_TIMEOUT": "10"}, [(0, 1)]),
    (1, 1, {"MLRS_INSTANCES_TIMEOUT": "1"}, [(0, 1)]),
    (3, 2, {"MLRS_INSTANCES_CHECK_INTERVAL": "0.5", "MLRS_INSTANCES_MIN_WAIT": "2"}, [(0, 2)]),
    (3, 2, {"MLRS_INSTANCES_CHECK_INTERVAL": "-1"}, [(0, 3)]),
    (3, 2, {"MLRS_INSTANCES_TIMEOUT": "-5"}, [(0, 3)]),
]


def _snowflake_gate(monkeypatch: pytest.MonkeyPatch, target: int, minimum: int, env: dict[str, str],
                    alive_at: list[tuple[float, int]]) -> tuple[str, int | None, float]:
    """(outcome, alive nodes, seconds waited) of the wheel's launcher as its main() calls wait_for_instances."""
    for name in ("MLRS_PAYLOAD_DIR", "MLRS_INSTANCES_MIN_WAIT", "MLRS_INSTANCES_TIMEOUT", "MLRS_INSTANCES_CHECK_INTERVAL"):
        monkeypatch.delenv(name, raising=False)
    for name, value in {**env, "MLRS_MIN_INSTANCES": str(minimum), "SNOWFLAKE_JOBS_COUNT": str(target)}.items():
        monkeypatch.setenv(name, value)
    try:
        sf = snowflake_wheel.load(LAUNCHER, monkeypatch, {"snowflake.ml.jobs._utils.constants": {}, "snowflake.snowpark": {}})
    except ValueError as e:
        return f"ValueError: {e}", None, 0.0
    clock = FakeClock()
    start = clock.now
    monkeypatch.setattr(sf, "time", type("T", (), {"time": staticmethod(clock), "sleep": staticmethod(clock.sleep)}))
    alive = [0]

    def count() -> int:
        alive[0] = max(n for t, n in alive_at if clock.now - start >= t)
        return alive[0]

    monkeypatch.setattr(sf, "get_num_ray_nodes", count)
    try:
        sf.wait_for_instances(sf.MIN_INSTANCES, sf.TARGET_INSTANCES, min_wait_time=sf.MIN_WAIT_TIME, timeout=sf.TIMEOUT,
                              check_interval=sf.CHECK_INTERVAL)
    except TimeoutError:
        return "timeout", None, clock.now - start
    except ValueError as e:
        return f"ValueError: {e}", None, 0.0
    return "go", alive[0] if target > 1 else None, clock.now - start


def _ours(target: int, minimum: int, env: dict[str, str], alive_at: list[tuple[float, int]]) -> tuple[str, int | None, float]:
    try:
        spec = spec_from_env(target, minimum, 720, -1, env)  # the spec's defaults: instancesTimeoutSeconds, minWaitSeconds
    except ValueError as e:
        return f"ValueError: {e}", None, 0.0
    try:
        got, clock, _ = run(spec, alive_at)
    except InstancesTimeoutError:
        return "timeout", None, 0.0
    return "go", got if target > 1 else None, clock.now - 100


@pytest.mark.parametrize("target,minimum,env,alive_at", SCENARIOS)
def test_the_gate_decides_as_snowflakes_launcher(monkeypatch: pytest.MonkeyPatch, target: int, minimum: int,
                                                 env: dict[str, str], alive_at: list[tuple[float, int]]) -> None:
    """Same outcome, count and knobs (MLRS_INSTANCES_TIMEOUT, _MIN_WAIT, _CHECK_INTERVAL; the min wait's default)
    as the wheel's launcher; never later than it (kubepool polls without its back-off). The first scenario is the
    one #38 names: the launcher times out there too (the minimum is met, the min wait is longer than the timeout)."""
    theirs = _snowflake_gate(monkeypatch, target, minimum, env, alive_at)
    ours = _ours(target, minimum, env, alive_at)
    assert ours[:2] == theirs[:2], f"kubepool {ours}, Snowflake's launcher {theirs}"
    if ours[0] == "go":
        assert ours[2] <= theirs[2]


def test_the_timeout_counts_from_the_gates_start_not_admission() -> None:
    """instancesTimeoutSeconds is the gate's own budget from when it starts: a job admitted long ago (a slow pip
    install, a big download) still gets all of it."""
    from kubepool.contract import Entrypoint, Group, JobContract

    c = JobContract(job_name="j", namespace="n", job_uid="u", groups=[Group(name="g", instance_type="cpu", count=2)],
                    target_instances=2, min_instances=2, instances_timeout_seconds=120, entrypoint=Entrypoint(path="m.py"))
    admitted_long_ago = c.model_copy(update={"admitted_at": 1000.0})
    spec = spec_from_env(admitted_long_ago.target_instances, admitted_long_ago.min_instances,
                         admitted_long_ago.instances_timeout_seconds, admitted_long_ago.min_wait_seconds, {})
    assert spec.timeout == 120
    with pytest.raises(InstancesTimeoutError, match="instancesTimeoutSeconds=120 since the launcher started"):
        run(spec, [(0, 1)])
    assert spec_from_env(2, 2, 120, -1, {"MLRS_INSTANCES_TIMEOUT": "30"}).timeout == 30


def test_launcher_builds_its_gate_from_the_jobs_env(monkeypatch: pytest.MonkeyPatch) -> None:
    from kubepool.contract import Entrypoint, Group, JobContract
    from kubepool.runtime import gate, launcher

    c = JobContract(job_name="j", namespace="n", job_uid="u", groups=[Group(name="g", instance_type="cpu", count=3)],
                    target_instances=3, min_instances=2, instances_timeout_seconds=120, entrypoint=Entrypoint(path="m.py"))
    seen: list[GateSpec] = []

    class FakeRay:
        @staticmethod
        def init(**_: object) -> None: ...

        @staticmethod
        def shutdown() -> None: ...

    monkeypatch.setitem(__import__("sys").modules, "ray", FakeRay)
    monkeypatch.setattr(gate, "wait_for_instances", lambda spec, *a, **k: seen.append(spec) or 3)
    launcher.gate_instances(c, {"RAY_ADDRESS": "x:1", "MLRS_INSTANCES_TIMEOUT": "33", "MLRS_INSTANCES_MIN_WAIT": "4",
                                "MLRS_INSTANCES_CHECK_INTERVAL": "2"})
    assert (seen[0].timeout, seen[0].min_wait, seen[0].check_interval) == (33, 4, 2)
