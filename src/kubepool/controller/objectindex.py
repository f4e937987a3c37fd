"""The operator's own index of watched objects: key → the views of the objects filed under it, one per object
(by uid), read as kopf's indexes are. podwatch files pods and placeholders, jobwatch the MLJobs."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, ValuesView
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class ObjectIndex(Mapping[K, ValuesView[V]], Generic[K, V]):
    """key → the views of the objects filed under it, one per object (by uid), as kopf's indexes read. An object
    filed again under another key (its labels changed) moves."""

    def __init__(self) -> None:
        self._by_key: dict[K, dict[str, V]] = {}
        self._key_of: dict[str, K] = {}

    def put(self, uid: str, key: K, value: V) -> bool:
        """File `value`; whether that changed what the index holds (a new object, another key, an unequal value)."""
        old = self._key_of.get(uid)
        if old is not None and old != key:
            self.drop(uid)
        under = self._by_key.setdefault(key, {})
        changed = old != key or under.get(uid) != value
        under[uid] = value
        self._key_of[uid] = key
        return changed

    def drop(self, uid: str) -> None:
        key = self._key_of.pop(uid, None)
        if key is None:
            return
        under = self._by_key.get(key)
        if under is not None:
            under.pop(uid, None)
            if not under:
                del self._by_key[key]

    def __getitem__(self, key: K) -> ValuesView[V]:
        return self._by_key[key].values()

    def __iter__(self) -> Iterator[K]:
        return iter(self._by_key)

    def __len__(self) -> int:
        return len(self._by_key)
