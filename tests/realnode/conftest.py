"""The real-node tier (marker `realnode`, `make test-realnode`): a cluster of its own whose nodes are upstream
kubelets on containerd (`kubepool local up --real-nodes 2`), pods in containers of the images `make images`
built. Skipped, saying so, only when those images are not built; everything else that is missing (root, a
kernel feature, a package) fails with the reason.

State in `.kubepool-realnode/` at the repo root, slot 4 ($KUBEPOOL_REALNODE_STATE_DIR, $KUBEPOOL_REALNODE_SLOT
choose others); `down` at the end when this session started the cluster.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kubepool.local import processes
from kubepool.local.layout import REPO_ROOT, Layout
from kubepool.local.realnode import images
from kubetest import Cluster, Kubectl

STATE_DIR = Path(os.environ.get("KUBEPOOL_REALNODE_STATE_DIR") or REPO_ROOT / ".kubepool-realnode").resolve()
SLOT = int(os.environ.get("KUBEPOOL_REALNODE_SLOT") or 4)
NODES = 2
# runtime-marked: a second runtime image, for the pool-image test (test_pool_image_and_toolkit.py).
IMAGES = ("operator", "runtime-lean", "runtime-marked")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.realnode)


def _say(config: pytest.Config) -> Callable[[str], None]:
    tr = config.pluginmanager.getplugin("terminalreporter")
    capman = config.pluginmanager.getplugin("capturemanager")

    def say(line: str) -> None:
        if tr is None or capman is None:
            print(line, file=sys.stderr)
            return
        with capman.global_and_fixture_disabled():
            tr.write_line(f"[realnode] {line}")

    return say


def _cli(args: list[str], say: Callable[[str], None]) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "kubepool.local.cli", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        lines.append(line.rstrip())
        say(line.rstrip())
    if proc.wait() != 0:
        pytest.fail(f"kubepool local {' '.join(args)} failed:\n" + "\n".join(lines[-40:]), pytrace=False)


@pytest.fixture(scope="session")
def real_cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    missing = [name for name in IMAGES if images.built_image(name) is None]
    if missing:
        pytest.skip(f"images not built: {', '.join(missing)} (hack/images/build.sh operator runtime-lean runtime-marked)")
    say = _say(request.config)
    before = Layout.load(STATE_DIR)
    was_running = before is not None and processes.alive(before, "kube-apiserver")
    try:
        _cli(["up", "--state-dir", str(STATE_DIR), "--slot", str(SLOT), "--real-nodes", str(NODES),
              "--real-node-images", ",".join(IMAGES)], say)
    except BaseException:
        if not was_running:  # what a failed `up` started (bridge, iptables, containerd stores) goes too
            _cli(["down", "--state-dir", str(STATE_DIR)], say)
        raise
    layout = Layout.load(STATE_DIR)
    assert layout is not None
    try:
        yield Cluster(layout, Kubectl(layout.bin("kubectl"), layout.kubeconfig), started_here=not was_running)
    finally:
        if not was_running:
            _cli(["down", "--state-dir", str(STATE_DIR)], say)


@pytest.fixture(scope="session")
def rkubectl(real_cluster: Cluster) -> Kubectl:
    return real_cluster.kubectl
