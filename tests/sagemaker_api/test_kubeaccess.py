"""The server's reading of access keys (kubeaccess.KubeAccess.key) over a stand-in HTTP client: one `get` of its
keys Secret, by name, in the server's own namespace and nowhere else; a Secret elsewhere or of another name, or an
entry without its bound namespace, grants nothing, and requests act as the key's ServiceAccount."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from kubepool.kube.transport import Response
from kubepool.sagemaker_api import kubeaccess
from kubepool.sagemaker_api.keys import DEFAULT_KEYS_SECRET, key_entry, keys_secret, new_key
from kubepool.sagemaker_api.kubeaccess import KubeAccess, impersonation

OWN = "kubepool-system"


class Http:
    """The API server's Secrets by (namespace, name): a get answers what is there, anything else is refused."""

    def __init__(self, secrets: list[dict[str, Any]]) -> None:
        self.secrets = {(s["metadata"]["namespace"], s["metadata"]["name"]): s for s in secrets}
        self.calls: list[tuple[str, str]] = []

    async def request(self, method: str, url: str, *, content: bytes | None = None, params: Any = None,
                      headers: Any = None) -> Response:
        self.calls.append((method, url))
        parts = url.split("/")  # /api/v1/namespaces/<ns>/secrets/<name>
        if method != "GET" or len(parts) != 7 or parts[5] != "secrets":
            return Response(403, json.dumps({"reason": "Forbidden", "message": "no"}).encode(), {})
        found = self.secrets.get((parts[4], parts[6]))
        if found is None:
            return Response(404, json.dumps({"reason": "NotFound", "message": "not found"}).encode(), {})
        return Response(200, json.dumps(found).encode(), {})

    async def close(self) -> None: ...


async def test_a_key_is_read_by_name_in_the_servers_namespace_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kubeaccess, "MIN_REFRESH_SECONDS", 0.0)
    mine, tenants, other, unbound = new_key(), new_key(), new_key(), new_key()
    loose = key_entry(*unbound, "c")
    loose[unbound[0]] = base64.b64encode(json.dumps({"secretAccessKey": unbound[1]}).encode()).decode()
    # The tenant's Secret is well formed, labelled and named as the keys Secret, but in the namespace it names;
    # another Secret of the server's namespace holds a well-formed key too: neither is ever read.
    http = Http([keys_secret(OWN, "keys", {**key_entry(*mine, "c", "trainer"), **loose}),
                 keys_secret("c", "keys", key_entry(*tenants, "c")),
                 keys_secret(OWN, DEFAULT_KEYS_SECRET, key_entry(*other, "c"))])
    kube = KubeAccess(http, OWN, keys_secret="keys")  # type: ignore[arg-type]
    found = await kube.key(mine[0])
    assert found is not None and (found.namespace, found.service_account) == ("c", "trainer")
    assert impersonation(found) == {"Impersonate-User": "system:serviceaccount:c:trainer"}
    assert await kube.key(tenants[0]) is None
    assert await kube.key(other[0]) is None
    assert await kube.key(unbound[0]) is None
    assert await kube.key("not-a-key-id") is None  # never asked for
    assert http.calls == [("GET", f"/api/v1/namespaces/{OWN}/secrets/keys")] * 4


async def test_a_key_bound_outside_the_served_namespaces_grants_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kubeaccess, "MIN_REFRESH_SECONDS", 0.0)
    a, b = new_key(), new_key()
    kube = KubeAccess(Http([keys_secret(OWN, DEFAULT_KEYS_SECRET, {**key_entry(*a, "team-a"), **key_entry(*b, "team-b")})]),  # type: ignore[arg-type]
                      OWN, ["team-a"])
    assert (await kube.key(a[0])) is not None
    assert await kube.key(b[0]) is None


def test_the_servers_namespace_is_required() -> None:
    with pytest.raises(ValueError, match="required"):
        KubeAccess(Http([]), "")  # type: ignore[arg-type]
