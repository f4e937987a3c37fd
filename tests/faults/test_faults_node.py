"""Node loss: SIGKILL a node agent (the local kubelet). Once the node's lease lapses Kubernetes marks it
NotReady; the operator's instances tolerate that for node_lost_seconds, are evicted, and each job gets its
verdict: the job whose worker was there FAILS InstancesLost within 30 s of NotReady.
`kubepool local up` restarts the agent afterwards. Slow: the node-monitor grace period alone is ~50 s."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from faultkit import (
    job,
    kill_component,
    local_up,
    node_ready,
    orphans,
    pod_running,
    record,
    sleep_cmd,
    wait_terminal,
)

from kubepool import naming
from support.operator_cluster import Operator, wait_for

VERDICT_S = 30.0
NODE_LOST_SECONDS = 5


@pytest.mark.slow
def test_node_agent_killed(cluster: Any, kubectl: Any, crds: None, namespace: str, tmp_path: Path, small_pool: Any,
                           recorder: Any, operator_kubeconfig: Path) -> None:
    os.environ["KUBEPOOL_OPERATOR_NODE_LOST_SECONDS"] = str(NODE_LOST_SECONDS)
    operator = Operator(operator_kubeconfig, namespace, tmp_path / "operator.log")
    try:
        operator.start()
    finally:
        os.environ.pop("KUBEPOOL_OPERATOR_NODE_LOST_SECONDS", None)
    node = ""
    try:
        below = small_pool(max_nodes=3)
        kubectl("apply", "-n", namespace, "-f", "-", check=True,
                input=yaml.safe_dump(job("node-below", below, sleep_cmd(300), targetInstances=2)))
        pods = pod_running(kubectl, namespace, "node-below", n=2)
        worker = next(p for p in pods if p["metadata"]["labels"][naming.LABEL_JOB] == "node-below"
                      and p["metadata"]["labels"][naming.LABEL_ROLE] == "worker")
        node = worker["spec"]["nodeName"]
        expect = {"node-below": ("FAILED", "InstancesLost")}
        pid_file = cluster.state_dir / "pids" / f"agent-{node}.pid"
        before = pid_file.read_text()
        kill_component(cluster, f"agent-{node}")
        killed = time.monotonic()

        def not_ready() -> bool:
            if pid_file.read_text() != before:  # another test session's `kubepool local up` restarted the agent
                pytest.skip(f"the agent of {node} was restarted by someone else before the node went NotReady")
            return not node_ready(kubectl, node)

        wait_for(not_ready, 120, f"{node} NotReady", 1.0)
        visible = time.monotonic()
        final = wait_terminal(kubectl, namespace, ["node-below"], VERDICT_S + 30)
        verdict = (recorder.first_time("node-below", {"FAILED"}) or time.monotonic()) - visible
        local_up()  # the agent comes back; the evicted pods are cleaned up
        wait_for(lambda: node_ready(kubectl, node), 120, f"{node} Ready again", 1.0)
        final = wait_terminal(kubectl, namespace, ["node-below"], 60)
        got = {n: (final[n]["phase"], final[n]["reason"]) for n in expect}
        assert got == expect, (got, final)
        assert verdict <= VERDICT_S, f"verdict {verdict:.0f}s after the node went NotReady"
        assert not recorder.backwards(), recorder.backwards()
        wait_for(lambda: not orphans(kubectl, namespace), 60, "no orphans")
        record(cluster, "node-agent-killed", faults=1, jobs=1, lost=0, orphaned=0, converge_s=verdict)
        print(f"NotReady after {visible - killed:.0f}s; verdict {verdict:.1f}s later")
    finally:
        if node and not node_ready(kubectl, node):
            local_up()
        operator.stop()
