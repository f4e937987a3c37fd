"""AWS Signature Version 4 verification of a request (the signer is botocore's; this is the checking side).

Pure: the caller gives the method, path, query, headers and body as received and a lookup of secrets by access
key id; the answer is the verified key id, region and service, or the AWS error a client expects.
"""

from __future__ import annotations

import hashlib
import hmac
import posixpath
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from urllib.parse import quote

from kubepool.sagemaker_api import errors

ALGORITHM = "AWS4-HMAC-SHA256"
MAX_SKEW = timedelta(minutes=15)  # AWS's: an older or later signature is refused (replay window)
_AUTH = re.compile(r"^AWS4-HMAC-SHA256 Credential=(?P<cred>[^,\s]+),\s*SignedHeaders=(?P<signed>[^,\s]+),\s*"
                   r"Signature=(?P<sig>[0-9a-f]{64})$")


@dataclass(frozen=True)
class Verified:
    key_id: str
    region: str
    service: str


def _hmac(key: bytes, msg: str) -> bytes:
    return hmac.new(key, msg.encode(), hashlib.sha256).digest()


def signing_key(secret: str, date: str, region: str, service: str) -> bytes:
    return _hmac(_hmac(_hmac(_hmac(f"AWS4{secret}".encode(), date), region), service), "aws4_request")


def _canonical_uri(raw_path: str) -> str:
    """The path as sent (still percent-encoded), normalized and encoded once more: botocore's rule for every
    service but S3."""
    normalized = posixpath.normpath(raw_path) if raw_path not in ("", "/") else "/"
    if raw_path.endswith("/") and normalized != "/":
        normalized += "/"
    return quote(normalized.replace("//", "/"), safe="/~")


def _canonical_query(raw_query: str) -> str:
    """The query as sent, its pairs sorted (botocore signs a URL's query string as it stands)."""
    pairs = sorted(pair.partition("=")[::2] for pair in raw_query.split("&")) if raw_query else []
    return "&".join(f"{k}={v}" for k, v in pairs)


def canonical_request(method: str, raw_path: str, raw_query: str, headers: Mapping[str, str],
                      signed: Sequence[str], body: bytes) -> str:
    """The body's own hash, never a declared X-Amz-Content-SHA256 (an unsigned or mismatched payload fails)."""
    lower = {k.lower(): v for k, v in headers.items()}
    lines = "".join(f"{h}:{' '.join(lower.get(h, '').split())}\n" for h in signed)
    return "\n".join([method.upper(), _canonical_uri(raw_path), _canonical_query(raw_query), lines,
                      ";".join(signed), hashlib.sha256(body).hexdigest()])


def verify(method: str, raw_path: str, raw_query: str, headers: Mapping[str, str], body: bytes,
           secret_of: Callable[[str], str | None], services: Sequence[str], now: datetime | None = None) -> Verified:
    """The request's signer, once its signature checks out.

    Raises:
        AwsError: MissingAuthenticationTokenException (unsigned), InvalidSignatureException (malformed, stale,
            for another service, or a signature that does not match), UnrecognizedClientException (unknown key).
    """
    lower = {k.lower(): v for k, v in headers.items()}
    auth = lower.get("authorization")
    if not auth:
        raise errors.AwsError("MissingAuthenticationTokenException", "Missing Authentication Token")
    m = _AUTH.match(auth.strip())
    if not m:
        raise errors.invalid_signature("Authorization header is not an AWS4-HMAC-SHA256 signature")
    parts = m.group("cred").split("/")
    if len(parts) != 5 or parts[4] != "aws4_request":
        raise errors.invalid_signature("Credential should be scoped to a valid region, service and date")
    key_id, date, region, service, _ = parts
    if service not in services:
        raise errors.invalid_signature(f"Credential should be scoped to the correct service: one of {list(services)}")
    signed = m.group("signed").split(";")
    if "host" not in signed or signed != sorted(signed) or "x-amz-date" not in signed:
        raise errors.invalid_signature("SignedHeaders must list host and x-amz-date, in order")
    amz_date = lower.get("x-amz-date", "")
    try:
        when = datetime.strptime(amz_date, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
    except ValueError:
        raise errors.invalid_signature("X-Amz-Date is not an ISO 8601 basic date") from None
    if amz_date[:8] != date:
        raise errors.invalid_signature("Credential date does not match X-Amz-Date")
    if abs((now or datetime.now(UTC)) - when) > MAX_SKEW:
        raise errors.invalid_signature("Signature expired: the request's date is more than 15 minutes away")
    secret = secret_of(key_id)
    if secret is None:
        raise errors.unrecognized_client()
    creq = canonical_request(method, raw_path, raw_query, headers, signed, body)
    scope = f"{date}/{region}/{service}/aws4_request"
    to_sign = "\n".join([ALGORITHM, amz_date, scope, hashlib.sha256(creq.encode()).hexdigest()])
    expected = hmac.new(signing_key(secret, date, region, service), to_sign.encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, m.group("sig")):
        raise errors.invalid_signature()
    return Verified(key_id, region, service)
