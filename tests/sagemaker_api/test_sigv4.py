"""The verifier against botocore's own signer (the oracle): what botocore signs checks out, anything changed
in it does not, with the error code the SDKs expect."""

from datetime import UTC, datetime, timedelta
from urllib.parse import urlsplit

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from kubepool.sagemaker_api import errors, sigv4
from kubepool.sagemaker_api.keys import new_key

KEY, SECRET = new_key()


def _signed(body: bytes = b'{"TrainingJobName": "a"}', url: str = "http://127.0.0.1:8080/",
            service: str = "sagemaker", secret: str = SECRET, key: str = KEY) -> AWSRequest:
    req = AWSRequest("POST", url, data=body, headers={"X-Amz-Target": "SageMaker.DescribeTrainingJob",
                                                    "Content-Type": "application/x-amz-json-1.1"})
    SigV4Auth(Credentials(key, secret), service, "eu-west-1").add_auth(req)
    return req


def _verify(req: AWSRequest, body: bytes | None = None, now: datetime | None = None, **change: str):
    parts = urlsplit(req.url)
    headers = {**dict(req.headers.items()), "Host": parts.netloc, **change}
    return sigv4.verify(req.method, parts.path or "/", parts.query,
                        headers, req.body if body is None else body,
                        lambda k: SECRET if k == KEY else None, ("sagemaker", "logs"), now)


def test_botocore_signature_verifies():
    assert _verify(_signed()) == sigv4.Verified(KEY, "eu-west-1", "sagemaker")


def test_query_and_path_as_botocore_canonicalizes_them():
    req = _signed(url="http://h:1/a%20b/./c/?b=2&a=x%20y&c=", service="logs")
    assert _verify(req).service == "logs"


@pytest.mark.parametrize("tamper,code", [
    (dict(body=b'{"TrainingJobName": "b"}'), "InvalidSignatureException"),
    (dict(change={"X-Amz-Target": "SageMaker.DeleteTrainingJob"}), "InvalidSignatureException"),
    (dict(change={"Authorization": ""}), "MissingAuthenticationTokenException"),
    (dict(change={"Authorization": "Basic Zm9vOmJhcg=="}), "InvalidSignatureException"),
    (dict(late=timedelta(minutes=20)), "InvalidSignatureException"),
])
def test_a_changed_request_is_refused(tamper, code):
    req = _signed()
    # the clock read when the test runs, not when it is collected (a suite can run for half an hour)
    now = datetime.now(UTC) + tamper["late"] if "late" in tamper else None
    with pytest.raises(errors.AwsError) as e:
        _verify(req, tamper.get("body"), now, **tamper.get("change", {}))
    assert e.value.code == code


def test_wrong_secret_and_unknown_key():
    with pytest.raises(errors.AwsError) as e:
        _verify(_signed(secret="x" * 40))
    assert e.value.code == "InvalidSignatureException"
    with pytest.raises(errors.AwsError) as e:
        _verify(_signed(key="KP" + "0" * 18))
    assert e.value.code == "UnrecognizedClientException"


def test_another_service_scope_is_refused():
    with pytest.raises(errors.AwsError) as e:
        _verify(_signed(service="s3"))
    assert e.value.code == "InvalidSignatureException"
