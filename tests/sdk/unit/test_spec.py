"""Job names, instance rules and the MLJob spec built from submit arguments (no cluster)."""

from __future__ import annotations

import re

import pytest

from kubepool.api import Entrypoint, InstanceGroup
from kubepool.contract import RunMode
from kubepool.jobs.spec import MAX_JOB_NAME, build_mljob, check_instances, check_name, generate_name

DNS = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


@pytest.mark.parametrize("stem", ["train", "My_Training.Script", "x" * 100, "__", "9lives", "ünïcode"])
def test_generated_names_are_short_dns_labels(stem: str) -> None:
    name = generate_name(stem)
    assert DNS.match(name) and len(name) <= MAX_JOB_NAME and check_name(name) == name
    assert re.search(r"-[0-9a-f]{8}$", name)
    assert generate_name(stem) != name


def test_generated_name_keeps_the_stem() -> None:
    assert generate_name("My_Training").startswith("my-training-")


@pytest.mark.parametrize("bad", ["Upper", "-x", "x-", "a" * 41, "has_underscore", "", "9lives"])
def test_bad_names_are_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="invalid job name"):
        check_name(bad)


def test_instance_rules_follow_snowflake() -> None:
    assert check_instances(3, None) == (3, 3)
    assert check_instances(5, 2) == (5, 2)
    with pytest.raises(ValueError, match="at least 1"):
        check_instances(0, None)
    with pytest.raises(ValueError, match="greater than 0"):
        check_instances(2, 0)
    with pytest.raises(ValueError, match=r"min_instances \(3\) must be less than or equal to target_instances \(2\)"):
        check_instances(2, 3)


def test_submit_file_spec() -> None:
    job = build_mljob(
        name="train-1", namespace="team", entrypoint=Entrypoint(file="train.py"), compute_pool="cpu",
        target_instances=5, min_instances=2, args=["--epochs", 3], env_vars={"A": 1},
        pip_requirements=["xgboost==3.2.0"], instances_timeout=60,
    )
    wire = job.wire()
    assert wire["metadata"] == {"name": "train-1", "namespace": "team",
                                "labels": {"app.kubernetes.io/managed-by": "kubepool"}}
    spec = wire["spec"]
    assert spec["computePool"] == "cpu" and spec["targetInstances"] == 5 and spec["minInstances"] == 2
    assert spec["entrypoint"] == {"file": "train.py"}
    assert spec["args"] == ["--epochs", "3"]
    assert spec["env"] == [{"name": "A", "value": "1"}]
    assert spec["pipRequirements"] == ["xgboost==3.2.0"]
    assert spec["code"] == {"configMap": "train-1-payload"}
    assert spec["instancesTimeoutSeconds"] == 60 and spec["mode"] == "head"
    assert "instanceGroups" not in spec


def test_groups_spec_leaves_target_to_the_groups() -> None:
    job = build_mljob(
        name="het", namespace="team", entrypoint=Entrypoint(file="t.py"), mode=RunMode.SAGEMAKER,
        instance_groups=[InstanceGroup(name="g_1", compute_pool="cpu", instance_count=2),
                         InstanceGroup(name="g_2", compute_pool="gpu", instance_count=1)],
        distribution_instance_groups=["g_2"],
    )
    spec = job.wire()["spec"]
    assert "targetInstances" not in spec and "computePool" not in spec
    assert spec["minInstances"] == 3 and spec["mode"] == "sagemaker"
    assert spec["distributionInstanceGroups"] == ["g_2"]


def test_invalid_fields_name_the_field() -> None:
    with pytest.raises(ValueError, match=r"env\.0\.name"):
        build_mljob(name="x", namespace="n", entrypoint=Entrypoint(file="a.py"), compute_pool="cpu",
                    env_vars={"1BAD": "v"})
    with pytest.raises(ValueError, match="must be less than or equal"):
        build_mljob(name="x", namespace="n", entrypoint=Entrypoint(file="a.py"), compute_pool="cpu",
                    target_instances=2, min_instances=3)


def test_spec_overrides_set_pod_settings_and_are_validated() -> None:
    secret_env = {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}
    job = build_mljob(name="train", namespace="ns", entrypoint=Entrypoint(file="main.py"), compute_pool="cpu",
                      env_vars={"A": 1}, spec_overrides={"serviceAccountName": "trainer", "env": [secret_env],
                                                         "podLabels": {"team": "x"}})
    spec = job.wire()["spec"]
    assert spec["serviceAccountName"] == "trainer" and spec["podLabels"] == {"team": "x"}
    assert spec["env"] == [{**secret_env, "value": ""}] and spec["computePool"] == "cpu"
    with pytest.raises(ValueError, match="invalid job train: serviceAccountName"):
        build_mljob(name="train", namespace="ns", entrypoint=Entrypoint(file="main.py"), compute_pool="cpu",
                    spec_overrides={"serviceAccountName": "Not A Name"})
