"""The SageMaker-API access key format, shared by the server and the CLI (one place).

A key is a Secret in the server's own namespace (the release's), named secret_name(key id), labelled KEY_LABEL,
holding `accessKeyId` and `secretAccessKey`. NAMESPACE_ANNOTATION (required: without it the key grants nothing)
binds it to one namespace; the optional SERVICE_ACCOUNT_ANNOTATION names the ServiceAccount of that namespace whose
RBAC the server acts with for this key's requests, else that namespace's `default` ServiceAccount. Keys live with
the server, not with the tenants: a tenant who may create Secrets in their namespace could otherwise mint a key
naming any ServiceAccount there, and the server would need to read Secrets cluster-wide.
"""

from __future__ import annotations

import base64
import secrets
import string
from dataclasses import dataclass
from typing import Any

KEY_LABEL = "kubepool.dev/sagemaker-access-key"
NAMESPACE_ANNOTATION = "kubepool.dev/namespace"
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


def secret_name(key_id: str) -> str:
    """The key Secret's name: the server reads a key by its id with one `get` (it may not list Secrets)."""
    return f"sagemaker-key-{key_id.lower()}"


def key_secret(server_namespace: str, key_id: str, secret: str, namespace: str,
               service_account: str | None = None) -> dict[str, Any]:
    """The Secret body (in the server's namespace) holding one access key bound to `namespace` (and
    `service_account` there, if given)."""
    if not valid_key_id(key_id):
        raise ValueError(f"access key id {key_id!r}: 20 uppercase letters/digits starting KP")
    if len(secret) != 40:
        raise ValueError("secret access key: 40 characters")
    if not namespace:
        raise ValueError("an access key is bound to a namespace")
    annotations = {NAMESPACE_ANNOTATION: namespace}
    if service_account:
        annotations[SERVICE_ACCOUNT_ANNOTATION] = service_account
    metadata: dict[str, Any] = {"name": secret_name(key_id), "namespace": server_namespace,
                                "labels": {KEY_LABEL: "true"}, "annotations": annotations}
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
    """The key a labelled Secret holds; None when the Secret is not a well-formed key (it then grants nothing): no
    label, no bound namespace, or a name that is not its id's (the server looks a key up by that name)."""
    meta = obj.get("metadata") or {}
    if (meta.get("labels") or {}).get(KEY_LABEL) != "true":
        return None
    data = obj.get("data") or {}
    try:
        key_id = base64.b64decode(data[ACCESS_KEY_ID_FIELD]).decode()
        secret = base64.b64decode(data[SECRET_ACCESS_KEY_FIELD]).decode()
    except (KeyError, ValueError, TypeError):
        return None
    if not valid_key_id(key_id) or len(secret) != 40 or meta.get("name") != secret_name(key_id):
        return None
    annotations = meta.get("annotations") or {}
    namespace = annotations.get(NAMESPACE_ANNOTATION)
    if not namespace:
        return None
    return AccessKey(key_id, secret, namespace, annotations.get(SERVICE_ACCOUNT_ANNOTATION) or DEFAULT_SERVICE_ACCOUNT)


def _b64(s: str) -> str:
    return base64.b64encode(s.encode()).decode()
