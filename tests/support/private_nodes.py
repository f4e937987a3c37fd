"""Local nodes of the test cluster that one test file has to itself. Each is tainted and labelled apart, so no
other test's pod lands there, and its file may kill, stop or delete it without disturbing the rest of the suite:
those tests need no exclusive turn of the cluster (kubetest.cluster_turn). The test cluster's node config is the
default one plus these (`nodes_config`, used by tests/conftest.py's `cluster`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from kubepool.local.layout import Layout
from kubepool.local.nodeconfig import DEFAULT_NODES_CONFIG, slot_nodes_config

TAINT_KEY = "kubepool.dev/test-node"
POOL_LABEL = "kubepool.dev/node-pool"
# group → its nodes: tests/local_nodes (an agent restarted, stopped, its Node deleted), tests/faults/test_faults_node.py
# (a job's head and worker, the worker's agent killed)
GROUPS = {"local-nodes": ["local-test-node"], "node-faults": ["fault-node-1", "fault-node-2"]}
CAPACITY = {"cpu": "4", "memory": "16Gi", "pods": "110"}


def _entries() -> list[dict[str, Any]]:
    """Addresses beside the default nodes' (127.0.1.x, 127.0.2.x; pods 127.101–112/16), which `slot_nodes_config`
    moves with the slot as it moves theirs."""
    out = []
    for n, (group, node) in enumerate((g, node) for g, nodes in GROUPS.items() for node in nodes):
        out.append({"name": node, "ip": f"127.0.3.{n + 1}", "podCIDR": f"127.{113 + n}.0.0/16",
                    "capacity": dict(CAPACITY), "labels": {POOL_LABEL: group},
                    "taints": [{"key": TAINT_KEY, "value": group, "effect": "NoSchedule"}]})
    return out


def nodes_config(slot: int, directory: Path) -> Path:
    """The test cluster's node config for `slot`, written into `directory`: the default nodes and the private ones."""
    base = yaml.safe_load(DEFAULT_NODES_CONFIG.read_text()) or {}
    base["nodes"] = [*base.get("nodes", []), *_entries()]
    directory.mkdir(parents=True, exist_ok=True)
    unmoved = directory / "test-nodes.base.yaml"
    unmoved.write_text(yaml.safe_dump(base, sort_keys=False))
    path = directory / "test-nodes.yaml"
    path.write_text(slot_nodes_config(slot, unmoved))
    return path


def selector(group: str) -> dict[str, str]:
    return {POOL_LABEL: group}


def toleration(group: str) -> dict[str, str]:
    return {"key": TAINT_KEY, "operator": "Equal", "value": group, "effect": "NoSchedule"}


# Started from a process of its own that exits at once: the agent is then no child of the test's process, which
# would keep it a zombie once stopped (its /proc entry never goes).
_START = """
import sys
from pathlib import Path
from kubepool.local import processes
from kubepool.local.flags import agent_args
from kubepool.local.layout import Layout
lay = Layout.load(Path(sys.argv[1]))
assert lay is not None, f"no cluster in {sys.argv[1]}"
node = sys.argv[2]
processes.ensure(lay, [processes.Component(f"agent-{node}", agent_args(lay, node), None, restart_on_change=False)],
                 print)
"""


def start_agent(layout: Layout, node: str) -> None:
    """Start this node's agent again (after a test stopped or killed it), and no other: `kubepool local up` would
    also restart the agent another test file killed on purpose."""
    proc = subprocess.run([sys.executable, "-c", _START, str(layout.state_dir), node], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, f"starting the agent of {node} failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}"
