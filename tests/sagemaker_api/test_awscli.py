"""The `aws` CLI from PyPI (pinned, in the SageMaker clients' venv: support.sagemaker_clients), unchanged, against the
SageMaker API server with only the endpoint variables and a key: `aws sagemaker list-training-jobs` and
`describe-training-job` print what boto3 gets from the same server (the two clients are the oracle of each other),
and a missing job is the CLI's own ResourceNotFound error."""

from __future__ import annotations

import datetime
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from support.sagemaker_api import REGION
from support.sagemaker_clients import clients_env, clients_venv

pytestmark = [pytest.mark.cluster, pytest.mark.api]  # no operator, no pod: make test-fast


def same(cli: Any, sdk: Any, where: str = "") -> None:
    """The CLI's JSON equals boto3's answer; timestamps (boto3's datetimes, the CLI's epoch seconds or ISO text)
    compared as instants."""
    if isinstance(sdk, datetime.datetime):
        got = cli if isinstance(cli, (int, float)) else datetime.datetime.fromisoformat(cli).timestamp()
        assert abs(got - sdk.timestamp()) < 0.001, where
    elif isinstance(sdk, dict):
        assert set(cli) == set(sdk), where
        for k in sdk:
            same(cli[k], sdk[k], f"{where}.{k}")
    elif isinstance(sdk, list):
        assert len(cli) == len(sdk), where
        for i, (c, s) in enumerate(zip(cli, sdk, strict=True)):
            same(c, s, f"{where}[{i}]")
    else:
        assert cli == sdk, where


def test_aws_cli_lists_and_describes_training_jobs(sagemaker_api: Any, sagemaker_key: Any, namespace: str,
                                                   compute_pool: Any, tmp_path: Path) -> None:
    venv = clients_venv()
    pool = compute_pool("cpu", max_nodes=1)
    key = sagemaker_key(namespace)
    sm = sagemaker_api.client("sagemaker", key)
    sm.create_training_job(
        TrainingJobName="from-the-cli", RoleArn="arn:aws:iam::123456789012:role/default",
        AlgorithmSpecification={"TrainingImage": "kubepool-runtime", "TrainingInputMode": "File",
                                "ContainerEntrypoint": ["python", "-c", "print('hi')"]},
        ResourceConfig={"InstanceType": pool, "InstanceCount": 1, "VolumeSizeInGB": 1},
        OutputDataConfig={"S3OutputPath": "s3://bucket/out"}, StoppingCondition={"MaxRuntimeInSeconds": 60},
        HyperParameters={"epochs": "2"})
    env = clients_env(tmp_path, sagemaker_api.endpoint, None, key.key_id, key.secret, REGION)

    def aws(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(venv / "bin" / "aws"), "sagemaker", *args, "--output", "json"], env=env,
                              capture_output=True, text=True, timeout=120)

    listed = aws("list-training-jobs")
    assert listed.returncode == 0, listed.stderr
    want = {k: v for k, v in sm.list_training_jobs().items() if k != "ResponseMetadata"}
    same(json.loads(listed.stdout), want)
    assert [j["TrainingJobName"] for j in want["TrainingJobSummaries"]] == ["from-the-cli"]

    described = aws("describe-training-job", "--training-job-name", "from-the-cli")
    assert described.returncode == 0, described.stderr
    desc = {k: v for k, v in sm.describe_training_job(TrainingJobName="from-the-cli").items() if k != "ResponseMetadata"}
    got = json.loads(described.stdout)
    # The job may move on between the two calls (its pods start): what the CLI printed is a state boto3 saw too.
    moving = ("TrainingJobStatus", "SecondaryStatus", "SecondaryStatusTransitions", "LastModifiedTime",
              "TrainingStartTime")
    same({k: v for k, v in got.items() if k not in moving}, {k: v for k, v in desc.items() if k not in moving})
    assert (got["HyperParameters"], got["ResourceConfig"]["InstanceType"]) == ({"epochs": "2"}, pool)

    missing = aws("describe-training-job", "--training-job-name", "no-such-job")
    assert missing.returncode != 0
    assert "(ResourceNotFound)" in missing.stderr and "DescribeTrainingJob" in missing.stderr, missing.stderr
