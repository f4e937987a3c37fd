"""The instance gate: Snowflake's wait_for_instances rule, on a fake clock."""

from __future__ import annotations

import pytest

from kubepool.runtime.gate import GateSpec, InstancesTimeoutError, Verdict, decide, wait_for_instances

SPEC = GateSpec(target=3, minimum=2, min_wait=5.0, timeout=60.0)


@pytest.mark.parametrize(
    "alive,elapsed,verdict",
    [(3, 0, Verdict.GO), (2, 1, Verdict.WAIT), (2, 5, Verdict.GO), (1, 30, Verdict.WAIT), (1, 60, Verdict.TIMEOUT), (3, 61, Verdict.GO)],
)
def test_decide(alive: int, elapsed: float, verdict: Verdict) -> None:
    assert decide(SPEC, alive, elapsed).verdict is verdict


def test_timeout_message_names_counts() -> None:
    assert decide(SPEC, 1, 60.0).message == "Timed out waiting for 2 instances, only 1 available (the instances timeout after the job was admitted)"


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

    got = wait_for_instances(spec, count, clock=clock, sleep=clock.sleep, log=lines.append, check_interval=10)
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


def test_the_gate_counts_from_admission() -> None:
    from kubepool.contract import Entrypoint, Group, build_contract

    c = build_contract(job_name="j", namespace="n", job_uid="u", groups=[Group(name="g", instance_type="cpu", count=2)],
                       target_instances=2, min_instances=2, instances_timeout_seconds=120, entrypoint=Entrypoint(path="m.py"))
    assert c.gate_timeout(1000.0) == 120  # admission unknown: the whole timeout
    admitted = c.model_copy(update={"admitted_at": 1000.0})
    assert admitted.gate_timeout(1030.0) == 90 and admitted.gate_timeout(1500.0) == 0
    assert '"admittedAt": 1000.0' in admitted.dumps()  # what the operator writes, the runtime reads
