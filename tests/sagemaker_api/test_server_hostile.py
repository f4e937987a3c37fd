"""Hostile and bad input against the real server and the local cluster's API server: each gets the AWS error
botocore raises as ClientError with the right code, nothing is created and nothing of another namespace leaks."""

from __future__ import annotations

import base64
import json
import urllib.request
from typing import Any

import pytest
import yaml
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

from kubepool.sagemaker_api.keys import key_entry, keys_secret, new_key
from kubepool.sagemaker_api.kubeaccess import KEYS_TTL_SECONDS
from kubepool.sagemaker_api.server import MAX_BODY
from support.operator_cluster import mljob, wait_for
from support.sagemaker_api import KEYS_NAMESPACE, KEYS_SECRET, Key, add_entry, delete_key

pytestmark = [pytest.mark.cluster, pytest.mark.api]  # no operator, no pod: make test-fast
ROLE = "arn:aws:iam::111122223333:role/default"


def _request(name: str, pool: str, **over: Any) -> dict[str, Any]:
    req = {"TrainingJobName": name, "RoleArn": ROLE,
           "AlgorithmSpecification": {"TrainingImage": "img", "TrainingInputMode": "File",
                                      "ContainerEntrypoint": ["python3", "-c", "print(1)"]},
           "ResourceConfig": {"InstanceType": pool, "InstanceCount": 1, "VolumeSizeInGB": 30},
           "OutputDataConfig": {"S3OutputPath": "s3://models/runs"},
           "StoppingCondition": {"MaxRuntimeInSeconds": 60}}
    return {**req, **over}


def _code(call: Any) -> str:
    with pytest.raises(ClientError) as e:
        call()
    return str(e.value.response["Error"]["Code"])


def _jobs(kubectl: Any, namespace: str) -> list[str]:
    return [j["metadata"]["name"] for j in kubectl.json("get", "mljobs", "-n", namespace)["items"]]


def _raw(endpoint: str, key: Any, body: bytes, target: str = "SageMaker.CreateTrainingJob") -> tuple[int, dict[str, Any]]:
    """A request botocore signs but does not serialize (a body no client would send)."""
    req = AWSRequest("POST", endpoint + "/", data=body, headers={
        "X-Amz-Target": target, "Content-Type": "application/x-amz-json-1.1"})
    SigV4Auth(Credentials(key.key_id, key.secret), "sagemaker", "us-west-2").add_auth(req)
    prepared = req.prepare()
    http = urllib.request.Request(prepared.url, data=body, headers=dict(prepared.headers.items()), method="POST")
    try:
        with urllib.request.urlopen(http, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_hostile_input_gets_the_aws_error_and_creates_nothing(sagemaker_api: Any, sagemaker_key: Any, kubectl: Any,
                                                              namespace: str, compute_pool: Any) -> None:
    pool = compute_pool("cpu")
    key = sagemaker_key(namespace)
    sm = sagemaker_api.client("sagemaker", key)
    assert _code(lambda: sm.describe_training_job(TrainingJobName="nope")) == "ResourceNotFound"
    assert _code(lambda: sm.describe_training_job(TrainingJobName="../../../api/v1/namespaces")) \
        == "ValidationException"  # a name goes into an API path
    assert _code(lambda: sm.create_training_job(**_request("a", "ml.inf1.xlarge"))) == "ValidationException"
    assert _code(lambda: sm.create_training_job(**_request("b", pool, OutputDataConfig={
        "S3OutputPath": "s3://models/../escape"}))) == "ValidationException"
    assert _code(lambda: sm.create_training_job(**_request("c", pool, RoleArn=ROLE.replace("default", "admin")))) \
        == "AccessDeniedException"
    status, body = _raw(sagemaker_api.endpoint, key, b'{"TrainingJobName": "d", ')
    assert (status, body["__type"]) == (400, "SerializationException")
    big = json.dumps(_request("e", pool, Environment={"X": "y" * (10 * 1024 * 1024)})).encode()
    status, body = _raw(sagemaker_api.endpoint, key, big)
    assert (status, body["__type"]) == (413, "ValidationException") and len(big) > MAX_BODY
    no_output = _request("g", pool)
    del no_output["OutputDataConfig"]  # required by SageMaker's model (boto3 would not send it): checked against it
    status, body = _raw(sagemaker_api.endpoint, key, json.dumps(no_output).encode())
    assert (status, body["__type"]) == (400, "ValidationException") and "OutputDataConfig" in body["message"]
    forged = sagemaker_api.client("sagemaker", type(key)(key.key_id, "x" * 40, namespace))
    assert _code(lambda: forged.create_training_job(**_request("f", pool))) == "InvalidSignatureException"
    unknown = sagemaker_api.client("sagemaker", type(key)("KP" + "Z" * 18, key.secret, namespace))
    assert _code(lambda: unknown.list_training_jobs()) == "UnrecognizedClientException"
    assert _jobs(kubectl, namespace) == []
    with urllib.request.urlopen(f"{sagemaker_api.endpoint}/metrics", timeout=10) as r:
        metrics = r.read().decode()
    assert 'kubepool_sagemaker_api_requests_total{code="InvalidSignatureException",operation="CreateTrainingJob"}' \
        in metrics, metrics


def test_another_namespaces_key_sees_nothing(sagemaker_api: Any, sagemaker_key: Any, kubectl: Any, namespace: str,
                                             compute_pool: Any) -> None:
    pool = compute_pool("cpu")
    mine = sagemaker_api.client("sagemaker", sagemaker_key(namespace))
    mine.create_training_job(**_request("kept", pool))
    # An MLJob made another way (kubectl) is not a training job of this API.
    plain = mljob("plain", computePool=pool, entrypoint={"command": ["true"]})
    kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(plain), check=True)
    assert _code(lambda: mine.describe_training_job(TrainingJobName="plain")) == "ResourceNotFound"
    # No operator runs here: the job exists only as the MLJob.
    assert _jobs(kubectl, namespace) == ["kept", "plain"]
    assert mine.describe_training_job(TrainingJobName="kept")["TrainingJobStatus"] == "InProgress"
    assert _code(lambda: mine.create_training_job(**_request("kept", pool))) == "ResourceInUse"
    with kubectl.fresh_namespace(f"{namespace[:50]}-other") as other:
        theirs = sagemaker_api.client("sagemaker", sagemaker_key(other))
        assert _code(lambda: theirs.describe_training_job(TrainingJobName="kept")) == "ResourceNotFound"
        assert _code(lambda: theirs.stop_training_job(TrainingJobName="kept")) == "ResourceNotFound"
        arn = mine.describe_training_job(TrainingJobName="kept")["TrainingJobArn"]
        theirs.create_training_job(**_request("kept", pool, Tags=[{"Key": "owner", "Value": "other"}]))
        # My job's ARN names my namespace: never their same-named job, never mine.
        assert _code(lambda: theirs.list_tags(ResourceArn=arn)) == "ResourceNotFound"
        assert _code(lambda: theirs.add_tags(ResourceArn=arn, Tags=[{"Key": "a", "Value": "b"}])) == "ResourceNotFound"
        assert [r["TrainingJobArn"] for r in theirs.list_training_jobs()["TrainingJobSummaries"]] == [
            arn.replace(namespace, other)]
        # A key whose ServiceAccount has no rights: RBAC (through impersonation) refuses, nothing is made.
        bare = sagemaker_api.client("sagemaker", sagemaker_key(other, "nobody", rights=False))
        assert _code(lambda: bare.create_training_job(**_request("x", pool, RoleArn=ROLE.replace("default", "nobody")))) \
            == "AccessDeniedException"
        assert _jobs(kubectl, other) == ["kept"]
    assert [r["TrainingJobName"] for r in mine.list_training_jobs()["TrainingJobSummaries"]] == ["kept"]
    assert mine.list_tags(ResourceArn=arn)["Tags"] == []


