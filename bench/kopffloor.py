"""P1's kopf floor: the least a kopf operator does for P1's jobs. It watches the MLJobs and their pods (an index
and an event handler on the pods, as kubepool's operator has) and creates each new job's 4 pods (head + 3
workers, owned by the job) through the operator's own client (`kubepool.kube.aio`), with kubepool's kopf tuning
(orjson watch decoding, no diff base for pods, the pods' label selector in the API server). No status, no
pools, no Events. Its CPU and RSS are what any kopf-based operator pays for the same jobs, beside KubeRay's.

With $KOPF_FLOOR_WRITES_POOLS (the kopf writes floor), each job gets instead every write kubepool's operator makes
for it (bench.writesfloor.JobWrites: status, pool status, Events, Secret, Service, NetworkPolicy, pods,
EndpointSlice), with no decision: what kubepool's writes cost a plain kopf operator, beside KubeRay's.

`python -m bench.kopffloor` (KUBECONFIG set; the pods' spec as JSON in $KOPF_FLOOR_POD_SPEC, from
bench.operator_scale): runs until SIGTERM."""

from __future__ import annotations

import asyncio
import json
import logging
import os
from typing import Any

import kopf

from bench.writesfloor import JobWrites
from kubepool import naming
from kubepool.controller.kopf_fence import NoDiffBaseStorage, install_fast_json
from kubepool.kube import lanes
from kubepool.kube.aio import Api
from kubepool.kube.transport import AiohttpHttp, Endpoint

READY = "kopf floor configured"
# With this set (the ComputePools as JSON, by name), each new job gets every write kubepool's operator makes for
# it instead of its four bare pods: the kopf writes floor (bench.writesfloor.JobWrites, from kopf's job events).
WRITES_POOLS_ENV = "KOPF_FLOOR_WRITES_POOLS"
MANAGED = {naming.LABEL_MANAGED_BY: naming.MANAGED_BY}
WORKERS = 3
POD_SPEC_ENV = "KOPF_FLOOR_POD_SPEC"
_WRITING: set[asyncio.Task[None]] = set()  # the kopf writes floor's jobs still being written


def pods_for(job: dict[str, Any], spec: dict[str, Any]) -> list[dict[str, Any]]:
    """The job's head and workers: P1's raw pods (`spec`, bench.operator_scale.raw_pods'), labelled and owned."""
    meta = job["metadata"]
    owner = {"apiVersion": job["apiVersion"], "kind": job["kind"], "name": meta["name"], "uid": meta["uid"],
             "controller": True, "blockOwnerDeletion": True}
    names = [f"{meta['name']}-head"] + [f"{meta['name']}-worker-{w}" for w in range(WORKERS)]
    return [{"apiVersion": "v1", "kind": "Pod",
             "metadata": {"name": n, "namespace": meta["namespace"], "ownerReferences": [owner],
                          "labels": {**MANAGED, naming.LABEL_JOB: meta["name"]}},
             "spec": spec} for n in names]  # fmt: skip


@kopf.on.login()
def login(settings: kopf.OperatorSettings, **kwargs: Any) -> kopf.ConnectionInfo | None:
    return kopf.login_with_kubeconfig(settings=settings, **kwargs)


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    install_fast_json()
    settings.persistence.diffbase_storage = NoDiffBaseStorage(prefix=naming.ANNOTATION_PREFIX,
                                                              key="last-handled-configuration")
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=naming.ANNOTATION_PREFIX)
    settings.posting.enabled = False
    settings.watching.label_selectors["pods"] = f"{naming.LABEL_MANAGED_BY}={naming.MANAGED_BY}"

    def connect() -> Endpoint:
        info = kopf.login_with_kubeconfig(settings=settings)
        assert info is not None, "KUBECONFIG"
        return Endpoint(info.server, ssl=info.as_ssl_context() if info.server.startswith("https:") else False,
                        headers=info.as_http_headers())

    memo.api = Api(AiohttpHttp(connect))
    memo.seen = set()
    memo.pod_spec = json.loads(os.environ[POD_SPEC_ENV])
    pools = os.environ.get(WRITES_POOLS_ENV)
    memo.writes = JobWrites(memo.api, json.loads(pools), WORKERS + 1) if pools else None
    logging.getLogger(__name__).info(READY)


@kopf.index("pods", labels=MANAGED)
async def pod_index(body: kopf.Body, namespace: str | None, labels: kopf.Labels, **_: Any) -> dict[Any, Any]:
    return {(namespace, labels.get(naming.LABEL_JOB)): body.get("status", {}).get("phase")}


@kopf.on.event("pods", labels=MANAGED)
async def pod_event(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    # kubepool's queues a pass here; the floor's job needs nothing more, the writes floor's its Running pods
    if memo.writes is not None and body.get("status", {}).get("phase") == "Running":
        memo.writes.on_pod(dict(body))


@kopf.on.event(naming.GROUP, naming.MLJOB_PLURAL)
async def job_event(event: kopf.RawEvent, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    uid = body.get("metadata", {}).get("uid")
    if event["type"] == "DELETED" or uid in memo.seen:
        return
    memo.seen.add(uid)
    if memo.writes is not None:
        task = asyncio.create_task(memo.writes.write(lanes.new_place(), dict(body)))  # it waits for the pods to run
        _WRITING.add(task)  # held until done (the loop keeps only a weak reference)
        task.add_done_callback(_written)
        return
    for pod in pods_for(dict(body), memo.pod_spec):
        await memo.api.create_if_absent(pod)


def _written(task: asyncio.Task[None]) -> None:
    """A job's writes are done: a failure is logged (the run then stalls, and the log says why)."""
    _WRITING.discard(task)
    if not task.cancelled() and task.exception() is not None:
        logging.getLogger(__name__).error("a job's writes failed", exc_info=task.exception())


@kopf.on.cleanup()
async def close(memo: kopf.Memo, **_: Any) -> None:
    api = getattr(memo, "api", None)
    if api is not None:
        await api.close()


if __name__ == "__main__":
    kopf.configure(verbose=False)
    kopf.run(standalone=True, clusterwide=True)
