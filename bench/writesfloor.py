"""P1's writes floor: every API write kubepool's operator makes for a P1 job, made with no operator, so what is
left of kubepool's P1 figures beside it is the operator's own cost (its watches, its decisions).

The user's side is the other systems': each job POSTed by the bench's client, 16 in flight. The operator's side
goes through the operator's own client (kubepool.kube.aio.Api: its slots, its lanes, each job at its place in
line) with bodies from kubepool's own builders and status models, in the operator's order and its fewest
writes: the job's admission (the pool's status, the job's status, an Event); the runtime account once per
namespace; the Secret of the contract and token, the Service and the NetworkPolicy; the four pods at once;
and once they all run, the EndpointSlice, the RUNNING status and its Event. The operator writes at least these
(more where a job's pods start one by one: a progress status, an EndpointSlice per new address)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from datetime import UTC, datetime
from typing import Any

import httpx

from kubepool.api import ComputePool, MLJob, MLJobStatus
from kubepool.api.computepool import ComputePoolStatus
from kubepool.api.mljob import JobPhase
from kubepool.controller.builders import (
    JobRef,
    build_endpoint_slice,
    build_headless_service,
    build_instance_pods,
    build_job_contract,
    build_job_secret,
    build_namespace_runtime_rbac,
    build_network_policy,
)
from kubepool.controller.builders.common import local_port_shift
from kubepool.controller.builders.events import event
from kubepool.controller.config import OperatorConfig
from kubepool.controller.observed import PodView
from kubepool.kube import lanes
from kubepool.kube.aio import Api, collection_path

NAME = "writes-floor"


class JobWrites:
    """The operator's side of the floor: `write(place, job)` makes every write kubepool's operator makes for the
    created MLJob `job` (a dict, as the API server answered its creation), through `api`; `on_pod` takes the
    pod watch's Running pods (the job's RUNNING writes wait for all of them). The writes floor calls it from the
    bench's process; the kopf writes floor (bench/kopffloor.py) from a kopf operator's job events."""

    def __init__(self, api: Api, pools: dict[str, dict[str, Any]], instances: int) -> None:
        self.api = api
        self.pools = {name: ComputePool.model_validate(p) for name, p in pools.items()}
        self.cfg = OperatorConfig()
        self.instances = instances
        self.running: dict[str, dict[str, dict[str, Any]]] = {}  # job name → its Running pods by name
        self.all_running: dict[str, asyncio.Event] = {}  # job name → set once all its pods run
        self._accounts: dict[str, asyncio.Task[None]] = {}  # namespace → its runtime account's writes

    def on_pod(self, pod: dict[str, Any]) -> None:
        """A pod of the run seen Running."""
        job = (pod["metadata"].get("ownerReferences") or [{}])[0].get("name", "")
        pods = self.running.setdefault(job, {})
        pods[pod["metadata"]["name"]] = pod
        if len(pods) == self.instances:
            self.all_running.setdefault(job, asyncio.Event()).set()

    async def _runtime_account(self, ns: str) -> None:
        objs = build_namespace_runtime_rbac(ns)
        await _all([self.api.apply(o) for o in objs if o["kind"] != "RoleBinding"])
        await _all([self.api.apply(o) for o in objs if o["kind"] == "RoleBinding"])

    def _event(self, body: dict[str, Any], reason: str, message: str) -> Awaitable[None]:
        return self.api.post_event(
            event(
                body,
                type="Normal",
                reason=reason,
                message=message,
                component="kubepool",
                now=datetime.now(UTC),
            )
        )

    async def write(self, place: int, body: dict[str, Any]) -> None:
        lanes.take_place(place)  # this task's requests wait at the job's place, as a pass's do
        job = MLJob.model_validate(body)
        ref, uid, n = JobRef.of(job), body["metadata"]["uid"], job.spec.target_instances or 1
        ns = body["metadata"]["namespace"]
        pool_name = job.spec.compute_pool or ""
        now = datetime.now(UTC)
        pending = MLJobStatus(
            phase=JobPhase.PENDING,
            reason="Admitted",
            message="admitted",
            admitted_at=now,
            target_instances=n,
            min_instances=n,
            pools=pool_name,
            ready=f"0/{n}",
        )
        pool_status = ComputePoolStatus(phase="ACTIVE", instances_in_use=n, running_jobs=1)
        await _all(
            [
                self.api.patch_pool_status(pool_name, pool_status.wire()),
                self.api.patch_job_status(ns, ref.name, pending.merge_patch(), uid),
                self._event(body, "Admitted", "PENDING: admitted"),
            ]
        )
        if ns not in self._accounts:
            self._accounts[ns] = asyncio.create_task(self._runtime_account(ns))
        await self._accounts[ns]
        shift = local_port_shift(ref.uid, self.cfg.ray_port_stride)
        contract = build_job_contract(job, self.pools, attempt=0, port_shift=shift, admitted_at=now)
        await _all(
            [
                self.api.create_if_absent(build_job_secret(ref, contract, "t" * 43)),
                self.api.create_if_absent(build_headless_service(ref)),
                self.api.create_if_absent(build_network_policy(ref)),
            ]
        )
        await _all(
            [
                self.api.create_if_absent(p)
                for p in build_instance_pods(job, self.pools, granted=n, attempt=0, cfg=self.cfg)
            ]
        )
        await self.all_running.setdefault(ref.name, asyncio.Event()).wait()
        running = pending.model_copy(
            update={
                "phase": JobPhase.RUNNING,
                "reason": "Running",
                "message": "all instances ready",
                "ready_instances": n,
                "ready": f"{n}/{n}",
                "start_time": datetime.now(UTC),
            }
        )
        eps = build_endpoint_slice(ref, [PodView.of(p) for p in self.running[ref.name].values()])
        await _all(
            [
                *([self.api.apply(eps)] if eps else []),
                self.api.patch_job_status(ns, ref.name, running.merge_patch(), uid),
                self._event(body, "Running", "RUNNING: all instances ready"),
            ]
        )


class WritesFloor:
    """One P1 run's jobs, created by `client` (16 in flight) and written as the operator would through `api`
    (`JobWrites`). `on_pod` takes the run's pod watch events; `run` returns once every job's last write is done."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        api: Api,
        ns: str,
        jobs: list[dict[str, Any]],
        pools: dict[str, dict[str, Any]],
        concurrency: int,
    ) -> None:
        self.client, self.ns, self.jobs = client, ns, jobs
        self.writes = JobWrites(api, pools, int(jobs[0]["spec"]["targetInstances"]) if jobs else 0)
        self.on_pod = self.writes.on_pod
        self.submits = asyncio.Semaphore(concurrency)
        self.created = 0
        self.submitted = asyncio.Event()  # every job created

    async def run(self) -> None:
        await asyncio.gather(*(self._job(lanes.new_place(), j) for j in self.jobs))

    async def _submit(self, job: dict[str, Any]) -> dict[str, Any]:
        async with self.submits:
            resp = await self.client.post(collection_path(job["apiVersion"], job["kind"], self.ns), json=job)
        if resp.status_code >= 300:
            raise RuntimeError(
                f"create MLJob {job['metadata']['name']}: {resp.status_code} {resp.text[:300]}"
            )
        self.created += 1
        if self.created == len(self.jobs):
            self.submitted.set()
        return dict(resp.json())

    async def _job(self, place: int, submitted: dict[str, Any]) -> None:
        await self.writes.write(place, await self._submit(submitted))


async def _all(calls: list[Awaitable[Any]]) -> None:
    await asyncio.gather(*calls)
