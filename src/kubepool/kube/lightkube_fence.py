"""Everything of kubepool that reaches into lightkube beyond its public API, in one place (lightkube is pinned
below 2; tests/operator/unit/test_kube_lightkube_fence.py runs lightkube's real clients through both, so a
lightkube upgrade that moves them fails a test instead of the operator or the SDK):

- `async_http`: the authenticated HTTP client inside lightkube's AsyncClient (its kubeconfig or in-cluster
  credentials, TLS and base URL): kube.aio sends plain JSON through it, without lightkube's model round trip.
- `watch_window`: one watch request that the server closes after `seconds`: lightkube's public `watch`
  reconnects forever without yielding, so a caller's deadline could not be kept with it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx2
from lightkube import AsyncClient, Client
from lightkube.core.generic_client import WatchDriver


def async_http(client: AsyncClient) -> Any:
    """lightkube's own httpx2.AsyncClient: `request(method, url relative to the API server, ...)`."""
    return client._client._client  # AsyncClient → GenericAsyncClient → httpx2


def watch_window(client: Client, res: Any, namespace: str, params: dict[str, Any], seconds: int) -> Iterator[Any]:
    """Watch `res` in `namespace` for at most `seconds`; yields lightkube's decoded events (type, object)."""
    gc = client._client  # GenericSyncClient: the request building and decoding lightkube's own watch uses
    br = gc.prepare_request("list", res=res, namespace=namespace, watch=True,
                            params={**params, "timeoutSeconds": seconds})
    br.timeout = httpx2.Timeout(10.0, read=seconds + 10.0)
    resp = gc.send(gc.build_adapter_request(br), stream=True)
    try:
        if resp.is_error:
            resp.read()
        gc.raise_for_status(resp)
        driver = WatchDriver(br, gc.build_adapter_request)
        for line in resp.iter_lines():
            if line.strip():
                yield driver.process_one_line(line)
    finally:
        resp.close()
