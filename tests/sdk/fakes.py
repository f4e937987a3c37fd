"""An in-memory stand-in for `kubepool.kube.sync.Kube`, so SDK and CLI logic is tested without a cluster."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

from lightkube.models.core_v1 import (
    Container,
    ContainerState,
    ContainerStateTerminated,
    ContainerStatus,
    PodSpec,
    PodStatus,
)
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import ConfigMap, Pod

from kubepool import naming
from kubepool.api import ComputePool, MLJob
from kubepool.kube.errors import KubeError, NotFound


def pool(name: str, max_nodes: int = 4, family: str = "CPU_X64_S", **spec: object) -> ComputePool:
    return ComputePool.model_validate({
        "metadata": {"name": name}, "spec": {"instanceFamily": family, "maxNodes": max_nodes, "minNodes": 0, **spec},
    })


class FakeKube:
    def __init__(self, namespace: str = "team", pools: list[ComputePool] | None = None) -> None:
        self.namespace = namespace
        self.pools = {p.metadata["name"]: p for p in (pools or [pool("cpu")])}
        self.jobs: dict[tuple[str, str], MLJob] = {}
        self.configmaps: dict[tuple[str, str], ConfigMap] = {}
        self.calls: list[str] = []
        self.logs: dict[int, list[str]] = {}  # instance id -> log lines of its pod
        self.log_calls: list[dict[str, object]] = []  # the since/timestamps of each pod_log call
        self.watch_events: list[tuple[str, MLJob]] = []
        self.configmap_error: KubeError | None = None
        self._uids = itertools.count(1)

    def get_pool(self, name: str) -> ComputePool:
        self.calls.append(f"get_pool {name}")
        if name not in self.pools:
            raise NotFound(f"ComputePool {name}: not found", 404)
        return self.pools[name]

    def list_pools(self) -> list[ComputePool]:
        return list(self.pools.values())

    def create_job(self, job: MLJob, namespace: str | None = None) -> MLJob:
        ns = namespace or self.namespace
        self.calls.append(f"create_job {ns}/{job.metadata['name']}")
        stored = job.model_copy(update={"metadata": {
            **job.metadata, "namespace": ns, "uid": f"uid-{next(self._uids)}", "resourceVersion": "1",
            "creationTimestamp": f"2026-01-01T00:00:0{len(self.jobs)}Z",
        }})
        self.jobs[(ns, job.metadata["name"])] = stored
        return stored

    def create_configmap(self, cm: ConfigMap, namespace: str | None = None) -> None:
        assert cm.metadata is not None and cm.metadata.name is not None
        self.calls.append(f"create_configmap {cm.metadata.name}")
        if self.configmap_error:
            raise self.configmap_error
        self.configmaps[(namespace or self.namespace, cm.metadata.name)] = cm

    def get_configmap(self, name: str, namespace: str | None = None) -> ConfigMap:
        key = (namespace or self.namespace, name)
        if key not in self.configmaps:
            raise NotFound(f"ConfigMap {key[0]}/{name} not found", 404)
        return self.configmaps[key]

    def replace_configmap(self, cm: ConfigMap, namespace: str | None = None) -> None:
        assert cm.metadata is not None and cm.metadata.name is not None
        self.calls.append(f"replace_configmap {cm.metadata.name}")
        self.configmaps[(namespace or self.namespace, cm.metadata.name)] = cm

    def delete_configmap(self, name: str, namespace: str | None = None) -> None:
        self.calls.append(f"delete_configmap {name}")
        self.get_configmap(name, namespace)
        del self.configmaps[(namespace or self.namespace, name)]

    def delete_job(self, name: str, namespace: str | None = None) -> None:
        self.calls.append(f"delete_job {name}")
        self.jobs.pop((namespace or self.namespace, name), None)

    def get_job(self, name: str, namespace: str | None = None) -> MLJob:
        key = (namespace or self.namespace, name)
        if key not in self.jobs:
            raise NotFound(f"MLJob {key[0]}/{name}: not found", 404)
        return self.jobs[key]

    def list_jobs(self, namespace: str | None = None, all_namespaces: bool = False) -> list[MLJob]:
        return [j for (ns, _), j in self.jobs.items() if all_namespaces or ns == (namespace or self.namespace)]

    def patch_job(self, name: str, patch: dict[str, Any], namespace: str | None = None) -> MLJob:
        key = (namespace or self.namespace, name)
        job = self.jobs[key]
        spec = job.spec.model_copy(update=dict(patch["spec"]))
        self.jobs[key] = job.model_copy(update={"spec": spec})
        return self.jobs[key]

    def set_phase(self, name: str, phase: str, **status: Any) -> MLJob:
        key = (self.namespace, name)
        job = self.jobs[key]
        updated = MLJob.model_validate({**job.wire(), "status": {"phase": phase, **status}})
        self.jobs[key] = updated
        return updated

    def watch_job(self, name: str, resource_version: str | None, seconds: int,
                  namespace: str | None = None) -> Iterator[tuple[str, MLJob]]:
        self.calls.append(f"watch_job {name} {seconds}")
        while self.watch_events:
            kind, job = self.watch_events.pop(0)
            self.jobs[(namespace or self.namespace, name)] = job
            yield kind, job

    def list_pods(self, labels: dict[str, str], namespace: str | None = None) -> list[Pod]:
        if naming.LABEL_INSTANCE not in labels:
            return []  # no KubeRay worker pods here
        iid = int(labels[naming.LABEL_INSTANCE])
        if iid not in self.logs:
            return []
        done = ContainerStatus(name="main", image="runtime", imageID="", ready=False, restartCount=0,
                               state=ContainerState(terminated=ContainerStateTerminated(exitCode=0)))
        return [Pod(metadata=ObjectMeta(name=f"{labels[naming.LABEL_JOB]}-pod-{iid}", creationTimestamp=None),
                    spec=PodSpec(containers=[Container(name="main")]), status=PodStatus(containerStatuses=[done]))]

    def pod_log(self, name: str, *, container: str | None = None, tail_lines: int | None = None,
                follow: bool = False, namespace: str | None = None, since_seconds: int | None = None,
                timestamps: bool = False) -> Iterator[str]:
        assert container == "main"
        self.log_calls.append({"since_seconds": since_seconds, "timestamps": timestamps})
        lines = [f"2026-01-01T00:00:0{i}Z {line}" if timestamps else line
                 for i, line in enumerate(self.logs[int(name.rsplit("-", 1)[1])])]
        return iter(lines[-tail_lines:] if tail_lines else lines)