def test_a_deleted_key_stops_working(sagemaker_api: Any, sagemaker_key: Any, kubectl: Any, namespace: str) -> None:
    key = sagemaker_key(namespace)
    sm = sagemaker_api.client("sagemaker", key)
    assert sm.list_training_jobs()["TrainingJobSummaries"] == []
    delete_key(kubectl, key)

    def refused() -> bool:
        try:
            sm.list_training_jobs()
        except ClientError as err:
            return bool(err.response["Error"]["Code"] == "UnrecognizedClientException")
        return False
    wait_for(refused, KEYS_TTL_SECONDS + 5, "the deleted key refused")


def test_only_the_servers_namespace_mints_keys(sagemaker_api: Any, sagemaker_key: Any, kubectl: Any,
                                               namespace: str) -> None:
    """A well-formed keys Secret in a tenant's namespace (who may create Secrets there could name any of its
    ServiceAccounts) is never read, nor another Secret of the server's namespace; in the keys Secret a key without
    its bound namespace grants nothing."""
    sagemaker_key(namespace)  # the namespace's default account has the user's rights: only the key is missing
    key_id, secret = new_key()
    tenant = keys_secret(namespace, KEYS_SECRET, key_entry(key_id, secret, namespace))
    kubectl("apply", "-f", "-", input=yaml.safe_dump(tenant), check=True)
    sm = sagemaker_api.client("sagemaker", Key(key_id, secret, namespace))
    assert _code(sm.list_training_jobs) == "UnrecognizedClientException"
    stray_id, stray_secret = new_key()
    stray = keys_secret(KEYS_NAMESPACE, f"stray-{namespace}"[:63], key_entry(stray_id, stray_secret, namespace))
    kubectl("apply", "-f", "-", input=yaml.safe_dump(stray), check=True)
    try:
        sm = sagemaker_api.client("sagemaker", Key(stray_id, stray_secret, namespace))
        assert _code(sm.list_training_jobs) == "UnrecognizedClientException"
    finally:
        kubectl("delete", "secret", "-n", KEYS_NAMESPACE, stray["metadata"]["name"], "--ignore-not-found")
    loose = Key(*new_key(), namespace)
    add_entry(kubectl, KEYS_NAMESPACE, KEYS_SECRET, {loose.key_id: base64.b64encode(
        json.dumps({"secretAccessKey": loose.secret}).encode()).decode()})
    try:
        assert _code(sagemaker_api.client("sagemaker", loose).list_training_jobs) == "UnrecognizedClientException"
    finally:
        delete_key(kubectl, loose)
