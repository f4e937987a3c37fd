"""What this process wrote, kept so an unchanged pass writes nothing: of each job's children (`ChildMemo`, used by
`jobchildren`) and of each pool (`PoolMemo`, used by `poolreconcile`). Plain data below the passes that fill them,
so `state` holds them without importing the passes."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from kubepool.controller.observed import PodView


@dataclass
class ChildMemo:
    """What this process wrote of each job's children (by job uid), and of each namespace's runtime account."""

    # the (attempt, generation) pairs whose shared children are written (a resize changes the contract)
    ready: dict[str, set[tuple[int, int]]] = field(default_factory=dict)
    rayclusters: dict[str, dict[str, Any]] = field(default_factory=dict)  # the RayCluster last applied
    endpoint_slices: dict[str, dict[str, Any]] = field(default_factory=dict)  # the EndpointSlice last applied
    created_pods: dict[str, dict[str, float]] = field(default_factory=dict)  # pod → monotonic expiry
    # namespace → the write of its shared runtime account (RuntimeAccountPolicy.PER_NAMESPACE), once per process
    runtime_accounts: dict[str, asyncio.Future[None]] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)  # the API server's refusal of the job's last writes
    # job uid → how many of its shared children this process saw deleted (a pass in flight across one must not
    # mark the children written: what it found may be the deleted child)
    deletions: dict[str, int] = field(default_factory=dict)

    def forget(self, uid: str) -> None:
        self.refused.pop(uid, None)
        self.ready.pop(uid, None)
        self.deletions.pop(uid, None)
        self.rayclusters.pop(uid, None)
        self.endpoint_slices.pop(uid, None)
        self.created_pods.pop(uid, None)

    def pods_seen(self, uid: str, pods: list[PodView]) -> None:
        """The watch caught up with these creates."""
        expected = self.created_pods.get(uid)
        if expected:
            for p in pods:
                expected.pop(p.name, None)


@dataclass
class PoolMemo:
    """What this process wrote of each pool (by name) and the timers it holds for them."""

    written: dict[str, dict[str, Any]] = field(default_factory=dict)  # the status last written (wire form)
    written_uid: dict[str, str] = field(default_factory=dict)  # the uid of the pool `written` was written to
    placeholders_created: dict[str, float] = field(default_factory=dict)  # pod name → monotonic expiry
    priority_class_ready: bool = False
    suspend_timers: dict[str, asyncio.TimerHandle] = field(default_factory=dict)  # the auto-suspend wake-up

    def forget(self, name: str) -> None:
        self.written.pop(name, None)
        self.written_uid.pop(name, None)
        self.cancel_auto_suspend(name)  # its placeholders go with it (owner reference)

    def cancel_auto_suspend(self, name: str) -> None:
        handle = self.suspend_timers.pop(name, None)
        if handle is not None:
            handle.cancel()

    def close(self) -> None:
        for handle in self.suspend_timers.values():
            handle.cancel()
