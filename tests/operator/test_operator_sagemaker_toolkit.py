"""SageMaker's own training toolkit (`sagemaker_training.environment.Environment`, what SageMaker's framework
images run scripts through) on every instance of a heterogeneous job on the local cluster: it must read the same
answers on kubepool as on SageMaker: host and group, hetero, group hosts, master, channels (only for the groups
they name), typed hyperparameters, model and output dirs, instance type. Measured against the published toolkit,
not against our reading of its docs."""

from __future__ import annotations

import json
from typing import Any

import pytest
import sagemaker_training  # noqa: F401 - a dev dependency the pods import: missing, the module fails, never skips
import yaml

from support.operator_cluster import GATE_S, JOB_WAIT_S, Operator, mljob, wait_phase

pytestmark = [pytest.mark.cluster, pytest.mark.ray]
JOB_TIMEOUT_S = JOB_WAIT_S
SCRIPT = """\
import json, os
from sagemaker_training import environment

env = environment.Environment()
seen = {k: getattr(env, k) for k in (
    "current_host", "current_instance_group", "is_hetero", "instance_groups", "current_instance_group_hosts",
    "master_hostname", "is_master", "hosts", "channel_input_dirs", "hyperparameters", "model_dir", "output_data_dir",
    "current_instance_type", "distribution_instance_groups", "job_name", "input_data_config")}
seen["channel_files"] = {c: sorted(os.listdir(d)) for c, d in env.channel_input_dirs.items()}
seen["sm_training_env"] = json.loads(os.environ["SM_TRAINING_ENV"])
print("TOOLKIT " + json.dumps(seen, sort_keys=True), flush=True)
"""


def _toolkit_views(kubectl: Any, namespace: str, job: str) -> dict[str, dict[str, Any]]:
    pods = kubectl.json("get", "pods", "-n", namespace, "-l", f"kubepool.dev/job={job}")["items"]
    out = {}
    for p in pods:
        log = kubectl("logs", "-n", namespace, p["metadata"]["name"], "--tail=-1").stdout
        lines = [ln for ln in log.splitlines() if ln.startswith("TOOLKIT ")]
        assert len(lines) == 1, f"{p['metadata']['name']}: no toolkit line in\n{log[-3000:]}"
        view = json.loads(lines[0].removeprefix("TOOLKIT "))
        out[view["current_host"]] = view
    return out


