"""Shared fixtures: the local Kubernetes cluster (`cluster`), `kubectl`, and a fresh `namespace` per test.

`cluster` runs `kubepool local up` for the tests' own cluster: state in `.kubepool-test/` at the repo root, slot 1
(its own ports and node addresses), so the tests never share a cluster, or an operator, with `make demo`'s
(`.kubepool/`, slot 0). $KUBEPOOL_TEST_STATE_DIR and $KUBEPOOL_TEST_SLOT choose another. `up` reuses a healthy
cluster and waits for its local nodes; progress goes to the terminal even without `-s`. `down` runs at the end
only if this session started the cluster and no other test session still uses it (each session holds a shared
lock on `<state>/.sessions`). `KUBECONFIG` points at the cluster for the
whole session. Every test that uses `cluster` (directly or through `kubectl`/`namespace`) gets the `cluster`
marker automatically, so `-m "not cluster"` selects the tests that need no cluster.
"""

from __future__ import annotations

import fcntl
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kubepool.local import components, controlplane, processes, registry
from kubepool.local.layout import REPO_ROOT, Layout
from kubetest import Cluster, Kubectl, cluster_turn
from support import private_nodes
from support.file_order import file_of, file_order, load_weights

# The fixtures shared across suites, registered once for every test (a conftest that defines one of the same name
# overrides it for its folder).
pytest_plugins = ["support.operator_fixtures", "support.kuberay_fixtures"]

TEST_STATE_DIR = Path(os.environ.get("KUBEPOOL_TEST_STATE_DIR") or REPO_ROOT / ".kubepool-test").resolve()
TEST_SLOT = int(os.environ.get("KUBEPOOL_TEST_SLOT") or 1)


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


WAS_RUNNING = "kubepool_cluster_was_running"
_WAS_RUNNING_KEY = pytest.StashKey[bool]()


def _cluster_running() -> bool:
    before = Layout.load(TEST_STATE_DIR)
    return before is not None and any(processes.alive(before, c) for c in components.CONTROL_PLANE)


def pytest_configure(config: pytest.Config) -> None:
    # Whether the test cluster ran before this run, told once by the run's first process: an xdist worker whose
    # first cluster test comes after the other worker started the cluster would take it for one found running,
    # and then neither worker would stop it at the end.
    if not hasattr(config, "workerinput"):
        config.stash[_WAS_RUNNING_KEY] = _cluster_running()


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:  # xdist: what each worker is told at its start
    node.workerinput[WAS_RUNNING] = node.config.stash[_WAS_RUNNING_KEY]


@pytest.fixture(scope="session")
def cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    say = _reporter(request.config)
    state_dir = TEST_STATE_DIR
    told = getattr(request.config, "workerinput", {}).get(WAS_RUNNING)
    was_running = bool(told) if told is not None else request.config.stash.get(_WAS_RUNNING_KEY, _cluster_running())
    # `up` is idempotent: on a healthy cluster it only checks health and starts what is missing (e.g. agents),
    # and it returns once the local nodes are Ready (or fails saying which are not, and why). The default nodes
    # and those a test file has to itself (support.private_nodes).
    nodes = private_nodes.nodes_config(TEST_SLOT, tmp_path_factory.mktemp("nodes"))
    _run_cli(["up", "--state-dir", str(state_dir), "--slot", str(TEST_SLOT), "--nodes-config", str(nodes)], say)
    layout = Layout.load(state_dir)
    assert layout is not None, f"no cluster.json in {state_dir} after `up`"
    sessions = (state_dir / ".sessions").open("a")
    fcntl.flock(sessions, fcntl.LOCK_SH)
    c = Cluster(layout, Kubectl(layout.bin("kubectl"), layout.kubeconfig), started_here=not was_running)
    # Everything the tests start (CLI, SDK, `kubepool local`) finds this cluster, never the user's default one.
    saved = {k: os.environ.get(k) for k in ("KUBECONFIG", "KUBEPOOL_STATE_DIR")}
    os.environ.update(KUBECONFIG=str(layout.kubeconfig), KUBEPOOL_STATE_DIR=str(state_dir))
    try:
        yield c
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        try:
            fcntl.flock(sessions, fcntl.LOCK_EX | fcntl.LOCK_NB)
            last = True
        except BlockingIOError:
            last = False
        sessions.close()
        if c.started_here and last:
            _run_cli(["down", "--state-dir", str(state_dir)], say)
        elif c.started_here:
            say("another test session still uses the cluster: leaving it running")


@pytest.fixture(scope="module")
def local_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[registry.LocalRegistry]:
    """The CNCF distribution registry on loopback with TLS from a CA of its own (kubepool.local.registry): what
    `make release` pushes to and the chart is installed from (tests/release, tests/realnode)."""
    reg = registry.start(tmp_path_factory.mktemp("registry"), say=lambda _: None)
    try:
        yield reg
    finally:
        reg.stop()


@pytest.fixture(scope="session")
def kubectl(cluster: Cluster) -> Kubectl:
    return cluster.kubectl


@pytest.fixture(autouse=True)
def _cluster_turn(request: pytest.FixtureRequest) -> Iterator[None]:
    """Cluster tests run side by side on the one test cluster (`pytest -n`, several sessions), each in its own
    namespace; a test marked `exclusive` disturbs the cluster for everyone (restarts its parts, floods it), so it
    runs alone (kubetest.cluster_turn). Taken before the test's function fixtures are set up, given back after
    they are torn down."""
    if "cluster" not in request.fixturenames or _module_exclusive(request):
        yield  # a module marked exclusive as a whole holds its turn already (_module_turn)
        return
    exclusive = request.node.get_closest_marker("exclusive") is not None
    with cluster_turn(request.getfixturevalue("cluster").state_dir, exclusive):
        yield


def _module_exclusive(request: pytest.FixtureRequest) -> bool:
    marks = getattr(request.module, "pytestmark", [])
    return any(m.name == "exclusive" for m in (marks if isinstance(marks, list) else [marks]))


@pytest.fixture(scope="module", autouse=True)
def _module_turn(request: pytest.FixtureRequest) -> Iterator[None]:
    """A module marked exclusive as a whole (`pytestmark`) holds one turn for all its tests and its module
    fixtures: what those make cluster-wide (a ComputePool with warm capacity, whose placeholders every
    namespace's operator would create in its own namespace) must not meet other tests."""
    if not _module_exclusive(request):
        yield
        return
    with cluster_turn(request.getfixturevalue("cluster").state_dir, exclusive=True):
        yield


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
    # `pytest -n N --dist loadfile` (make test) keeps a file's tests on one worker, one at a time: its module
    # fixtures set up once, its fixed addresses used once at a time. (Not loadgroup: pytest-xdist 3.8 marks a group
    # by rewriting `item._nodeid`, which pytest 9 no longer reads, so its groups silently do nothing.)
    for item in items:
        if "cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.cluster)
    # An xdist worker's collection is the order its controller hands out files in (hack/test.sh passes
    # --no-loadscope-reorder, else xdist sorts them by their number of tests): the longest first, and beside each
    # file with an exclusive test, files without cluster tests for the other worker (support.file_order).
    if hasattr(config, "workerinput"):
        exclusive = {file_of(i.nodeid) for i in items if i.get_closest_marker("exclusive")}
        cluster = {file_of(i.nodeid) for i in items if i.get_closest_marker("cluster")}
        free = {file_of(i.nodeid) for i in items} - cluster
        items[:] = [items[i] for i in file_order([i.nodeid for i in items], load_weights(), exclusive, free)]
