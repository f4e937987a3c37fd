"""The server's reading of access keys (kubeaccess.KubeAccess.key) over a stand-in HTTP client: two Secrets
claiming one key id grant nothing, malformed ones are skipped, and requests act as the key's ServiceAccount."""

from __future__ import annotations

import json
from typing import Any

from kubepool.kube.transport import Response
from kubepool.sagemaker_api.keys import key_secret, new_key
from kubepool.sagemaker_api.kubeaccess import KubeAccess, impersonation


class Http:
    def __init__(self, secrets: list[dict[str, Any]]) -> None:
        self.secrets = secrets
        self.calls: list[tuple[str, dict[str, str]]] = []

    async def request(self, method: str, url: str, *, content: bytes | None = None, params: Any = None,
                      headers: Any = None) -> Response:
        self.calls.append((url, dict(params or {})))
        namespace = url.split("/")[4]
        items = [x for x in self.secrets if x["metadata"]["namespace"] == namespace]
        return Response(200, json.dumps({"items": items}).encode(), {})

    async def close(self) -> None: ...


async def test_two_secrets_claiming_one_id_grant_nothing() -> None:
    key_id, secret = new_key()
    other_id, other_secret = new_key()
    broken = key_secret("c", "broken", *new_key())
    broken["data"]["secretAccessKey"] = "eA=="
    http = Http([key_secret("a", "k", key_id, secret), key_secret("b", "k", key_id, secret),
                 key_secret("c", "k2", other_id, other_secret, "trainer"), broken])
    kube = KubeAccess(http, ("a", "b", "c"))  # type: ignore[arg-type]
    assert await kube.key(key_id) is None
    found = await kube.key(other_id)
    assert found is not None and (found.namespace, found.service_account) == ("c", "trainer")
    assert impersonation(found) == {"Impersonate-User": "system:serviceaccount:c:trainer"}
    assert [u for u, _ in http.calls] == [f"/api/v1/namespaces/{n}/secrets" for n in "abc"]
    assert all(p == {"labelSelector": "kubepool.dev/sagemaker-access-key=true"} for _, p in http.calls)
