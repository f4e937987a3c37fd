"""The SageMaker-API access key format, shared by the server and the CLI (one place).

Every key is one entry of a single Secret in the server's own namespace (the release's), named
keys_secret_name(the server's Service name), `<release>-sagemaker-api-keys`, and labelled KEY_LABEL. The entry's
key is the access key id; its value a JSON object: `secretAccessKey`, `namespace` (required: without it the key
grants nothing), the namespace the key is bound to, and the optional `serviceAccount` of that namespace whose RBAC
the server acts with for this key's requests, else that namespace's `default` ServiceAccount. One Secret, so the
server's Role names it (`resourceNames`: RBAC takes no name prefix) and the server may read no other Secret of its
namespace. Keys live with the server, not with the tenants: a tenant who may create Secrets in their namespace
could otherwise mint a key naming any ServiceAccount there, and the server would need to read Secrets
cluster-wide.
"""

from __future__ import annotations

import base64
import binascii
import json
import secrets
import string
from dataclasses import dataclass
from typing import Any

KEY_LABEL = "kubepool.dev/sagemaker-access-key"
DEFAULT_SERVICE_ACCOUNT = "default"
SECRET_ACCESS_KEY_FIELD = "secretAccessKey"
NAMESPACE_FIELD = "namespace"
SERVICE_ACCOUNT_FIELD = "serviceAccount"

_ID_ALPHABET = string.ascii_uppercase + string.digits
_SECRET_ALPHABET = string.ascii_letters + string.digits + "+/"


def new_key() -> tuple[str, str]:
    """A fresh (access key id, secret access key): 20 uppercase alnum chars starting KP, and 40 chars."""
    key_id = "KP" + "".join(secrets.choice(_ID_ALPHABET) for _ in range(18))
    secret = "".join(secrets.choice(_SECRET_ALPHABET) for _ in range(40))
    return key_id, secret


def valid_key_id(key_id: str) -> bool:
    return len(key_id) == 20 and key_id.startswith("KP") and all(c in _ID_ALPHABET for c in key_id)


def keys_secret_name(service: str) -> str:
    """The keys Secret of the server whose Service is `service` (the chart's `<release>-sagemaker-api`)."""
    return f"{service}-keys"


DEFAULT_KEYS_SECRET = keys_secret_name("kubepool-sagemaker-api")  # the default release's


def key_entry(key_id: str, secret: str, namespace: str, service_account: str | None = None) -> dict[str, str]:
    """The keys Secret's `data` entry of one access key bound to `namespace` (and `service_account` there)."""
    if not valid_key_id(key_id):
        raise ValueError(f"access key id {key_id!r}: 20 uppercase letters/digits starting KP")
    if len(secret) != 40:
        raise ValueError("secret access key: 40 characters")
    if not namespace:
        raise ValueError("an access key is bound to a namespace")
    value = {SECRET_ACCESS_KEY_FIELD: secret, NAMESPACE_FIELD: namespace}
    if service_account:
        value[SERVICE_ACCOUNT_FIELD] = service_account
    return {key_id: base64.b64encode(json.dumps(value).encode()).decode()}


def keys_secret(server_namespace: str, name: str, data: dict[str, str] | None = None) -> dict[str, Any]:
    """The keys Secret's body, with these entries (key_entry's)."""
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": name, "namespace": server_namespace, "labels": {KEY_LABEL: "true"}},
            "data": dict(data or {})}


@dataclass(frozen=True)
class AccessKey:
    """A key as the server reads it back: who it is, where it may act, as whom."""
    key_id: str
    secret: str
    namespace: str
    service_account: str


def parse_key(obj: dict[str, Any], key_id: str) -> AccessKey | None:
    """The key `key_id` of the keys Secret `obj`; None when the Secret is not labelled as the keys Secret or the
    entry is missing or malformed (it then grants nothing): no bound namespace, a secret of another length."""
    meta = obj.get("metadata") or {}
    if (meta.get("labels") or {}).get(KEY_LABEL) != "true" or not valid_key_id(key_id):
        return None
    raw = (obj.get("data") or {}).get(key_id)
    try:
        value = json.loads(base64.b64decode(raw, validate=True)) if isinstance(raw, str) else None
    except (ValueError, binascii.Error):
        return None
    if not isinstance(value, dict):
        return None
    secret, namespace, account = (value.get(f) for f in (SECRET_ACCESS_KEY_FIELD, NAMESPACE_FIELD, SERVICE_ACCOUNT_FIELD))
    if not isinstance(secret, str) or len(secret) != 40:
        return None
    if not isinstance(namespace, str) or not namespace:
        return None
    return AccessKey(key_id, secret, namespace, account if isinstance(account, str) and account else DEFAULT_SERVICE_ACCOUNT)
