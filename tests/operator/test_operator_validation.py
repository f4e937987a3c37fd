"""The API server itself refuses bad MLJobs and ComputePools (schema + CEL rules from kubepool.api):
each manifest is applied with `kubectl apply --dry-run=server` and the server's message must say what is
wrong. No operator needed."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.api  # the API server alone: no operator, no pod runs (make test-fast)

EP = {"file": "main.py"}
G1 = {"name": "g1", "computePool": "cpu", "instanceCount": 1}
G2 = {"name": "g2", "computePool": "gpu", "instanceCount": 1}
S3 = {"s3": {"uri": "s3://bucket/data"}}


def job(name: str = "bad", **spec: Any) -> dict[str, Any]:
    spec.setdefault("entrypoint", EP)
    if "instanceGroups" not in spec and "computePool" not in spec:
        spec["computePool"] = "cpu"
    return {"apiVersion": "kubepool.dev/v1alpha1", "kind": "MLJob", "metadata": {"name": name}, "spec": spec}


def pool(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "kubepool.dev/v1alpha1", "kind": "ComputePool", "metadata": {"name": "bad-pool"}, "spec": spec}


CASES: list[tuple[str, dict[str, Any], str]] = [
    ("min-above-target", job(targetInstances=2, minInstances=3), "minInstances must not exceed targetInstances"),
    ("min-above-default-target", job(minInstances=2), "minInstances must not exceed targetInstances"),
    ("groups-and-pool", job(computePool="cpu", instanceGroups=[G1]), "set exactly one of computePool or instanceGroups"),
    ("neither-groups-nor-pool", job(instanceGroups=None), "set exactly one of computePool or instanceGroups"),
    ("target-with-groups", job(instanceGroups=[G1], targetInstances=1), "targetInstances is the sum"),
    ("unknown-group-in-channel", job(instanceGroups=[G1], channels=[{"name": "c", "source": S3, "instanceGroups": ["nope"]}]),
     "channels[].instanceGroups must name groups of spec.instanceGroups"),
    ("partial-channel-assignment", job(instanceGroups=[G1, G2], channels=[
        {"name": "a", "source": S3, "instanceGroups": ["g1"]}, {"name": "b", "source": S3}]),
     "if one channel names instanceGroups, every channel must"),
    ("six-groups", job(instanceGroups=[{**G1, "name": f"g{i}"} for i in range(6)]), "must have at most 5 items"),
    ("duplicate-groups", job(instanceGroups=[{**G1, "name": "Group_A"}, {**G1, "name": "group-a"}]),
     "instanceGroups names must be unique"),
    ("duplicate-channels", job(channels=[{"name": "a", "source": S3}, {"name": "a", "source": S3}]), "channel names must be unique"),
    ("unknown-distribution-group", job(instanceGroups=[G1], distributionInstanceGroups=["zz"]),
     "distributionInstanceGroups must name groups"),
    ("sharded-without-s3", job(channels=[{"name": "a", "source": {"configMap": {"name": "x"}}, "distribution": "ShardedByS3Key"}]),
     "ShardedByS3Key needs an s3 source"),
    ("two-channel-sources", job(channels=[{"name": "a", "source": {**S3, "configMap": {"name": "x"}}}]),
     "set exactly one of s3, persistentVolumeClaim or configMap"),
    ("bad-s3-uri", job(channels=[{"name": "a", "source": {"s3": {"uri": "http://bucket/x"}}}]), "should match '^s3://"),
    ("name-not-dns-label", job(name="bad.name"), "MLJob names must be DNS labels of at most 40 characters"),
    ("name-too-long", job(name="a" * 41), "MLJob names must be DNS labels of at most 40 characters"),
    ("bad-group-name", job(instanceGroups=[{**G1, "name": "-bad"}]), "should match"),
    ("negative-target", job(targetInstances=-1), "should be greater than or equal to 1"),
    ("zero-instance-count", job(instanceGroups=[{**G1, "instanceCount": 0}]), "should be greater than or equal to 1"),
    ("huge-target", job(targetInstances=100000), "should be less than or equal to 1000"),
    ("zero-timeout", job(instancesTimeoutSeconds=0), "should be greater than or equal to 1"),
    ("backoff-too-high", job(backoffLimit=11), "should be less than or equal to 10"),
    ("dotdot-in-file", job(entrypoint={"file": "../etc/passwd"}), "must be a relative path without '..'"),
    ("absolute-file", job(entrypoint={"file": "/etc/passwd"}), "must be a relative path without '..'"),
    ("dotdot-in-working-dir", job(workingDir="a/../../b"), "must not contain '..'"),
    ("two-entrypoints", job(entrypoint={"file": "a.py", "module": "a"}), "set exactly one of file, module or command"),
    ("function-without-file", job(entrypoint={"module": "a", "function": "f"}), "function needs file"),
    ("missing-entrypoint", job(entrypoint=None), "spec.entrypoint: Required value"),
    ("two-code-sources", job(code={"configMap": "a", "persistentVolumeClaim": {"claimName": "b"}}),
     "set exactly one of configMap or persistentVolumeClaim"),
    ("bad-env-name", job(env=[{"name": "1BAD", "value": "x"}]), "should match"),
    ("unknown-backend", job(backend="slurm"), 'Unsupported value: "slurm"'),
    ("unknown-family", pool(instanceFamily="CPU_X64_XXL", maxNodes=1), 'Unsupported value: "CPU_X64_XXL"'),
    ("pool-min-above-max", pool(instanceFamily="CPU_X64_S", minNodes=3, maxNodes=2), "minNodes must not exceed maxNodes"),
    ("pool-without-size", pool(maxNodes=1), "set instanceFamily or resources"),
    ("pool-bad-quantity", pool(resources={"cpu": "lots"}, maxNodes=1), "should match"),
]


def _clean(obj: dict[str, Any]) -> dict[str, Any]:
    """Drops keys set to None, so a case can remove a default (e.g. the entrypoint)."""
    return {k: _clean(v) if isinstance(v, dict) else v for k, v in obj.items() if v is not None}


@pytest.mark.parametrize(("manifest", "expected"), [(m, e) for _, m, e in CASES], ids=[c[0] for c in CASES])
def test_invalid_manifest_is_rejected(kubectl: Any, crds: None, namespace: str, manifest: dict[str, Any], expected: str) -> None:
    proc = kubectl("apply", "--dry-run=server", "-n", namespace, "-f", "-", input=yaml.safe_dump(_clean(manifest)))
    assert proc.returncode != 0, f"accepted: {manifest}"
    assert expected in proc.stderr, proc.stderr


def test_valid_manifests_are_accepted(kubectl: Any, crds: None, namespace: str) -> None:
    ok = [job(name="ok", targetInstances=3, minInstances=2),
          job(name="hetero", instanceGroups=[G1, G2], channels=[{"name": "a", "source": S3, "instanceGroups": ["g1"]}],
              distributionInstanceGroups=["g2"], mode="sagemaker"),
          pool(instanceFamily="GPU_NV_S", minNodes=0, maxNodes=2)]
    for m in ok:
        proc = kubectl("apply", "--dry-run=server", "-n", namespace, "-f", "-", input=yaml.safe_dump(m))
        assert proc.returncode == 0, proc.stderr
