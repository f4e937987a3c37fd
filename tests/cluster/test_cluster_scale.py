"""Scale: `kubepool local up --fake-nodes 100` on the running cluster, then 1000 pods of one Deployment on the
kwok fake nodes become Running."""

from __future__ import annotations

import json
import time

import pytest

from kubepool.local import cli, kwok
from kubetest import Cluster, Kubectl

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.exclusive]  # floods the scheduler and the API server
NODES, REPLICAS = 100, 1000


def test_1000_pods_on_100_fake_nodes(cluster: Cluster, kubectl: Kubectl, namespace: str) -> None:
    assert cli.main(["up", "--state-dir", str(cluster.state_dir), "--fake-nodes", str(NODES)]) == 0
    try:
        deadline = time.monotonic() + 60
        while True:
            nodes = json.loads(kubectl("get", "nodes", "-l", "type=kwok", "-o", "json", check=True).stdout)["items"]
            ready = [n for n in nodes if any(c["type"] == "Ready" and c["status"] == "True"
                                             for c in n["status"].get("conditions", []))]
            if len(ready) >= NODES:
                break
            assert time.monotonic() < deadline, f"{len(ready)}/{NODES} fake nodes Ready after 60s"
            time.sleep(1)

        t0 = time.monotonic()
        deployment = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "scale"},
            "spec": {
                "replicas": REPLICAS,
                "selector": {"matchLabels": {"app": "scale"}},
                "template": {
                    "metadata": {"labels": {"app": "scale"}},
                    "spec": {
                        "nodeSelector": {"type": "kwok"},
                        "tolerations": [kwok.FAKE_TOLERATION],
                        "containers": [{"name": "c", "image": "fake.invalid/pause:1"}],
                    },
                },
            },
        }
        kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(deployment), check=True)
        deadline = time.monotonic() + 420
        running = 0
        while running < REPLICAS:
            assert time.monotonic() < deadline, f"only {running}/{REPLICAS} pods Running after 420s"
            time.sleep(3)
            out = kubectl("get", "pods", "-n", namespace, "--field-selector=status.phase=Running",
                          "-o", "name", "--chunk-size=0", check=True).stdout
            running = len(out.split())
        print(f"{REPLICAS} pods Running on {NODES} fake nodes in {time.monotonic() - t0:.1f}s")
        spread = json.loads(kubectl("get", "pods", "-n", namespace, "-o", "json", check=True).stdout)["items"]
        assert len({p["spec"]["nodeName"] for p in spread}) > NODES // 2  # the scheduler spread them out
    finally:
        kubectl("delete", "namespace", namespace, "--wait=false")
        # Keep kwok-node-0 (other tests use it); 99 heartbeating fake nodes would load the rest of the session.
        kubectl("delete", "node", *(kwok.fake_node_name(i) for i in range(1, NODES)), "--wait=false")
