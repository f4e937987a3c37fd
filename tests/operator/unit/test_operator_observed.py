"""Pod and node views built from raw API bodies, and the status merge patch (pure)."""

from __future__ import annotations

from typing import Any

import pytest

from kubepool import naming
from kubepool.api import ComputePoolStatus, JobPhase, MLJobStatus
from kubepool.controller.observed import POD_SPEC_READ, NodeView, PlaceholderView, PodView
from support.factories import T0


def raw_pod(phase: str, **status: Any) -> dict[str, Any]:
    return {"metadata": {"name": "j-g-0", "labels": {naming.LABEL_INSTANCE: "0", naming.LABEL_ATTEMPT: "1",
                                                      naming.LABEL_JOB_UID: "u"}},
            "spec": {"nodeName": "cpu-node-1"}, "status": {"phase": phase, **status}}


@pytest.mark.parametrize(("body", "expected"), [
    (raw_pod("Running", conditions=[{"type": "Ready", "status": "True"}]),
     {"phase": "Running", "ready": True, "exit_code": None, "message": None}),
    (raw_pod("Failed", containerStatuses=[{"state": {"terminated": {"exitCode": 3, "message": '{"error": "boom"}'}}}]),
     {"phase": "Failed", "ready": False, "exit_code": 3, "message": '{"error": "boom"}'}),
    (raw_pod("Failed", containerStatuses=[{"state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]),
     {"phase": "Failed", "exit_code": 137, "message": "OOMKilled"}),
    (raw_pod("Pending", conditions=[{"type": "PodScheduled", "status": "False", "message": "0/5 nodes are available"}]),
     {"phase": "Pending", "message": "0/5 nodes are available"}),
    (raw_pod("Pending", containerStatuses=[{"state": {"waiting": {"reason": "CreateContainerConfigError"}}}]),
     {"message": "CreateContainerConfigError"}),
], ids=["running-ready", "failed-with-message", "oom", "unschedulable", "waiting"])
def test_pod_view(body: dict[str, Any], expected: dict[str, Any]) -> None:
    view = PodView.of(body)
    assert (view.instance_id, view.attempt, view.job_uid, view.node, view.is_head) == (0, 1, "u", "cpu-node-1", True)
    for key, value in expected.items():
        assert getattr(view, key) == value, key


class _Recording(dict[str, Any]):
    """A pod's spec that notes every key read (iterating it reads them all)."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.read: set[str] = set()

    def get(self, key: str, default: Any = None) -> Any:
        self.read.add(key)
        return super().get(key, default)

    def __getitem__(self, key: str) -> Any:
        self.read.add(key)
        return super().__getitem__(key)

    def __contains__(self, key: object) -> bool:
        self.read.add(str(key))
        return super().__contains__(key)


def _reads_every_key(name: str) -> Any:
    def method(self: _Recording, *args: Any) -> Any:
        self.read.add("*every key*")
        return getattr(dict, name)(self, *args)
    return method


for _name in ("__iter__", "keys", "items", "values"):
    setattr(_Recording, _name, _reads_every_key(_name))


@pytest.mark.parametrize("view", [PodView, PlaceholderView])
def test_the_views_read_no_pod_spec_field_the_watch_drops(view: Any) -> None:
    """kopf_fence.loads keeps only POD_SPEC_READ of a watched pod's spec: a view reading more would see nothing."""
    spec = _Recording({"nodeName": "n", "hostname": "h", "subdomain": "s", "containers": [{"name": "c"}],
                       "priority": 5, "affinity": {}})
    view.of({**raw_pod("Running"), "spec": spec})
    assert spec.read and spec.read <= set(POD_SPEC_READ), spec.read - set(POD_SPEC_READ)


def test_node_view() -> None:
    node = NodeView.of({"metadata": {"name": "gpu-node-1", "labels": {"a": "b"}},
                        "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
                        "status": {"conditions": [{"type": "Ready", "status": "True"}]}})
    assert node.ready and node.labels == {"a": "b"} and node.taints[0].key == "nvidia.com/gpu"


def test_status_patch_removes_fields_the_new_status_lacks() -> None:
    old = MLJobStatus(phase=JobPhase.PENDING, reason="Queued", message="waiting", admitted_at=T0)
    new = MLJobStatus(phase=JobPhase.PENDING, admitted_at=T0)
    assert old.reason is not None
    patch = new.merge_patch()
    assert patch["reason"] is None and patch["message"] is None and patch["phase"] == "PENDING"
    pool = ComputePoolStatus(ready_nodes=2).merge_patch()
    assert pool["idleSince"] is None and pool["readyNodes"] == 2  # a busy pool's idleSince is removed
