"""A second, throwaway local cluster (own state dir, free ports, no local nodes): for tests that kill or stop
control-plane processes, or need a control plane without what the shared cluster has installed (KubeRay's
CRDs). `up` in a fresh state dir takes seconds; `down` always runs, also after a failed `up`."""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from kubepool.local.layout import Ports


def free_port_offset() -> int:
    """A port offset whose ports are all free; random, so concurrent test sessions rarely pick the same one."""
    offsets = list(range(1000, 9000, 100))
    random.shuffle(offsets)
    for off in offsets:
        if Ports().shifted(off).free():
            return off
    raise RuntimeError("no free port range for a second cluster")


def local(*args: str) -> subprocess.CompletedProcess[str]:
    # The session's KUBEPOOL_* defaults (state dir, ports, nodes) must not leak into the spare cluster.
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBEPOOL_")}
    proc = subprocess.run(
        [sys.executable, "-m", "kubepool.local.cli", *args],
        capture_output=True, text=True, timeout=180, env=env,
    )
    print(proc.stdout, proc.stderr)
    return proc


@contextmanager
def spare_cluster(root: Path) -> Iterator[Path]:
    """Yields the spare cluster's state dir (its kubeconfig is `<state>/kubeconfig`)."""
    nodes = root / "nodes.yaml"
    nodes.write_text("nodes: []\n")
    state = root / "state"
    try:
        up = local("up", "--state-dir", str(state), "--nodes-config", str(nodes), "--port-offset", str(free_port_offset()))
        assert up.returncode == 0, up.stderr
        m = re.search(r"ready in ([\d.]+)s", up.stdout)
        assert m, up.stdout
        print(f"fresh up took {m.group(1)}s")
        assert f"export KUBECONFIG={state / 'kubeconfig'}" in up.stdout
        yield state
    finally:  # also after a failed `up`: never leave half a cluster running
        local("down", "--state-dir", str(state))
