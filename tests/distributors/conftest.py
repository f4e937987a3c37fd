"""The loopback Ray cluster of the distributor tests: 3 nodes on 127.0.6.2-4 (this suite's own range)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kubepool.distributors.loopback import LoopbackRayCluster

NODE_IPS = ("127.0.6.2", "127.0.6.3", "127.0.6.4")


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[LoopbackRayCluster]:
    """One 3-node cluster per test module (each startup costs seconds on 2 cores); this process is its driver."""
    with LoopbackRayCluster(NODE_IPS, num_cpus=2) as cluster:
        yield cluster
