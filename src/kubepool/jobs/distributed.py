"""The result of a distributed job (parallel or sagemaker mode: every instance runs the payload), Snowflake's
`MLJob.distributed_result()`: per-instance exit codes reduced over the target instances, instance 0's return
value on success, and on failure a `DistributedJobError` carrying the same summary."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class DistributedResult:
    """Aggregated result of a job whose every instance ran the payload (Snowflake's `DistributedResult`).

    Args:
        success: Every declared instance exited 0.
        exit_codes: instance id → exit code; None: the instance never ran or was lost before it ended.
        failed_instance: The lowest failing instance id; None on success.
        return_value: Instance 0's return value on success (an @remote function's), else None.
    """

    success: bool
    exit_codes: dict[int, int | None]
    failed_instance: int | None = None
    return_value: Any = None


class DistributedJobError(RuntimeError):
    """Raised by `MLJob.distributed_result()` when an instance did not exit 0; `.result` is the summary and the
    failing instance's remote exception is the cause."""

    def __init__(self, message: str, result: DistributedResult | None = None) -> None:
        super().__init__(message)
        self.result = result

    @classmethod
    def from_result(cls, result: DistributedResult) -> DistributedJobError:
        ok = sum(1 for code in result.exit_codes.values() if code == 0)
        return cls(f"Distributed job failed: {len(result.exit_codes) - ok}/{len(result.exit_codes)} instances did not "
                   f"exit 0 (earliest failed instance: {result.failed_instance}); see .result.exit_codes for details.",
                   result=result)


def reduce(target_instances: int, exit_codes: Mapping[int, int | None]) -> DistributedResult:
    """The summary over instances 0..target-1 (pure); the caller adds instance 0's return value."""
    codes = {i: exit_codes.get(i) for i in range(target_instances)}
    failed = next((i for i, code in codes.items() if code != 0), None)
    return DistributedResult(success=failed is None, exit_codes=codes, failed_instance=failed)
