"""List+watch caches of API objects (pods, services; all namespaces or one, optionally by field selector),
kept as plain dicts, with a callback per change.
A watch that ends or fails (410 Gone, connection loss) relists, and objects gone meanwhile are reported
as DELETED, so the callback sees every deletion."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from lightkube import ALL_NS, AsyncClient

Obj = dict[str, Any]
Key = tuple[str, str]
log = logging.getLogger(__name__)


def key_of(obj: Obj) -> Key:
    meta = obj["metadata"]
    return meta.get("namespace") or "", meta["name"]


class Informer:
    def __init__(
        self,
        client: AsyncClient,
        kind: Any,
        on_event: Callable[[str, Obj], None],
        namespace: str = ALL_NS,
        fields: dict[str, Any] | None = None,
    ) -> None:
        self.client = client
        self.kind = kind
        self.on_event = on_event
        self.namespace = namespace
        self.fields = fields
        self.items: dict[Key, Obj] = {}
        self.synced = asyncio.Event()

    async def run(self) -> None:
        while True:
            try:
                listing = self.client.list(self.kind, namespace=self.namespace, fields=self.fields)
                fresh = {key_of(d): d async for d in _dicts(listing)}
                for key in set(self.items) - set(fresh):
                    self.on_event("DELETED", self.items.pop(key))
                for key, obj in fresh.items():
                    kind = "MODIFIED" if key in self.items else "ADDED"
                    self.items[key] = obj
                    self.on_event(kind, obj)
                self.synced.set()
                async for event, res in self.client.watch(
                    self.kind,
                    namespace=self.namespace,
                    fields=self.fields,
                    resource_version=listing.resourceVersion,
                ):
                    obj = res.to_dict()
                    if event == "DELETED":
                        self.items.pop(key_of(obj), None)
                    else:
                        self.items[key_of(obj)] = obj
                    self.on_event(event, obj)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - any failure of the stream means: relist
                log.info("watch of %s ended (%s); relisting", self.kind.__name__, e)
                await asyncio.sleep(1)


async def _dicts(listing: Any) -> Any:
    async for res in listing:
        yield res.to_dict()
