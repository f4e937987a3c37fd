"""A heterogeneous training job through boto3 alone, against the real server, operator and local cluster with an
S3 test server: two instance groups, a ShardedByS3Key channel for one of them, output and checkpoint config;
DescribeTrainingJob reaches Completed and ModelArtifacts names a real model.tar.gz holding what the script saved;
every host's log is a CloudWatch stream read as the SageMaker SDK's tailer reads it; StopTrainingJob stops a job.
One job, shared by the tests of the module."""

from __future__ import annotations

import io
import json
import tarfile
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from kubepool import naming
from support.operator_cluster import Operator, wait_for
from support.s3 import CREDENTIALS, client, s3_server
from support.sagemaker_api import REGION, Key, SageMakerApi, make_key, start_sagemaker_api

pytestmark = [pytest.mark.cluster]
JOB_TIMEOUT_S = 240.0
SHARDS = [f"part-{i}.csv" for i in range(4)]
DATA, MODELS = "sm-job-data", "sm-job-models"
TRAIN = """\
import json, os
host, group = os.environ["SM_CURRENT_HOST"], os.environ["SM_CURRENT_INSTANCE_GROUP"]
seen = sorted(os.listdir(os.environ["SM_CHANNEL_TRAIN"])) if "SM_CHANNEL_TRAIN" in os.environ else None
with open(os.path.join("/opt/ml/checkpoints", host + ".txt"), "w") as f:
    f.write("epoch 1")
if group == "trainer":
    with open(os.path.join(os.environ["SM_MODEL_DIR"], host + ".json"), "w") as f:
        json.dump({"host": host, "shards": seen, "lr": os.environ["SM_HP_LR"], "env": os.environ["RUN_MODE"]}, f)
print("trained on", host, group, seen, flush=True)
"""


