"""Everything of kubepool that depends on Ray's behaviour beyond its documented API, in one place (Ray is pinned,
`ray[default]==2.60.0` in pyproject.toml and the runtime image; tests/runtime/test_runtime_ray_fence.py checks
each patch against the installed Ray, so an upgrade that moves them fails a test instead of a job):

- `fast_head_lookup`: a worker's `ray start` asks the GCS for the head node (its temp dir) and, until the head's
  raylet has registered, sleeps 2 s between asks (`ray._private.utils.get_all_node_info_until_retrieved`).
  A worker starts as soon as the head's GCS answers, seconds before that raylet registers, so each worker lost
  up to 2 s on a job's critical path. Here the same question is asked every `HEAD_POLL_SECONDS`, for the same
  total time.

`python -m kubepool.runtime.ray_fence ARGS` is `ray ARGS` with the patches in: every `ray start` of the runtime
runs through it (ray_node.ray_command; the head's never reaches the patched lookup). Nothing of Ray is imported
by importing this module.

Not a patch, but here because this is where Ray is imported: a *held* start (`ENV_HELD` set) imports Ray, then
waits for the word `GO` on its stdin before it starts. A worker's supervisor starts it held while the head's GCS
is not up yet, so Ray's import (most of a second, more on a busy node) is done by the time the head answers
(ray_node.start_node). Its stdin closed without the word (the supervisor gone), it exits without starting.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

RAY_VERSION = "2.60.0"  # the Ray these patches were written against (pyproject.toml, the runtime image)
HEAD_POLL_SECONDS = 0.1
RAY_RETRY_SECONDS = 2.0  # Ray's own pause between asks, which sets the total time asked for
ENV_HELD = "KUBEPOOL_RAY_HELD"
GO = "go"


def fast_head_lookup(original: Callable[..., Any], sleep: Callable[[float], None] = time.sleep) -> Callable[..., Any]:
    """`get_all_node_info_until_retrieved` asking every HEAD_POLL_SECONDS; once Ray's own time is up, Ray's own
    function makes the last ask and raises its own error."""

    def lookup(gcs_client: Any, node_selectors: Any = None, state_filter: Any = None, num_retries: int = 20,
               timeout_per_retry: float | None = None) -> Any:  # fmt: skip
        deadline = time.monotonic() + num_retries * RAY_RETRY_SECONDS
        while time.monotonic() < deadline:
            try:
                infos = gcs_client.get_all_node_info(
                    timeout=timeout_per_retry, node_selectors=node_selectors, state_filter=state_filter
                ).values()
            except Exception:  # Ray's function retries on any error too
                infos = []
            if infos:
                return infos
            sleep(HEAD_POLL_SECONDS)
        return original(gcs_client, node_selectors, state_filter, 1, timeout_per_retry)

    return lookup


def install() -> None:
    """Patch the Ray in this process; a Ray other than RAY_VERSION is left as it is."""
    import ray
    import ray._private.node as ray_node

    if ray.__version__ != RAY_VERSION:
        return
    ray_node.get_all_node_info_until_retrieved = fast_head_lookup(ray_node.get_all_node_info_until_retrieved)


def main(argv: Sequence[str]) -> int:
    from ray.scripts.scripts import main as ray_main  # the `ray` console script's entry point

    install()
    if os.environ.pop(ENV_HELD, "") and sys.stdin.readline().strip() != GO:
        return 0  # let go of without the word: its supervisor is gone or gave up; nothing was started
    sys.argv = ["ray", *argv]
    return int(ray_main() or 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
