"""Name resolution for peers: the head's and other instances' stable DNS names, retried because a headless
Service's records can lag pod creation by tens of seconds (ray-runtime.md 5.3)."""

from __future__ import annotations

import socket
import time
from collections.abc import Mapping

from kubepool.contract import ENV_POD_IP


def resolve(name: str, deadline: float, interval: float = 0.2) -> str:
    """IPv4 address of `name` (an IP resolves to itself); raises OSError once `deadline` (monotonic) passes.
    Polled often: a worker resolving the head waits here on the job's critical path (a look is a file read)."""
    while True:
        try:
            return socket.gethostbyname(name)
        except OSError as e:
            if time.monotonic() >= deadline:
                raise OSError(f"cannot resolve {name}: {e}") from e
            time.sleep(interval)


def pod_ip(env: Mapping[str, str]) -> str:
    """The downward API's status.podIP; outside Kubernetes, the address of this host's name."""
    return env.get(ENV_POD_IP) or socket.gethostbyname(socket.gethostname())
