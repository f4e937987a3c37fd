"""The real SageMaker Python SDK (v2, pinned, in a venv of its own: support.sagemaker_clients), unchanged, against
the SageMaker API server on the local cluster and a real S3 server (moto), with only the AWS SDKs' endpoint
variables and a key set. One SDK run, three jobs side by side:

- an `Estimator` with two instance groups (script mode: the SDK uploads sourcedir.tar.gz), a channel for one group:
  `fit(inputs, wait=True, logs=True)` streams every host's log and ends with `model_data` holding what the
  script saved;
- a `PyTorch` (image_uri given: no image lookup) whose script raises: its `wait()` raises the SDK's own
  UnexpectedStatusException with the script's words;
- a script that sleeps: `stop()` while it runs, and it ends Stopped.
The SDK's telemetry is opted out in its own config file (it would call amazonaws.com).
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
from support.sagemaker_clients import clients_env, clients_venv

pytestmark = [pytest.mark.cluster]
BUCKET = "sagemaker-kp"
S3_ADDRESS = "127.0.5.42"  # conftest's s3_endpoint: the local nodes' pods share the host's network
SDK_TIMEOUT_S = 420
INSTANCE_TYPE = "ml.r5.24xlarge"

TRAIN = """\
import json, os, sys
host, group = os.environ["SM_CURRENT_HOST"], os.environ["SM_CURRENT_INSTANCE_GROUP"]
channel = sorted(os.listdir(os.environ["SM_CHANNEL_TRAIN"])) if "SM_CHANNEL_TRAIN" in os.environ else None
print(f"HOST {host} GROUP {group} ARGS {sys.argv[1:]} CHANNEL {channel}", flush=True)
if group == "trainer":
    with open(os.path.join(os.environ["SM_MODEL_DIR"], "model.json"), "w") as f:
        json.dump({"trained_by": host, "epochs": json.loads(os.environ["SM_HPS"])["epochs"]}, f)
"""
FAIL = """\
raise ValueError("label column 'y' is missing from train.csv")
"""
SLEEP = """\
import time
print("SLEEPING", flush=True)
time.sleep(600)
"""

DRIVER = """\
import json, sys, time
import boto3, sagemaker
from sagemaker.estimator import Estimator
from sagemaker.exceptions import UnexpectedStatusException
from sagemaker.instance_group import InstanceGroup
from sagemaker.inputs import TrainingInput
from sagemaker.pytorch import PyTorch

cfg = json.loads(sys.argv[1])
session = sagemaker.Session(boto_session=boto3.Session(region_name=cfg["region"]), default_bucket=cfg["bucket"])
common = dict(role=cfg["role"], sagemaker_session=session, image_uri="kubepool-runtime", debugger_hook_config=False,
              disable_profiler=True, max_run=300)
def result(**kw):
    print("RESULT " + json.dumps(kw), flush=True)

# PyTorch turns SageMaker's metrics time series on unless told (the server refuses it: no metrics service here)
failing = PyTorch(entry_point="fail.py", source_dir=cfg["src"], framework_version="2.5", py_version="py311",
                  instance_count=1, instance_type=cfg["type"], base_job_name="fails", enable_sagemaker_metrics=False,
                  **common)
failing.fit(wait=False)
sleeper = Estimator(entry_point="sleep.py", source_dir=cfg["src"], instance_count=1, instance_type=cfg["type"],
                    base_job_name="sleeps", **common)
sleeper.fit(wait=False)

groups = [InstanceGroup("reader", cfg["type"], 1), InstanceGroup("trainer", cfg["type"], 1)]
est = Estimator(entry_point="train.py", source_dir=cfg["src"], instance_groups=groups, hyperparameters={"epochs": 3},
                output_path=f"s3://{cfg['bucket']}/out", base_job_name="trains", **common)
est.fit({"train": TrainingInput(f"s3://{cfg['bucket']}/data/", distribution="ShardedByS3Key",
                                instance_groups=["reader"])}, wait=True, logs=True)
result(what="trained", model_data=est.model_data, job=est.latest_training_job.name)

