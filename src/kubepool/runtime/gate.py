"""The instance gate: the head holds the payload until enough instances have joined the Ray cluster.

Snowflake's `wait_for_instances` rule: go as soon as `target` nodes are alive, or `min` nodes once the min
wait has passed; otherwise fail at the timeout. `decide` is the pure rule, `wait_for_instances` the loop
(clock, sleep and node counter injected so tests run on a fake clock).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

POLL_SECONDS = 0.5  # a check is one `ray.nodes()` on the head: cheap, and a joined worker is seen at once


class Verdict(StrEnum):
    GO = "go"
    WAIT = "wait"
    TIMEOUT = "timeout"


@dataclass(frozen=True)
class GateSpec:
    target: int
    minimum: int
    min_wait: float
    timeout: float  # seconds this gate may wait (what is left of the instances timeout)
    budget: str = "the instances timeout"  # how the timeout is named in a failure


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    message: str


class InstancesTimeoutError(TimeoutError):
    """Not enough instances joined in time; the message names the joined and required counts."""


def decide(spec: GateSpec, alive: int, elapsed: float) -> Decision:
    if alive >= spec.target:
        return Decision(Verdict.GO, f"Target instance requirement met: {alive}/{spec.target} instances available")
    if alive >= spec.minimum and elapsed >= spec.min_wait:
        return Decision(
            Verdict.GO,
            f"Minimum instance requirement met: {alive} instances available (min {spec.minimum}, target {spec.target})",
        )
    if elapsed >= spec.timeout:
        return Decision(
            Verdict.TIMEOUT,
            f"Timed out waiting for {spec.minimum} instances, only {alive} available ({spec.budget} after the job "
            "was admitted)",
        )
    return Decision(Verdict.WAIT, f"Waiting for instances: {alive}/{spec.target} available (min {spec.minimum}), {elapsed:.0f}s elapsed")


def wait_for_instances(
    spec: GateSpec,
    count_alive: Callable[[], int],
    *,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
    log: Callable[[str], None],
    check_interval: float = 10.0,
) -> int:
    """Block until the gate opens; returns the number of alive instances or raises InstancesTimeoutError.
    Polls every POLL_SECONDS (or check_interval, Snowflake's knob, if smaller): no back-off, which saw a worker
    that joined just after a check up to 4 s late."""
    start = clock()
    interval = min(POLL_SECONDS, check_interval)
    last_alive = -1
    while True:
        alive = count_alive()
        d = decide(spec, alive, clock() - start)
        if d.verdict is Verdict.GO:
            log(d.message)
            return alive
        if d.verdict is Verdict.TIMEOUT:
            raise InstancesTimeoutError(d.message)
        if alive != last_alive:  # progress when the count changes, not on every tick
            log(d.message)
            last_alive = alive
        # Never sleep past the timeout or past the end of the min wait.
        elapsed = clock() - start
        horizon = [spec.timeout - elapsed] + ([spec.min_wait - elapsed] if spec.min_wait > elapsed else [])
        sleep(max(0.05, min(interval, *horizon)))
