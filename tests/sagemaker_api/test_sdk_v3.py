"""The SageMaker Python SDK v3's `ModelTrainer` (sagemaker-train, pinned, in a venv of its own:
support.sagemaker_clients.V3_PINS), unchanged, against the SageMaker API server on the local cluster and a real S3
server (moto), with the AWS SDKs' endpoint variables, a key, and SAGEMAKER_VALIDATE_ROLE=false (the SDK's own
switch: v3 checks the role with IAM's SimulatePrincipalPolicy before it creates anything, and there is no IAM here).

One job of two instance groups: a `SourceCode` (source_dir + entry_script: v3 uploads the directory and its own
drivers as the channels `code` and `sm_drivers`, and runs them with ContainerEntrypoint `/bin/bash -c
.../sm_train.sh`, not script mode), a `Compute` with `InstanceGroup`s, an `InputData` channel for one group, sharded;
`train(wait=True, logs=True)` streams both hosts' logs and ends with the model in the moto bucket.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from support.operator_cluster import Operator
from support.s3 import client
from support.sagemaker_api import REGION, tar_members
from support.sagemaker_clients import V3_PINS, clients_env, clients_venv

pytestmark = [pytest.mark.cluster]
BUCKET = "sagemaker-kp3"
S3_ADDRESS = "127.0.5.43"  # conftest's s3_endpoint: the local nodes' pods share the host's network
SDK_TIMEOUT_S = 300
INSTANCE_TYPE = "ml.r5.8xlarge"  # HIGHMEM_X64_M: a family no other test makes a pool of (test_sdk_v2 has HIGHMEM_X64_L)

TRAIN = """\
import json, os, sys
host, group = os.environ["SM_CURRENT_HOST"], os.environ["SM_CURRENT_INSTANCE_GROUP"]
channel = sorted(os.listdir(os.environ["SM_CHANNEL_TRAIN"])) if os.path.isdir("/opt/ml/input/data/train") else None
print(f"V3 HOST {host} GROUP {group} ARGS {sys.argv[1:]} CHANNEL {channel}", flush=True)
if group == "trainer":
    with open(os.path.join(os.environ["SM_MODEL_DIR"], "model.json"), "w") as f:
        json.dump({"trained_by": host, "epochs": json.loads(os.environ["SM_HPS"])["epochs"]}, f)
"""

DRIVER = """\
import json, logging, sys
import boto3
from sagemaker.core.helper.session_helper import Session
from sagemaker.core.shapes import InstanceGroup, S3DataSource
from sagemaker.core.training.configs import Compute, InputData, OutputDataConfig, SourceCode, StoppingCondition
from sagemaker.train import ModelTrainer

logging.basicConfig(level=logging.INFO)  # v3 logs (the hosts' lines too) through logging, configured by its user
cfg = json.loads(sys.argv[1])
session = Session(boto_session=boto3.Session(region_name=cfg["region"]), default_bucket=cfg["bucket"])
groups = [InstanceGroup(instance_group_name="reader", instance_type=cfg["type"], instance_count=1),
          InstanceGroup(instance_group_name="trainer", instance_type=cfg["type"], instance_count=1)]
trainer = ModelTrainer(
    training_image="kubepool-runtime", role=cfg["role"], sagemaker_session=session, base_job_name="v3",
    source_code=SourceCode(source_dir=cfg["src"], entry_script="train.py"), compute=Compute(instance_groups=groups),
    hyperparameters={"epochs": 3}, stopping_condition=StoppingCondition(max_runtime_in_seconds=300),
    output_data_config=OutputDataConfig(s3_output_path=f"s3://{cfg['bucket']}/out"))
data = S3DataSource(s3_data_type="S3Prefix", s3_uri=f"s3://{cfg['bucket']}/data/",
                    s3_data_distribution_type="ShardedByS3Key", instance_group_names=["reader"])
trainer.train(input_data_config=[InputData(channel_name="train", data_source=data)], wait=True, logs=True)
job = trainer._latest_training_job  # the SDK's own documented handle (ModelTrainer's docstring)
print("RESULT " + json.dumps({"job": job.training_job_name, "status": job.training_job_status,
                              "model": job.model_artifacts.s3_model_artifacts}), flush=True)
"""


def test_the_sdk_v3_model_trainer_trains_a_two_group_job_unchanged(
        kubectl: Any, namespace: str, operator: Operator, compute_pool: Any, sagemaker_key: Any, server_with_s3: Any,
        s3_credentials: str, s3_endpoint: str, tmp_path: Path) -> None:
    venv = clients_venv(V3_PINS)
    pool = compute_pool("cpu", max_nodes=2, instanceFamily="HIGHMEM_X64_M", resources={"cpu": "500m", "memory": "1Gi"})
    key = sagemaker_key(namespace)
    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_text(TRAIN)
    cfg = {"region": REGION, "bucket": BUCKET, "type": INSTANCE_TYPE, "src": str(src),
           "role": "arn:aws:iam::123456789012:role/default"}  # the key acts as the namespace's default account
    config = tmp_path / ".config" / "sagemaker" / "config.yaml"
    config.parent.mkdir(parents=True)
    config.write_text(yaml.safe_dump({"SchemaVersion": "1.0", "SageMaker": {"PythonSDK": {"Modules": {
        "TelemetryOptOut": True}}}}))
    env = {**clients_env(tmp_path, server_with_s3.endpoint, s3_endpoint, key.key_id, key.secret, REGION),
           "SAGEMAKER_VALIDATE_ROLE": "false"}
    proc = subprocess.run([str(venv / "bin" / "python"), "-c", DRIVER, json.dumps(cfg)], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=SDK_TIMEOUT_S)
    out = proc.stdout + proc.stderr
    context = f"{out[-6000:]}\nserver:\n{server_with_s3.logs()[-3000:]}"
    results = [json.loads(line[7:]) for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and len(results) == 1, context
    trained = results[0]

    # train(logs=True) streamed both hosts; v3's drivers passed the hyperparameters as arguments; the reader alone
    # got the channel.
    assert "V3 HOST algo-1 GROUP reader ARGS ['--epochs', '3'] CHANNEL ['a.csv', 'b.csv']" in out, context
    assert "V3 HOST algo-2 GROUP trainer ARGS ['--epochs', '3'] CHANNEL None" in out, context
    assert trained["status"] == "Completed", context
    assert pool in kubectl("get", "mljobs", "-n", namespace, "-o", "yaml", check=True).stdout
    assert trained["model"] == f"s3://{BUCKET}/out/{trained['job']}/output/model.tar.gz"
    blob = client(s3_endpoint).get_object(Bucket=BUCKET, Key=trained["model"].split("/", 3)[3])["Body"].read()
    assert json.loads(tar_members(blob)["model.json"]) == {"trained_by": "algo-2", "epochs": 3}
