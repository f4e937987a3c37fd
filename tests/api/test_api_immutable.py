"""A created MLJob's spec keeps what a running job could not follow: changing it is refused by the API server
(CEL transition rules generated from kubepool.api) with a message naming the field, as Job and JobSet do; what
the operator does follow (suspend, the instance counts, minInstances, the time limits) still changes."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from kubepool.api import MLJobSpec
from kubepool.api.mljob_rules import IMMUTABLE_SPEC, MUTABLE_SPEC

pytestmark = pytest.mark.api  # the API server alone: no operator, no pod runs (make test-fast)

SINGLE = {"computePool": "cpu", "targetInstances": 2, "image": "kubepool/runtime:dev",
          "entrypoint": {"command": ["python", "-c", "print(1)"]}, "env": [{"name": "A", "value": "1"}]}
GROUPS = {"instanceGroups": [{"name": "data", "computePool": "cpu", "instanceCount": 1},
                             {"name": "train", "computePool": "gpu", "instanceCount": 2}],
          "entrypoint": {"file": "train.py"}, "mode": "sagemaker"}


def test_every_spec_field_is_classified() -> None:
    fields = {f.alias or name for name, f in MLJobSpec.model_fields.items()}
    assert fields == set(IMMUTABLE_SPEC) | set(MUTABLE_SPEC) | {"instanceGroups"}


def _create(kubectl: Any, namespace: str, name: str, spec: dict[str, Any]) -> None:
    job = {"apiVersion": "kubepool.dev/v1alpha1", "kind": "MLJob", "metadata": {"name": name}, "spec": spec}
    kubectl("create", "-n", namespace, "-f", "-", input=yaml.safe_dump(job), check=True)


def _patch(kubectl: Any, namespace: str, name: str, spec: dict[str, Any]) -> Any:
    return kubectl("patch", "mljob", name, "-n", namespace, "--type=merge", "-p", json.dumps({"spec": spec}))


@pytest.mark.parametrize(("change", "field"), [
    ({"image": "other:1"}, "image"), ({"computePool": "gpu"}, "computePool"),
    ({"entrypoint": {"command": ["python", "-c", "print(2)"]}}, "entrypoint"),
    ({"env": [{"name": "A", "value": "2"}]}, "env"), ({"args": ["--x"]}, "args"), ({"backoffLimit": 2}, "backoffLimit"),
    ({"pipRequirements": ["numpy"]}, "pipRequirements"), ({"ray": {"authMode": "disabled"}}, "ray"),
    ({"serviceAccountName": "trainer"}, "serviceAccountName"), ({"podLabels": {"team": "x"}}, "podLabels"),
    ({"volumes": [{"name": "scratch", "emptyDir": {}}]}, "volumes"),
])
def test_immutable_fields_are_refused_naming_them(kubectl: Any, crds: None, namespace: str, change: dict[str, Any],
                                                  field: str) -> None:
    _create(kubectl, namespace, "fixed", SINGLE)
    proc = _patch(kubectl, namespace, "fixed", change)
    assert proc.returncode != 0, f"accepted a change of {field}"
    assert f"spec: Forbidden: {field} cannot change after the job is created" in proc.stderr, proc.stderr


def test_what_the_operator_follows_still_changes(kubectl: Any, crds: None, namespace: str) -> None:
    _create(kubectl, namespace, "scalable", SINGLE)
    for change in ({"targetInstances": 3}, {"minInstances": 2}, {"ttlSecondsAfterFinished": 60},
                   {"activeDeadlineSeconds": 600}, {"suspend": True}):
        proc = _patch(kubectl, namespace, "scalable", change)
        assert proc.returncode == 0, f"{change}: {proc.stderr}"
    assert kubectl.json("get", "mljob", "scalable", "-n", namespace)["spec"]["targetInstances"] == 3
    # `kubectl scale` goes through the scale subresource, which the transition rules must let through too.
    proc = kubectl("scale", "mljob", "scalable", "-n", namespace, "--replicas=4")
    assert proc.returncode == 0, proc.stderr


def test_instance_groups_keep_names_and_pools_but_not_counts(kubectl: Any, crds: None, namespace: str) -> None:
    _create(kubectl, namespace, "hetero", GROUPS)
    resized = [{**GROUPS["instanceGroups"][0]}, {**GROUPS["instanceGroups"][1], "instanceCount": 3}]
    assert _patch(kubectl, namespace, "hetero", {"instanceGroups": resized}).returncode == 0
    moved = [{**GROUPS["instanceGroups"][0], "computePool": "gpu"}, resized[1]]
    proc = _patch(kubectl, namespace, "hetero", {"instanceGroups": moved})
    assert proc.returncode != 0 and "spec: Forbidden: instanceGroups (their names, pools" in proc.stderr, proc.stderr
    proc = _patch(kubectl, namespace, "hetero", {"instanceGroups": resized[:1]})
    assert proc.returncode != 0 and "spec: Forbidden: instanceGroups (their names, pools" in proc.stderr, proc.stderr


def test_a_groups_pod_settings_cannot_change(kubectl: Any, crds: None, namespace: str) -> None:
    # A running group's pods would keep the old settings while new instances (a scale-up) got the new ones.
    _create(kubectl, namespace, "settled", GROUPS)
    relabelled = [{**GROUPS["instanceGroups"][0], "podLabels": {"team": "x"}}, GROUPS["instanceGroups"][1]]
    proc = _patch(kubectl, namespace, "settled", {"instanceGroups": relabelled})
    assert proc.returncode != 0, "accepted a change of a group's podLabels"
    assert "spec: Forbidden: instanceGroups[].podLabels cannot change" in proc.stderr, proc.stderr


def test_cancel_cannot_be_undone_but_suspend_can(kubectl: Any, crds: None, namespace: str) -> None:
    _create(kubectl, namespace, "paused", SINGLE)
    for change in ({"suspend": True}, {"suspend": False}, {"cancel": True}):
        proc = _patch(kubectl, namespace, "paused", change)
        assert proc.returncode == 0, f"{change}: {proc.stderr}"
    proc = _patch(kubectl, namespace, "paused", {"cancel": False})
    assert proc.returncode != 0 and "spec: Forbidden: cancel cannot be undone" in proc.stderr, proc.stderr


def test_a_job_with_a_sharded_channel_refuses_a_resize(kubectl: Any, crds: None, namespace: str) -> None:
    """ShardedByS3Key: each instance's shard is fixed when it starts, so scale_cluster's patch, `kubectl scale`
    and an instanceCount change are refused saying why; the same job without the sharded channel resizes."""
    sharded = {"name": "train", "distribution": "ShardedByS3Key", "source": {"s3": {"uri": "s3://bucket/data"}}}
    _create(kubectl, namespace, "sharded", {**SINGLE, "channels": [sharded], "mode": "sagemaker"})
    _create(kubectl, namespace, "sharded-groups", {**GROUPS, "channels": [sharded]})
    why = "the instance count of a job with a ShardedByS3Key channel cannot change"
    for name, change in (("sharded", {"targetInstances": 3}), ("sharded-groups", {"instanceGroups": [
            {**GROUPS["instanceGroups"][0]}, {**GROUPS["instanceGroups"][1], "instanceCount": 3}]})):
        proc = _patch(kubectl, namespace, name, change)
        assert proc.returncode != 0 and why in proc.stderr, proc.stderr
    scale = kubectl("scale", "mljob", "sharded", "-n", namespace, "--replicas=1")
    assert scale.returncode != 0 and why in scale.stderr, scale.stderr
    assert _patch(kubectl, namespace, "sharded", {"minInstances": 2}).returncode == 0  # other changes still pass
    replicated = {**sharded, "distribution": "FullyReplicated"}
    _create(kubectl, namespace, "replicated", {**SINGLE, "channels": [replicated], "mode": "sagemaker"})
    assert _patch(kubectl, namespace, "replicated", {"targetInstances": 3}).returncode == 0
