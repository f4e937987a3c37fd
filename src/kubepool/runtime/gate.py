"""The instance gate: the head holds the payload until enough instances have joined the Ray cluster.

Snowflake's `wait_for_instances` rule: go as soon as `target` nodes are alive, or `min` nodes once the min
wait has passed; otherwise fail at the timeout. The clock starts when the launcher starts waiting (after pip
install, data download and Ray start), as Snowflake's launcher's does, and the job's env tunes it as there
(`spec_from_env`: MLRS_INSTANCES_TIMEOUT, MLRS_INSTANCES_MIN_WAIT, MLRS_INSTANCES_CHECK_INTERVAL). `decide` is
the pure rule, `wait_for_instances` the loop (clock, sleep and node counter injected so tests run on a fake clock).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from kubepool.contract import effective_min_wait

# Snowflake's launcher's knobs (its constants.py names), read from the job's env.
ENV_TIMEOUT = "MLRS_INSTANCES_TIMEOUT"
ENV_MIN_WAIT = "MLRS_INSTANCES_MIN_WAIT"
ENV_CHECK_INTERVAL = "MLRS_INSTANCES_CHECK_INTERVAL"
DEFAULT_CHECK_INTERVAL = 10.0

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
    timeout: float  # seconds this gate may wait, from its start
    budget: str = "the instances timeout"  # how the timeout is named in a failure
    check_interval: float = DEFAULT_CHECK_INTERVAL


def _seconds(env: Mapping[str, str], name: str, default: float) -> float:
    """Snowflake's `float(os.getenv(NAME) or default)`, with a message naming the variable."""
    raw = env.get(name) or ""
    try:
        return float(raw) if raw else default
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not a number of seconds") from None


def spec_from_env(target: int, minimum: int, timeout: float, min_wait: float, env: Mapping[str, str]) -> GateSpec:
    """The gate as Snowflake's launcher sets it up: the job's env wins over the spec's `timeout`
    (instancesTimeoutSeconds) and `min_wait` (-1: min(3*log2(target), timeout/10)).

    Raises:
        ValueError: A knob that is not a number, or a negative timeout or check interval (the launcher's checks).
    """
    from_env = bool(env.get(ENV_TIMEOUT))
    timeout = _seconds(env, ENV_TIMEOUT, timeout)
    min_wait = _seconds(env, ENV_MIN_WAIT, min_wait)
    interval = _seconds(env, ENV_CHECK_INTERVAL, DEFAULT_CHECK_INTERVAL)
    if timeout < 0:
        raise ValueError("Timeout must be greater than 0")
    if interval < 0:
        raise ValueError("Check interval must be greater than 0")
    budget = f"{ENV_TIMEOUT}={timeout:g}" if from_env else f"instancesTimeoutSeconds={timeout:g}"
    return GateSpec(target=target, minimum=minimum, min_wait=effective_min_wait(min_wait, target, timeout),
                    timeout=timeout, budget=budget, check_interval=interval)


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
            f"Timed out waiting for {spec.minimum} instances, only {alive} available ({spec.budget} since the "
            "launcher started waiting)",
        )
    return Decision(Verdict.WAIT, f"Waiting for instances: {alive}/{spec.target} available (min {spec.minimum}), {elapsed:.0f}s elapsed")


def wait_for_instances(
    spec: GateSpec,
    count_alive: Callable[[], int],
    *,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
    log: Callable[[str], None],
) -> int:
    """Block until the gate opens; returns the number of alive instances or raises InstancesTimeoutError.
    Polls every POLL_SECONDS (or the check interval, Snowflake's knob, if smaller): no back-off, which saw a
    worker that joined just after a check up to 4 s late."""
    start = clock()
    interval = max(0.05, min(POLL_SECONDS, spec.check_interval))
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
