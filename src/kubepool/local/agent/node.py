"""The Node object of a local node: registration (`node_object`, pure), its Lease in kube-node-lease and the
periodic status heartbeat (`NodeKeeper`). A deleted Node is registered again on the next beat."""

from __future__ import annotations

import asyncio
import datetime
import logging
import platform
from typing import Any, cast

from lightkube import ApiError, AsyncClient
from lightkube.core.client import PatchType
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Node

from kubepool import __version__
from kubepool.local.agent.config import KUBELET_PORT, NodeConfig

Obj = dict[str, Any]
log = logging.getLogger(__name__)
LEASE_NS = "kube-node-lease"
LEASE_SECONDS = 40
BEAT_S = 10.0
KUBELET_VERSION = "v1.36.3-kubepool"


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def node_status(node: NodeConfig, now: str, since: str) -> Obj:
    ok = [("MemoryPressure", "KubeletHasSufficientMemory"), ("DiskPressure", "KubeletHasNoDiskPressure"),
          ("PIDPressure", "KubeletHasSufficientPID")]  # fmt: skip
    conds = [{"type": t, "status": "False", "reason": r, "message": "kubepool local node", "lastHeartbeatTime": now,
              "lastTransitionTime": since} for t, r in ok]  # fmt: skip
    conds.append({"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubepool agent is posting ready status",
                  "lastHeartbeatTime": now, "lastTransitionTime": since})  # fmt: skip
    return {
        "capacity": dict(node.capacity),
        "allocatable": dict(node.capacity),
        "conditions": conds,
        "addresses": [{"type": "InternalIP", "address": node.ip}, {"type": "Hostname", "address": node.name}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": KUBELET_PORT}},
        "nodeInfo": {
            "machineID": node.name,
            "systemUUID": node.name,
            "bootID": since,
            "kernelVersion": platform.release(),
            "osImage": f"kubepool local node {__version__}",
            "containerRuntimeVersion": "kubepool://process",
            "kubeletVersion": KUBELET_VERSION,
            "kubeProxyVersion": "",
            "operatingSystem": "linux",
            "architecture": {"x86_64": "amd64", "aarch64": "arm64"}.get(
                platform.machine(), platform.machine()
            ),
        },  # fmt: skip
    }


def node_object(node: NodeConfig, now: str) -> Obj:
    labels = {"kubernetes.io/hostname": node.name, "kubernetes.io/os": "linux",
              "kubernetes.io/arch": node_status(node, now, now)["nodeInfo"]["architecture"], **node.labels}  # fmt: skip
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": node.name, "labels": labels, "annotations": {"kubepool.dev/local-node": "true"}},
        "spec": {"podCIDR": node.pod_cidr, "podCIDRs": [node.pod_cidr], "taints": list(node.taints)},
        "status": node_status(node, now, now),
    }


def _micro(now: datetime.datetime) -> str:
    return now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class NodeKeeper:
    def __init__(self, client: AsyncClient, node: NodeConfig) -> None:
        self.client = client
        self.node = node
        self.since = _now()
        self.registered = asyncio.Event()

    async def run(self) -> None:
        while True:
            try:
                await self.beat()
                self.registered.set()
            except ApiError as e:
                log.warning("node %s: heartbeat: %s", self.node.name, e.status.message)
            except Exception as e:  # noqa: BLE001 - the apiserver may be restarting; try again next beat
                log.warning("node %s: heartbeat: %r", self.node.name, e)
            await asyncio.sleep(BEAT_S)

    async def beat(self) -> None:
        uid = await self._ensure_node()
        await self.client.patch(Node.Status, self.node.name, {"status": node_status(self.node, _now(), self.since)},
                                patch_type=PatchType.MERGE)  # fmt: skip
        await self._renew_lease(uid)

    async def _ensure_node(self) -> str:
        try:
            existing = await self.client.get(Node, self.node.name)
        except ApiError as e:
            if e.status.code != 404:
                raise
            created = await self.client.create(cast(Node, Node.from_dict(node_object(self.node, _now()))))
            log.info("node %s registered", self.node.name)
            assert created.metadata is not None
            return str(created.metadata.uid)
        assert existing.metadata is not None
        if not self.registered.is_set():
            # A Node left by an earlier agent: bring labels and taints in line with nodes.yaml.
            wanted = node_object(self.node, _now())
            patch = {
                "metadata": {"labels": wanted["metadata"]["labels"]},
                "spec": {"taints": wanted["spec"]["taints"]},
            }
            await self.client.patch(Node, self.node.name, patch, patch_type=PatchType.MERGE)
        return str(existing.metadata.uid)

    async def _renew_lease(self, node_uid: str) -> None:
        now = datetime.datetime.now(datetime.UTC)
        spec = {
            "holderIdentity": self.node.name,
            "leaseDurationSeconds": LEASE_SECONDS,
            "renewTime": _micro(now),
        }
        try:
            await self.client.patch(
                Lease, self.node.name, {"spec": spec}, namespace=LEASE_NS, patch_type=PatchType.MERGE
            )
        except ApiError as e:
            if e.status.code != 404:
                raise
            owner = {"apiVersion": "v1", "kind": "Node", "name": self.node.name, "uid": node_uid}
            lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                     "metadata": {"name": self.node.name, "namespace": LEASE_NS, "ownerReferences": [owner]},
                     "spec": spec}  # fmt: skip
            await self.client.create(cast(Lease, Lease.from_dict(lease)))
