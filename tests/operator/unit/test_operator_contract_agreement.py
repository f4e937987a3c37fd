"""The operator's pods and the runtime contract agree: env names, mount paths, and the contract JSON gives
each pod the right identity (group, rank, head)."""

from __future__ import annotations

import base64

import pytest

from kubepool import contract, naming
from kubepool.controller.builders import (
    JobRef,
    build_instance_pods,
    build_job_contract,
    build_job_secret,
)
from kubepool.controller.config import OperatorConfig
from support.factories import gpu_pool, job, pool

POOLS = {"cpu": pool(), "gpu": gpu_pool()}
HETERO = {"instanceGroups": [{"name": "instance_group_1", "computePool": "cpu", "instanceCount": 2},
                             {"name": "gpu_group", "computePool": "gpu", "instanceCount": 2}],
          "distributionInstanceGroups": ["gpu_group"],
          "channels": [{"name": "train", "source": {"s3": {"uri": "s3://bucket/data"}}, "distribution": "ShardedByS3Key",
                        "instanceGroups": ["gpu_group"]}],
          "hyperParameters": {"epochs": "3"}, "args": ["--lr", "0.1"], "mode": "sagemaker"}


@pytest.mark.parametrize("spec", [{"targetInstances": 3, "minInstances": 2}, HETERO], ids=["homogeneous", "hetero"])
def test_each_pod_reads_its_identity(spec: dict) -> None:
    j = job(**spec)
    target = j.spec.resolved_target()
    sec = build_job_secret(JobRef.of(j), build_job_contract(j, POOLS), None)
    doc = contract.parse_contract(base64.b64decode(sec["data"][contract.CONTRACT_FILENAME]).decode())
    pods = build_instance_pods(j, POOLS, granted=target, attempt=0, cfg=OperatorConfig())
    assert doc.target_instances == target and doc.min_instances == j.spec.resolved_min()
    assert doc.head_address == f"algo-1.{naming.service_name('train')}"
    for p in pods:
        env = {e["name"]: e.get("value") for e in p["spec"]["containers"][0]["env"]}
        mounts = {m["mountPath"] for m in p["spec"]["containers"][0]["volumeMounts"]}
        assert env[contract.ENV_CONTRACT_FILE] == contract.CONTRACT_PATH
        assert contract.CONTRACT_DIR in mounts and contract.DEFAULT_BASE_DIR in mounts and contract.RESULT_DIR in mounts
        assert env[contract.ENV_BASE_DIR] == contract.DEFAULT_BASE_DIR and env[contract.ENV_RESULT_DIR] == contract.RESULT_DIR
        ident = doc.identity(int(env[contract.ENV_INSTANCE_ID]))
        labels = p["metadata"]["labels"]
        assert ident.is_head == (labels[naming.LABEL_ROLE] == naming.ROLE_HEAD)
        assert naming.dns_label(ident.group) == labels[naming.LABEL_GROUP]
        assert ident.host == p["spec"]["hostname"]
        assert doc.instances[ident.instance_id].pod == p["metadata"]["name"]


def test_hetero_contract_values() -> None:
    doc = build_job_contract(job(**HETERO), POOLS)
    assert [(g.name, g.count, g.gpus, g.instance_type) for g in doc.groups] == [
        ("instance_group_1", 2, 0, "CPU_X64_S"), ("gpu_group", 2, 1, "GPU_NV_S")]
    assert doc.groups[0].cpus == 3.0 and doc.groups[0].memory_bytes == 13 * 2**30
    ident = doc.identity(3)
    assert (ident.group, ident.rank_in_group, ident.group_hosts) == ("gpu_group", 1, ["algo-3", "algo-4"])
    assert [c.name for c in doc.channels_for("gpu_group")] == ["train"] and doc.channels_for("instance_group_1") == []
    assert doc.distribution_instance_groups == ["gpu_group"] and doc.hyperparameters == {"epochs": "3"}
    assert doc.entrypoint.path == "main.py" and doc.entrypoint.args == ["--lr", "0.1"]
    assert doc.mode is contract.RunMode.SAGEMAKER


def test_retry_contract_names_the_retry_pods() -> None:
    doc = build_job_contract(job(targetInstances=2), POOLS, attempt=1)
    assert [i.pod for i in doc.instances] == ["train-homogeneouscluster-0-r1", "train-homogeneouscluster-1-r1"]
