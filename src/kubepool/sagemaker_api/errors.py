"""AWS-shaped errors: botocore reads `__type` (and the body's message) into ClientError's Error.Code/Message."""

from __future__ import annotations

import json
from typing import Any

JSON_CONTENT_TYPE = "application/x-amz-json-1.1"


class AwsError(Exception):
    """An error the client sees as botocore's ClientError with `code`; HTTP 400 unless told otherwise."""

    def __init__(self, code: str, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status

    def body(self) -> dict[str, Any]:
        return {"__type": self.code, "message": self.message}

    def body_bytes(self) -> bytes:
        return json.dumps(self.body()).encode()


def validation(message: str) -> AwsError:
    return AwsError("ValidationException", message)


def not_found(message: str) -> AwsError:
    return AwsError("ResourceNotFound", message)


def in_use(message: str) -> AwsError:
    return AwsError("ResourceInUse", message)


def unrecognized_client(message: str = "The security token included in the request is invalid.") -> AwsError:
    return AwsError("UnrecognizedClientException", message)


def invalid_signature(message: str = "The request signature we calculated does not match the signature you "
                      "provided.") -> AwsError:
    return AwsError("InvalidSignatureException", message)


def access_denied(message: str) -> AwsError:
    return AwsError("AccessDeniedException", message)


def serialization(message: str) -> AwsError:
    return AwsError("SerializationException", message)


def unknown_operation(target: str) -> AwsError:
    return AwsError("UnknownOperationException", f"unknown operation {target!r}")


def too_large(limit: int) -> AwsError:
    return AwsError("ValidationException", f"request body larger than {limit} bytes", status=413)
