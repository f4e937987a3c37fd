"""The SageMaker-API access key format, shared by the server and the CLI (one place).

A key is a Secret in the namespace it is bound to, labelled KEY_LABEL, holding `accessKeyId` and
`secretAccessKey`; the optional SERVICE_ACCOUNT_ANNOTATION names the ServiceAccount (same namespace) whose RBAC the
server acts with for this key's requests, else the namespace's `default` ServiceAccount.
"""

from __future__ import annotations

import base64
import secrets
import string
from dataclasses import dataclass
from typing import Any

KEY_LABEL = "kubepool.dev/sagemaker-access-key"
SERVICE_ACCOUNT_ANNOTATION = "kubepool.dev/service-account"
DEFAULT_SERVICE_ACCOUNT = "default"
ACCESS_KEY_ID_FIELD = "accessKeyId"
SECRET_ACCESS_KEY_FIELD = "secretAccessKey"

_ID_ALPHABET = string.ascii_uppercase + string.digits
_SECRET_ALPHABET = string.ascii_letters + string.digits + "+/"


def new_key() -> tuple[str, str]:
    """A fresh (access key id, secret access key): 20 uppercase alnum chars starting KP, and 40 chars."""
    key_id = "KP" + "".join(secrets.choice(_ID_ALPHABET) for _ in range(18))
    secret = "".join(secrets.choice(_SECRET_ALPHABET) for _ in range(40))
    return key_id, secret


def valid_key_id(key_id: str) -> bool:
    return len(key_id) == 20 and key_id.startswith("KP") and all(c in _ID_ALPHABET for c in key_id)


def key_secret(namespace: str, name: str, key_id: str, secret: str,
               service_account: str | None = None) -> dict[str, Any]:
    """The Secret body holding one access key bound to `namespace` (and `service_account` if given)."""
    if not valid_key_id(key_id):
        raise ValueError(f"access key id {key_id!r}: 20 uppercase letters/digits starting KP")
    if len(secret) != 40:
        raise ValueError("secret access key: 40 characters")
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "labels": {KEY_LABEL: "true"}}
    if service_account:
        metadata["annotations"] = {SERVICE_ACCOUNT_ANNOTATION: service_account}
    return {
        "apiVersion": "v1", "kind": "Secret", "type": "Opaque", "metadata": metadata,
        "data": {ACCESS_KEY_ID_FIELD: _b64(key_id), SECRET_ACCESS_KEY_FIELD: _b64(secret)},
    }


@dataclass(frozen=True)
class AccessKey:
    """A key as the server reads it back: who it is, where it may act, as whom."""
    key_id: str
    secret: str
    namespace: str
    service_account: str


def parse_key_secret(obj: dict[str, Any]) -> AccessKey | None:
    """The key a labelled Secret holds; None when the Secret is not a well-formed key (it then grants nothing)."""
    meta = obj.get("metadata") or {}
    if (meta.get("labels") or {}).get(KEY_LABEL) != "true":
        return None
    data = obj.get("data") or {}
    try:
        key_id = base64.b64decode(data[ACCESS_KEY_ID_FIELD]).decode()
        secret = base64.b64decode(data[SECRET_ACCESS_KEY_FIELD]).decode()
    except (KeyError, ValueError, TypeError):
        return None
    if not valid_key_id(key_id) or len(secret) != 40 or not meta.get("namespace"):
        return None
    sa = (meta.get("annotations") or {}).get(SERVICE_ACCOUNT_ANNOTATION) or DEFAULT_SERVICE_ACCOUNT
    return AccessKey(key_id, secret, meta["namespace"], sa)


def _b64(s: str) -> str:
    return base64.b64encode(s.encode()).decode()
