"""The errors as botocore parses them: the code SDKs branch on is the one we mean (botocore is the oracle)."""

import botocore.session
import pytest
from botocore.exceptions import ClientError
from botocore.parsers import create_parser

from kubepool.sagemaker_api import errors


def _client_error(err: errors.AwsError, service: str = "sagemaker", op: str = "DescribeTrainingJob"):
    model = botocore.session.get_session().get_service_model(service)
    op_model = model.operation_model(op)
    parsed = create_parser(model.metadata["protocol"]).parse(
        {"status_code": err.status, "headers": {"content-type": errors.JSON_CONTENT_TYPE},
         "body": err.body_bytes()}, op_model.output_shape)
    return ClientError(parsed, op)


@pytest.mark.parametrize("make,code", [
    (lambda: errors.validation("bad"), "ValidationException"),
    (lambda: errors.not_found("no job"), "ResourceNotFound"),
    (lambda: errors.in_use("exists"), "ResourceInUse"),
    (errors.unrecognized_client, "UnrecognizedClientException"),
    (errors.invalid_signature, "InvalidSignatureException"),
    (lambda: errors.access_denied("no"), "AccessDeniedException"),
])
def test_botocore_reads_our_code_and_message(make, code):
    err = make()
    ce = _client_error(err)
    assert ce.response["Error"]["Code"] == code
    assert ce.response["Error"]["Message"] == err.message
    assert ce.response["ResponseMetadata"]["HTTPStatusCode"] == 400


def test_resource_not_found_is_the_modeled_exception():
    """The SDK's waiters and `except client.exceptions.ResourceNotFound` need botocore's modeled class."""
    client = botocore.session.get_session().create_client(
        "sagemaker", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="y")
    cls = client.exceptions.from_code(errors.not_found("x").code)
    assert cls is client.exceptions.ResourceNotFound
