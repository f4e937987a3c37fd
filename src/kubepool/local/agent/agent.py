"""Wiring of one local node: the API client, Node keeper, the cache of the node's pods, one `PodWorker` per
pod, per-namespace pod/service caches feeding the pods' /etc/hosts, the kubelet HTTPS server, cleanup of
pods the node no longer has, and an orderly stop on SIGTERM."""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import signal
from collections.abc import Callable
from typing import Any

from lightkube import AsyncClient, KubeConfig
from lightkube.resources.core_v1 import Pod, Service

from kubepool.local.agent import logs_server, runner
from kubepool.local.agent.cache import Informer
from kubepool.local.agent.config import ClusterInfo, Layout, find_node
from kubepool.local.agent.ipam import Ipam
from kubepool.local.agent.node import NodeKeeper
from kubepool.local.agent.pods import NodeContext, PodWorker
from kubepool.local.agent.podspec import hosts_file, peer_of

Obj = dict[str, Any]
log = logging.getLogger(__name__)
FIELD_MANAGER = "kubepool-agent"


class Agent:
    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self.node = find_node(layout.nodes_yaml, layout.node)
        self.cluster = ClusterInfo.load(layout.state_dir)
        self.client = AsyncClient(KubeConfig.from_file(layout.kubeconfig), field_manager=FIELD_MANAGER)
        self.ctx = NodeContext(client=self.client, layout=layout, node=self.node, cluster=self.cluster,
                               ipam=Ipam(self.node.pod_cidr, layout.pods), allocatable=self.node.capacity, hosts=self._hosts)  # fmt: skip
        self.workers: dict[str, PodWorker] = {}
        # This node's pods; the names of other pods come from per-namespace watches (`Names`) that exist
        # only while the node runs pods in that namespace.
        self.pods = Informer(self.client, Pod, self._on_pod, fields={"spec.nodeName": self.node.name})
        self.names: dict[str, Names] = {}

    async def run(self, stop: asyncio.Event) -> None:
        self.layout.pods.mkdir(parents=True, exist_ok=True)
        cert, key = logs_server.ensure_serving_cert(self.layout, self.node.ip, self.node.name)
        tls = logs_server.ssl_context(cert, key, self.layout.ca_cert)
        from kubepool.local.pki import CLIENTS  # as ensure_serving_cert: cryptography only where it is used

        apiserver = CLIENTS["kubelet-client"]  # the identity the apiserver's --kubelet-client-certificate names
        serving = asyncio.create_task(logs_server.serve(self._locate, self.node.ip, tls, apiserver))
        keeper = NodeKeeper(self.client, self.node)
        tasks = [asyncio.create_task(keeper.run())]
        await keeper.registered.wait()
        tasks.append(asyncio.create_task(self.pods.run()))
        await self.pods.synced.wait()
        await self._clean_orphans()
        log.info("node %s ready (%d pods)", self.node.name, len(self.workers))
        await stop.wait()
        log.info("node %s stopping", self.node.name)
        for task in tasks:
            task.cancel()
        for names in self.names.values():
            names.stop()
        await asyncio.gather(*(w.shutdown() for w in list(self.workers.values())))
        if serving.done() and not serving.cancelled() and serving.exception() is None:
            await serving.result().cleanup()
        serving.cancel()
        await self.client.close()

    def _on_pod(self, event: str, pod: Obj) -> None:
        uid, ns = pod["metadata"]["uid"], pod["metadata"]["namespace"]
        worker = self.workers.get(uid)
        if event == "DELETED":
            if worker is not None:
                worker.gone()
        elif worker is not None:
            worker.update(pod)
        else:
            if ns not in self.names and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
                self.names[ns] = Names(self.client, ns, lambda: self._refresh_hosts(ns))
            worker = PodWorker(self.ctx, pod, self._forget)
            self.workers[uid] = worker
            worker.start()

    def _forget(self, uid: str) -> None:
        worker = self.workers.pop(uid, None)
        if (
            worker is not None
            and worker.ns in self.names
            and not any(w.ns == worker.ns for w in self.workers.values())
        ):
            self.names.pop(worker.ns).stop()

    def _refresh_hosts(self, ns: str) -> None:
        for w in self.workers.values():
            if w.ns == ns and w.ip is not None:
                w.write_hosts(self._hosts(w.pod, w.ip))

    def _hosts(self, pod: Obj, ip: str) -> str:
        names = self.names[pod["metadata"]["namespace"]]
        peers = [p for other in names.pods.items.values() if (p := peer_of(other)) is not None]
        headless = {s["metadata"]["name"] for s in names.services.items.values() if (s.get("spec") or {}).get("clusterIP") == "None"}  # fmt: skip
        return hosts_file(pod, ip, peers, headless, self.cluster.cluster_domain, self.cluster.apiserver_host)

    def _locate(self, ns: str, name: str, container: str, previous: bool) -> runner.Run | None:
        # A pod deleted and created again under the same name: the new one's logs.
        candidates = sorted((w for w in self.workers.values() if w.ns == ns and w.name == name), key=lambda w: w.terminating is not None)  # fmt: skip
        worker = candidates[0] if candidates else None
        return worker.log_run(container, previous) if worker is not None else None

    async def _clean_orphans(self) -> None:
        """Pod dirs of pods this node no longer has: stop what still runs there and remove them."""
        for pod_dir in self.layout.pods.iterdir():
            if pod_dir.name in self.workers:
                continue
            runs = [r for d in pod_dir.glob("containers/*/*") if (r := runner.find(d)) is not None]
            await asyncio.gather(*(r.stop(0) for r in runs))
            log.info("removing pod dir %s (%s)", pod_dir.name, _describe(pod_dir))
            shutil.rmtree(pod_dir, ignore_errors=True)
            shutil.rmtree(f"/dev/shm/kubepool/{pod_dir.name}", ignore_errors=True)


class Names:
    """Pods and Services of one namespace, watched while this node runs pods there: the /etc/hosts input."""

    def __init__(self, client: AsyncClient, ns: str, on_change: Callable[[], None]) -> None:
        self.pods = Informer(client, Pod, lambda _e, _o: on_change(), namespace=ns)
        self.services = Informer(client, Service, lambda _e, _o: on_change(), namespace=ns)
        self.tasks = [asyncio.create_task(self.pods.run()), asyncio.create_task(self.services.run())]

    def stop(self) -> None:
        for task in self.tasks:
            task.cancel()


def _describe(pod_dir: Any) -> str:
    try:
        meta = json.loads((pod_dir / "pod.json").read_text())
        return f"{meta['namespace']}/{meta['name']}"
    except (OSError, ValueError, KeyError):
        return "unknown pod"


async def main(layout: Layout) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await Agent(layout).run(stop)