try:
    failing.latest_training_job.wait(logs="None")
    result(what="failed", raised=None)
except UnexpectedStatusException as e:
    result(what="failed", raised=type(e).__name__, message=str(e))

sm = session.sagemaker_client
name = sleeper.latest_training_job.name
deadline = time.monotonic() + 120
while sm.describe_training_job(TrainingJobName=name)["SecondaryStatus"] != "Training":
    assert time.monotonic() < deadline, sm.describe_training_job(TrainingJobName=name)
    time.sleep(1)
sleeper.latest_training_job.stop()
sleeper.latest_training_job.wait(logs="None")
result(what="stopped", status=sm.describe_training_job(TrainingJobName=name)["TrainingJobStatus"])
"""


def test_the_sagemaker_sdk_trains_fails_and_stops_jobs_unchanged(
        kubectl: Any, namespace: str, operator: Operator, compute_pool: Any, sagemaker_key: Any, server_with_s3: Any,
        s3_credentials: str, s3_endpoint: str, tmp_path: Path) -> None:
    venv = clients_venv()
    # The SDK parses ml.* instance types; the server runs an ml.* type on the first pool of its family. No other
    # test makes a HIGHMEM_X64_L pool (ml.r5.24xlarge's family); small instances, so the three jobs fit together.
    pool = compute_pool("cpu", max_nodes=3, instanceFamily="HIGHMEM_X64_L", resources={"cpu": "500m", "memory": "1Gi"})
    key = sagemaker_key(namespace)
    src = tmp_path / "src"
    src.mkdir()
    for name, text in (("train.py", TRAIN), ("fail.py", FAIL), ("sleep.py", SLEEP)):
        (src / name).write_text(text)
    cfg = {"region": REGION, "bucket": BUCKET, "type": INSTANCE_TYPE, "src": str(src),
           "role": "arn:aws:iam::123456789012:role/default"}  # the key acts as the namespace's default account
    config = tmp_path / ".config" / "sagemaker" / "config.yaml"
    config.parent.mkdir(parents=True)
    config.write_text(yaml.safe_dump({"SchemaVersion": "1.0", "SageMaker": {"PythonSDK": {"Modules": {
        "TelemetryOptOut": True}}}}))
    env = clients_env(tmp_path, server_with_s3.endpoint, s3_endpoint, key.key_id, key.secret, REGION)
    proc = subprocess.run([str(venv / "bin" / "python"), "-c", DRIVER, json.dumps(cfg)], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=SDK_TIMEOUT_S)
    out = proc.stdout
    context = f"{out[-4000:]}\n{proc.stderr[-4000:]}\nserver:\n{server_with_s3.logs()[-3000:]}"
    results = {r["what"]: r for r in (json.loads(line[7:]) for line in out.splitlines() if line.startswith("RESULT "))}
    assert proc.returncode == 0 and set(results) == {"trained", "failed", "stopped"}, context

    # fit(logs=True) streamed both hosts' output; the reader got the channel, the script its hyperparameters.
    assert "HOST algo-1 GROUP reader ARGS ['--epochs', '3'] CHANNEL ['a.csv', 'b.csv']" in out, context
    assert "HOST algo-2 GROUP trainer ARGS ['--epochs', '3'] CHANNEL None" in out, context
    trained = results["trained"]
    assert pool in kubectl("get", "mljobs", "-n", namespace, "-o", "yaml", check=True).stdout
    assert trained["model_data"] == f"s3://{BUCKET}/out/{trained['job']}/output/model.tar.gz"
    blob = client(s3_endpoint).get_object(Bucket=BUCKET, Key=trained["model_data"].split("/", 3)[3])["Body"].read()
    assert json.loads(tar_members(blob)["model.json"]) == {"trained_by": "algo-2", "epochs": 3}

    failed = results["failed"]
    assert failed["raised"] == "UnexpectedStatusException", context
    assert "Failed. Reason:" in failed["message"] and "ValueError: label column 'y' is missing" in failed["message"]

    assert results["stopped"]["status"] == "Stopped", context