def test_toolkit_reads_the_same_answers_on_every_instance(kubectl: Any, namespace: str, operator: Operator,
                                                          compute_pool: Any, apply: Any) -> None:
    cpu, gpu = compute_pool("cpu", max_nodes=2), compute_pool("gpu", max_nodes=1, resources={"cpu": "2", "memory": "4Gi"})
    for name, data in (("payload", {"train.py": SCRIPT}), ("train-data", {"a.csv": "1,2\n", "b.csv": "3,4\n"})):
        cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}
        kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(cm), check=True)
    groups = [{"name": "data_group", "computePool": cpu, "instanceCount": 2, "instanceType": "ml.c5.xlarge"},
              {"name": "dnn_group", "computePool": gpu, "instanceCount": 1}]
    apply(mljob("toolkit", entrypoint={"file": "train.py"}, code={"configMap": "payload"}, mode="sagemaker",
                instanceGroups=groups, distributionInstanceGroups=["dnn_group"], instancesTimeoutSeconds=GATE_S,
                hyperParameters={"epochs": "3", "lr": "0.05", "name": '"resnet"', "flags": '{"a": [1, 2]}'},
                channels=[{"name": "train", "source": {"configMap": {"name": "train-data"}}, "inputMode": "FastFile",
                           "instanceGroups": ["data_group"]}]))
    st = wait_phase(kubectl, namespace, "toolkit", {"DONE", "FAILED"}, JOB_TIMEOUT_S, operator)
    assert st["phase"] == "DONE", json.dumps(st, indent=1)
    views = _toolkit_views(kubectl, namespace, "toolkit")
    assert sorted(views) == ["algo-1", "algo-2", "algo-3"]
    for host, v in views.items():
        group = "dnn_group" if host == "algo-3" else "data_group"
        assert v["current_instance_group"] == group and v["is_hetero"] is True, host
        assert v["hosts"] == ["algo-1", "algo-2", "algo-3"]
        assert sorted(v["instance_groups"]) == ["data_group", "dnn_group"]
        assert v["current_instance_group_hosts"] == (["algo-3"] if group == "dnn_group" else ["algo-1", "algo-2"])
        # The distribution group (dnn_group) holds the master, as on SageMaker.
        assert v["distribution_instance_groups"] == ["dnn_group"] and v["master_hostname"] == "algo-3"
        assert v["is_master"] is (host == "algo-3")
        # Typed hyperparameters: JSON values decoded, as the toolkit does on SageMaker.
        assert v["hyperparameters"] == {"epochs": 3, "lr": 0.05, "name": "resnet", "flags": {"a": [1, 2]}}
        # Channels reach only the groups they name, with their files.
        if group == "data_group":
            assert list(v["channel_input_dirs"]) == ["train"] and v["channel_files"] == {"train": ["a.csv", "b.csv"]}
            assert v["input_data_config"]["train"]["TrainingInputMode"] == "FastFile"
        else:
            assert v["channel_input_dirs"] == {}
        assert v["model_dir"].endswith("/model") and v["output_data_dir"].endswith("/output/data")
        assert v["job_name"] == "toolkit"
        # The SageMaker type the group declared, where the job names one (else the pool's family).
        assert v["current_instance_type"] == ("ml.c5.xlarge" if group == "data_group" else "GPU_NV_S")
        # What the toolkit read from the files is what our runtime put in SM_TRAINING_ENV for the same instance.
        ours = v["sm_training_env"]
        for key in ("current_host", "current_instance_group", "is_hetero", "current_instance_group_hosts",
                    "master_hostname", "hosts", "channel_input_dirs", "hyperparameters", "model_dir",
                    "output_data_dir", "current_instance_type", "distribution_instance_groups"):
            assert v[key] == ours[key], f"{host}: {key}: toolkit {v[key]!r} vs SM_TRAINING_ENV {ours[key]!r}"


def test_a_pytorch_estimators_versions_are_the_images_or_the_job_fails_saying_what_it_has(
        kubectl: Any, namespace: str, operator: Operator, compute_pool: Any, tmp_path: Any) -> None:
    """PyTorch(framework_version=..., py_version=...) where SageMaker would pick the framework's container: the
    image's torch and Python (the process nodes' venv) pass; a version the image lacks fails the job before the
    script runs, naming what the image has."""
    import sys
    from importlib.metadata import version

    from kubepool.sagemaker.pytorch import PyTorch

    pool = compute_pool("cpu", max_nodes=2)
    script = tmp_path / "train.py"
    script.write_text("print('TRAINED', flush=True)\n")
    torch_minor = ".".join(version("torch").split(".")[:2])
    py = f"py{sys.version_info[0]}{sys.version_info[1]}"
    ok = PyTorch(str(script), framework_version=torch_minor, py_version=py, instance_type=pool, instance_count=1,
                 namespace=namespace, max_run=240).fit(wait=False)
    bad = PyTorch(str(script), framework_version="1.13", py_version=py, instance_type=pool, instance_count=1,
                  namespace=namespace, max_run=240).fit(wait=False)
    st = wait_phase(kubectl, namespace, ok.name, {"DONE", "FAILED"}, JOB_TIMEOUT_S, operator)
    assert st["phase"] == "DONE", json.dumps(st, indent=1)
    st = wait_phase(kubectl, namespace, bad.name, {"DONE", "FAILED"}, JOB_TIMEOUT_S, operator)
    assert st["phase"] == "FAILED", json.dumps(st, indent=1)
    assert f"framework_version 1.13: the image has torch {version('torch')}" in st["message"], st["message"]
    log = kubectl("logs", "-n", namespace, "-l", f"kubepool.dev/job={bad.name}", "--tail=-1").stdout
    assert "TRAINED" not in log
