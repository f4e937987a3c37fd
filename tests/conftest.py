"""Shared fixtures: the local Kubernetes cluster (`cluster`), `kubectl`, and a fresh `namespace` per test.

`cluster` runs `kubepool local up` on `.kubepool/` (or $KUBEPOOL_STATE_DIR, see kubepool.local.cli), which
reuses a healthy cluster; progress goes to the terminal even without `-s`. It waits for the local nodes when the
node agent exists, and runs `down` at the end only if it started the cluster and no other test session still
uses it (each session holds a shared lock on `<state>/.sessions`). `KUBECONFIG` points at the cluster for the
whole session. Every test that uses `cluster` (directly or through `kubectl`/`namespace`) gets the `cluster`
marker automatically, so `-m "not cluster"` selects the tests that need no cluster.
"""

from __future__ import annotations

import fcntl
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator

import pytest

from kubepool.local import controlplane
from kubepool.local.controlplane import Layout
from kubetest import Cluster, Kubectl

NODE_READY_TIMEOUT_S = 180.0


def _reporter(config: pytest.Config) -> Callable[[str], None]:
    """Write a line to the terminal even while output is captured."""
    tr = config.pluginmanager.getplugin("terminalreporter")
    capman = config.pluginmanager.getplugin("capturemanager")

    def say(line: str) -> None:
        if tr is None:
            print(line, file=sys.stderr)
            return
        if capman is not None:
            with capman.global_and_fixture_disabled():
                tr.write_line(f"[cluster] {line}")
        else:
            tr.write_line(f"[cluster] {line}")

    return say


def _run_cli(args: list[str], say: Callable[[str], None]) -> None:
    # A separate process: the components must outlive this one's captured stdio and never be its children.
    proc = subprocess.Popen(
        [sys.executable, "-m", "kubepool.local.cli", *args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        lines.append(line.rstrip())
        say(line.rstrip())
    if proc.wait() != 0:
        pytest.fail(f"kubepool local {' '.join(args)} failed:\n" + "\n".join(lines[-40:]), pytrace=False)


def _wait_nodes_ready(cluster: Cluster, names: list[str], say: Callable[[str], None]) -> None:
    say(f"waiting for local nodes to be Ready: {', '.join(names)}")
    deadline = time.monotonic() + NODE_READY_TIMEOUT_S
    not_ready = set(names)
    while time.monotonic() < deadline:
        ready = {n for n, ok in controlplane.node_readiness(cluster.layout).items() if ok}
        not_ready = set(names) - ready
        if not not_ready:
            return
        time.sleep(1)
    tails = "\n".join(f"--- agent-{n}:\n{controlplane.log_tail(cluster.layout, f'agent-{n}')}" for n in sorted(not_ready))
    pytest.fail(f"local nodes not Ready after {NODE_READY_TIMEOUT_S:.0f}s: {sorted(not_ready)}\n{tails}", pytrace=False)


@pytest.fixture(scope="session")
def cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    say = _reporter(request.config)
    state_dir = controlplane.default_state_dir()
    before = Layout.load(state_dir)
    was_running = before is not None and any(controlplane.alive(before, c) for c in controlplane.CONTROL_PLANE)
    # `up` is idempotent: on a healthy cluster it only checks health and starts what is missing (e.g. agents).
    _run_cli(["up"], say)
    layout = Layout.load(state_dir)
    assert layout is not None, f"no cluster.json in {state_dir} after `up`"
    sessions = (state_dir / ".sessions").open("a")
    fcntl.flock(sessions, fcntl.LOCK_SH)
    c = Cluster(layout, Kubectl(layout.bin("kubectl"), layout.kubeconfig), started_here=not was_running)
    old_kubeconfig = os.environ.get("KUBECONFIG")
    os.environ["KUBECONFIG"] = str(layout.kubeconfig)
    try:
        nodes = controlplane.load_node_names(layout.nodes_yaml)
        if nodes and controlplane.agent_available():
            _wait_nodes_ready(c, nodes, say)
        yield c
    finally:
        if old_kubeconfig is None:
            os.environ.pop("KUBECONFIG", None)
        else:
            os.environ["KUBECONFIG"] = old_kubeconfig
        try:
            fcntl.flock(sessions, fcntl.LOCK_EX | fcntl.LOCK_NB)
            last = True
        except BlockingIOError:
            last = False
        sessions.close()
        if c.started_here and last:
            _run_cli(["down"], say)
        elif c.started_here:
            say("another test session still uses the cluster: leaving it running")


@pytest.fixture(scope="session")
def kubectl(cluster: Cluster) -> Kubectl:
    return cluster.kubectl


@pytest.fixture
def namespace(request: pytest.FixtureRequest, kubectl: Kubectl) -> Iterator[str]:
    """A fresh namespace (with its `default` ServiceAccount ready), deleted after the test."""
    stem = re.sub(r"[^a-z0-9-]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    with kubectl.fresh_namespace(f"t-{stem}-{uuid.uuid4().hex[:6]}") as name:
        yield name


def pytest_collection_finish(session: pytest.Session) -> None:
    """Build the cluster's binaries before the first test: a cold build outlasts one test's timeout."""
    if any(item.get_closest_marker("cluster") for item in session.items):
        controlplane.ensure_binaries(_reporter(session.config))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.cluster)
