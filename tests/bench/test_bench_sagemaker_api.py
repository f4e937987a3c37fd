"""bench.sagemaker_api's own parts, without a cluster: a burst releases its calls together and counts the AWS
errors by code, and the floor server answers boto3 as AWS JSON 1.1."""

from __future__ import annotations

import threading

from botocore.exceptions import ClientError

from bench import sagemaker_api


def test_burst_counts_latencies_and_error_codes() -> None:
    inside, most = [0], [0]
    lock = threading.Lock()
    release = threading.Event()

    def call(i: int) -> None:
        with lock:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        release.wait(0.2 if i else 0)  # the calls overlap: all are in flight before any returns
        with lock:
            inside[0] -= 1
        if i % 4 == 0:
            raise ClientError({"Error": {"Code": "ResourceInUse", "Message": "x"}}, "CreateTrainingJob")

    out = sagemaker_api.burst(8, call)
    assert (out["calls"], out["error_count"], out["errors"]) == (8, 2, ["ResourceInUse"])
    assert most[0] >= 4 and out["p50_s"] <= out["p99_s"] <= out["wall_s"]


def test_the_floor_answers_boto3() -> None:
    with sagemaker_api.floor_server() as endpoint:
        sm = sagemaker_api.sagemaker(endpoint, "KP" + "A" * 18, "s" * 40, 4)
        assert sm.list_training_jobs()["ResponseMetadata"]["HTTPStatusCode"] == 200
