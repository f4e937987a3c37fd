"""Everything of kubepool that reaches into lightkube beyond its public API, in one place (lightkube is pinned
below 2; tests/operator/unit/test_kube_lightkube_fence.py runs lightkube's real client through it, so a
lightkube upgrade that moves it fails a test instead of the SDK):

- `watch_window`: one watch request that the server closes after `seconds`: lightkube's public `watch`
  reconnects forever without yielding, so a caller's deadline could not be kept with it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx2
from lightkube import Client
from lightkube.core.generic_client import WatchDriver


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
