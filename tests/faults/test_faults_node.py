"""Node loss (R3), with the operator's default settings: SIGKILL a node agent (the local kubelet). Once the
node's lease lapses Kubernetes marks it NotReady; the operator's instances tolerate that for the default
node_lost_seconds (NoExecute tolerations on its pods), are evicted, and the job whose worker was there FAILS
InstancesLost: no sooner than node_lost_seconds after NotReady (the toleration held) and within 30 s after it
(the eviction and one operator pass). The agent is started again afterwards. The job runs on this file's own nodes
(support.private_nodes): no other test's pod is on the node that goes, so the test takes no exclusive turn. Slow:
the node-monitor grace period (~50 s) plus node_lost_seconds (60 s)."""

from __future__ import annotations

import os
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from faultkit import (
    job,
    kill_component,
    node_ready,
    orphans,
    pod_running,
    record,
    sleep_cmd,
    wait_terminal,
)

from kubepool import naming
from kubepool.controller.builders.pods import NODE_LOST_TAINTS
from kubepool.controller.config import OperatorConfig
from support import private_nodes
from support.operator_cluster import Operator, operator_env, wait_for

NODE_LOST_SECONDS = int(OperatorConfig.model_fields["node_lost_seconds"].default)  # what a chart install runs with
AFTER_S = 30.0  # from the toleration's end: the taint manager's eviction, then one operator pass
NOT_READY_POLL_S = 1.0
PRIVATE = "node-faults"


def _t(ts: str) -> float:
    return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()


@pytest.mark.slow
def test_node_agent_killed(cluster: Any, kubectl: Any, crds: None, namespace: str, tmp_path: Path, small_pool: Any,
                           recorder: Any, operator_kubeconfig: Path) -> None:
    assert "KUBEPOOL_OPERATOR_NODE_LOST_SECONDS" not in os.environ and "KUBEPOOL_OPERATOR_NODE_LOST_SECONDS" not in operator_env()
    operator = Operator(operator_kubeconfig, namespace, tmp_path / "operator.log")
    operator.start()
    node = ""
    try:
        below = small_pool(max_nodes=2, nodeSelector=private_nodes.selector(PRIVATE),
                           tolerations=[private_nodes.toleration(PRIVATE)])
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

        wait_for(not_ready, 120, f"{node} NotReady", NOT_READY_POLL_S)
        visible = time.monotonic()
        final = wait_terminal(kubectl, namespace, ["node-below"], NODE_LOST_SECONDS + AFTER_S + 30)
        verdict = (recorder.first_time("node-below", {"FAILED"}) or time.monotonic()) - visible
        # The toleration counts from the NoExecute taint's timeAdded (gone once the node is Ready again).
        tainted = min(_t(t["timeAdded"]) for t in kubectl.json("get", "node", node)["spec"].get("taints", [])
                      if t["effect"] == "NoExecute" and t["key"] in NODE_LOST_TAINTS)
        held = _t(final["node-below"]["completionTime"]) - tainted
        private_nodes.start_agent(cluster.layout, node)  # the agent comes back; the evicted pods are cleaned up
        wait_for(lambda: node_ready(kubectl, node), 120, f"{node} Ready again", 1.0)
        final = wait_terminal(kubectl, namespace, ["node-below"], 60)
        got = {n: (final[n]["phase"], final[n]["reason"]) for n in expect}
        assert got == expect, (got, final)
        # Both stamps are the API's, whole seconds: the toleration held its full length, not less.
        assert held >= NODE_LOST_SECONDS - 1, f"FAILED {held:.0f}s after the taint: sooner than the toleration"
        assert verdict <= NODE_LOST_SECONDS + AFTER_S, f"verdict {verdict:.0f}s after the node went NotReady"
        assert not recorder.backwards(), recorder.backwards()
        wait_for(lambda: not orphans(kubectl, namespace), 60, "no orphans")
        record(cluster, "node-agent-killed", faults=1, jobs=1, lost=0, orphaned=0, converge_s=verdict,
               node_lost_seconds=NODE_LOST_SECONDS, not_ready_after_s=round(visible - killed, 1), after_taint_s=held)
        print(f"NotReady after {visible - killed:.0f}s; verdict {verdict:.1f}s later")
    finally:
        try:
            if node and not node_ready(kubectl, node):
                private_nodes.start_agent(cluster.layout, node)
        finally:
            operator.stop()