@pytest.fixture(scope="module")
def setup(cluster: Any, crds: None, kubectl: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A namespace with the operator, a ComputePool of ml.c5.xlarge's family, an S3 server with the channel's
    objects, the server pointed at it and a key."""
    tmp = tmp_path_factory.mktemp("sagemaker-job")
    # The reader group names its pool; the trainers' ml.r5.2xlarge runs on the pool of its family, HIGHMEM_X64_S,
    # which no other cluster test makes (pools are cluster-wide: another family's could come first by name).
    pool, highmem = f"sm-cpu-{uuid.uuid4().hex[:6]}", f"sm-highmem-{uuid.uuid4().hex[:6]}"
    kubectl("apply", "-f", "-", check=True, input=yaml.safe_dump_all([{
        "apiVersion": "kubepool.dev/v1alpha1", "kind": "ComputePool", "metadata": {"name": name},
        "spec": {"instanceFamily": family, "minNodes": 0, "maxNodes": 2, "resources": {"cpu": "500m", "memory": "1Gi"},
                 "nodeSelector": {"kubepool.dev/node-pool": "cpu"}}}
        for name, family in ((pool, "CPU_X64_S"), (highmem, "HIGHMEM_X64_S"))]))
    with kubectl.fresh_namespace(f"t-sagemaker-api-{uuid.uuid4().hex[:6]}") as ns, \
            s3_server("127.0.5.42") as endpoint:
        s3 = client(endpoint)
        # moto keeps one store per process, and a worker runs other modules first: buckets of this module's own
        for bucket in (DATA, MODELS):
            s3.create_bucket(Bucket=bucket)
        for name in SHARDS:
            s3.put_object(Bucket=DATA, Key=f"train/{name}", Body=b"x,y\n1,2\n")
        creds = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s3-keys",
                 "labels": {naming.LABEL_CREDENTIALS: "true"}}, "stringData": CREDENTIALS}
        kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump(creds), check=True)
        op = Operator(cluster.kubeconfig, ns, tmp / "operator.log")
        op.start()
        try:
            with start_sagemaker_api(cluster.kubeconfig, tmp / "server.log", "--s3-endpoint-url", endpoint,
                                     "--s3-credentials-secret", "s3-keys") as api:
                yield {"ns": ns, "api": api, "key": make_key(kubectl, ns), "s3": s3, "op": op, "pool": pool,
                       "highmem": highmem}
        finally:
            op.stop()
            kubectl("delete", "computepool", pool, highmem, "--wait=false")


def _request(name: str, pool: str, **over: Any) -> dict[str, Any]:
    return {
        "TrainingJobName": name, "RoleArn": "arn:aws:iam::111122223333:role/default",
        "AlgorithmSpecification": {"TrainingImage": "local", "TrainingInputMode": "File",
                                   "ContainerEntrypoint": ["python", "-c", TRAIN]},
        "HyperParameters": {"lr": "0.1"}, "Environment": {"RUN_MODE": "test"},
        "ResourceConfig": {"VolumeSizeInGB": 30, "InstanceGroups": [
            {"InstanceGroupName": "reader", "InstanceType": pool, "InstanceCount": 1},
            {"InstanceGroupName": "trainer", "InstanceType": "ml.r5.2xlarge", "InstanceCount": 2}]},
        "InputDataConfig": [{"ChannelName": "train", "DataSource": {"S3DataSource": {
            "S3DataType": "S3Prefix", "S3Uri": f"s3://{DATA}/train/", "S3DataDistributionType": "ShardedByS3Key",
            "InstanceGroupNames": ["trainer"]}}}],
        "OutputDataConfig": {"S3OutputPath": f"s3://{MODELS}/runs"},
        "CheckpointConfig": {"S3Uri": f"s3://{MODELS}/ckpt/{name}"},
        "StoppingCondition": {"MaxRuntimeInSeconds": 200},
        "Tags": [{"Key": "team", "Value": "ml"}],
        **over,
    }


def _wait_status(sm: Any, name: str, statuses: set[str], op: Operator, api: SageMakerApi) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        d: dict[str, Any] = sm.describe_training_job(TrainingJobName=name)
        return d if d["TrainingJobStatus"] in statuses else None
    try:
        out: dict[str, Any] = wait_for(done, JOB_TIMEOUT_S, f"training job {name} in {statuses}")
        return out
    except AssertionError:
        print(op.logs()[-4000:], api.logs()[-2000:])
        raise


@pytest.fixture(scope="module")
def completed(setup: dict[str, Any]) -> dict[str, Any]:
    sm = setup["api"].client("sagemaker", setup["key"])
    arn = sm.create_training_job(**_request("hetero", setup["pool"]))["TrainingJobArn"]
    assert arn.endswith(f":training-job/{setup['ns']}/hetero")
    return _wait_status(sm, "hetero", {"Completed", "Failed", "Stopped"}, setup["op"], setup["api"])


def _members(blob: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(blob), mode="r:gz") as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]


def test_completed_with_the_model_the_script_saved(setup: dict[str, Any], completed: dict[str, Any],
                                                   kubectl: Any) -> None:
    d = completed
    spec = kubectl.json("get", "mljob", "hetero", "-n", setup["ns"])["spec"]
    assert [(g["computePool"], g.get("instanceType")) for g in spec["instanceGroups"]] == [
        (setup["pool"], None), (setup["highmem"], "ml.r5.2xlarge")]  # a pool's name, and an ml.* type's pool
    assert (d["TrainingJobStatus"], d["SecondaryStatus"]) == ("Completed", "Completed"), d.get("FailureReason")
    assert [t["Status"] for t in d["SecondaryStatusTransitions"]] == [
        "Starting", "LaunchingMLInstances", "Training", "Completed"]
    assert d["ResourceConfig"] == _request("hetero", setup["pool"])["ResourceConfig"]  # as given
    assert d["TrainingStartTime"] <= d["TrainingEndTime"] and d["TrainingTimeInSeconds"] >= 0
    uri = d["ModelArtifacts"]["S3ModelArtifacts"]
    assert uri == f"s3://{MODELS}/runs/hetero/output/model.tar.gz"
    model = _members(setup["s3"].get_object(Bucket=MODELS, Key=uri[len(f"s3://{MODELS}/"):])["Body"].read())
    saved = {name: json.loads(blob) for name, blob in model.items()}
    assert sorted(saved) == ["algo-2.json", "algo-3.json"]  # the trainer group's hosts
    shards = [s for v in saved.values() for s in v["shards"]]
    assert sorted(shards) == SHARDS and all(len(v["shards"]) == 2 for v in saved.values())  # sharded, disjoint
    assert {(v["lr"], v["env"]) for v in saved.values()} == {("0.1", "test")}
    ckpt = setup["s3"].list_objects_v2(Bucket=MODELS, Prefix="ckpt/hetero/")["Contents"]
    assert {o["Key"].rsplit("/", 1)[1] for o in ckpt} >= {"algo-1.txt", "algo-2.txt", "algo-3.txt"}


def test_list_and_tags(setup: dict[str, Any], completed: dict[str, Any]) -> None:
    sm = setup["api"].client("sagemaker", setup["key"])
    rows = sm.list_training_jobs(StatusEquals="Completed", NameContains="het")["TrainingJobSummaries"]
    assert [r["TrainingJobName"] for r in rows] == ["hetero"]
    assert sm.list_training_jobs(StatusEquals="Failed")["TrainingJobSummaries"] == []
    arn = completed["TrainingJobArn"]
    assert sm.list_tags(ResourceArn=arn)["Tags"] == [{"Key": "team", "Value": "ml"}]
    sm.add_tags(ResourceArn=arn, Tags=[{"Key": "stage", "Value": "dev"}])
    sm.delete_tags(ResourceArn=arn, TagKeys=["team"])
    assert sm.list_tags(ResourceArn=arn)["Tags"] == [{"Key": "stage", "Value": "dev"}]


def test_every_hosts_log_is_a_stream(setup: dict[str, Any], completed: dict[str, Any]) -> None:
    """DescribeLogStreams and GetLogEvents as sagemaker.session._flush_log_streams and sagemaker.logs.log_stream
    call them (the SDK 2.257 tailer): a page per call until one comes back empty."""
    logs = setup["api"].client("logs", setup["key"])
    group = "/aws/sagemaker/TrainingJobs"
    streams = logs.describe_log_streams(logGroupName=group, logStreamNamePrefix="hetero/", orderBy="LogStreamName",
                                        limit=3)["logStreams"]
    names = [s["logStreamName"] for s in streams]
    assert [n.rsplit("-", 1)[0] for n in names] == ["hetero/algo-1", "hetero/algo-2", "hetero/algo-3"]
    for i, name in enumerate(names):
        messages, token = [], None
        while True:
            page = logs.get_log_events(logGroupName=group, logStreamName=name, startTime=0, startFromHead=True,
                                       **({"nextToken": token} if token else {}))
            token = page["nextForwardToken"]
            if not page["events"]:
                break
            messages += [e["message"] for e in page["events"]]
        assert any(m.startswith(f"trained on algo-{i + 1}") for m in messages), messages[-20:]
    hits = logs.filter_log_events(logGroupName=group, logStreamNamePrefix="hetero/",
                                  filterPattern='"trained on" "trainer"')["events"]
    assert sorted(h["logStreamName"] for h in hits) == names[1:], [h["message"] for h in hits]
    with pytest.raises(logs.exceptions.ResourceNotFoundException):
        logs.get_log_events(logGroupName=group, logStreamName="hetero/algo-9-1")
    for call in (lambda g: logs.describe_log_streams(logGroupName=g, logStreamNamePrefix="hetero/"),
                 lambda g: logs.get_log_events(logGroupName=g, logStreamName=names[0]),
                 lambda g: logs.filter_log_events(logGroupName=g)):
        with pytest.raises(logs.exceptions.ResourceNotFoundException):
            call("/aws/sagemaker/ProcessingJobs")  # only the training jobs' group


def test_stop_ends_stopped(setup: dict[str, Any], kubectl: Any) -> None:
    sm = setup["api"].client("sagemaker", setup["key"])
    slow = dict(_request("slow", setup["pool"]), AlgorithmSpecification={
        "TrainingImage": "local", "TrainingInputMode": "File",
        "ContainerEntrypoint": ["python", "-c", "import time; print('up', flush=True); time.sleep(600)"]})
    slow.pop("InputDataConfig")
    sm.create_training_job(**slow)
    _wait_status(sm, "slow", {"InProgress"}, setup["op"], setup["api"])
    wait_for(lambda: sm.describe_training_job(TrainingJobName="slow")["SecondaryStatus"] == "Training",
             JOB_TIMEOUT_S, "the slow job training")
    started = time.monotonic()
    sm.stop_training_job(TrainingJobName="slow")
    assert sm.describe_training_job(TrainingJobName="slow")["TrainingJobStatus"] in ("Stopping", "Stopped")
    d = _wait_status(sm, "slow", {"Stopped", "Completed", "Failed"}, setup["op"], setup["api"])
    assert (d["TrainingJobStatus"], d["SecondaryStatus"]) == ("Stopped", "Stopped"), time.monotonic() - started
    with pytest.raises(sm.exceptions.ClientError) as e:
        sm.stop_training_job(TrainingJobName="slow")
    assert e.value.response["Error"]["Code"] == "ValidationException"


def test_region_in_the_arn(setup: dict[str, Any], completed: dict[str, Any]) -> None:
    assert completed["TrainingJobArn"].startswith(f"arn:aws:sagemaker:{REGION}:")
    assert isinstance(setup["key"], Key) and isinstance(setup["api"], SageMakerApi)
