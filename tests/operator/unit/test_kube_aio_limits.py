"""kubepool.kube.aio.Api bounds its requests in flight, and a burst of creates/applies never takes every slot:
a status write goes through while the burst waits. A stand-in lightkube client, no cluster."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from lightkube import AsyncClient

from kubepool.kube import aio


class SlowClient:
    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.in_flight = self.most = 0
        self.patched: list[str] = []

    async def _call(self) -> None:
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        try:
            await self.release.wait()
        finally:
            self.in_flight -= 1

    async def apply(self, obj: Any, **_: Any) -> None:
        await self._call()

    async def patch(self, res: Any, name: str, body: Any, **_: Any) -> None:
        self.patched.append(name)


def _cm(i: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"c{i}", "namespace": "ns"}}


async def test_a_status_write_passes_a_burst_of_applies() -> None:
    client = SlowClient()
    api = aio.Api(cast(AsyncClient, client))
    burst = [asyncio.ensure_future(api.apply(_cm(i))) for i in range(40)]
    await asyncio.sleep(0.01)
    assert client.most == aio.MAX_BULK_IN_FLIGHT < aio.MAX_IN_FLIGHT
    await asyncio.wait_for(api.patch_job_status("ns", "train", {"phase": "DONE"}), 1)
    assert client.patched == ["train"]
    client.release.set()
    await asyncio.gather(*burst)
    assert client.most == aio.MAX_BULK_IN_FLIGHT
