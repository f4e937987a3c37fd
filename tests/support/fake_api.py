"""An in-memory stand-in for the operator's Kubernetes API (kubepool.kube.api.KubeApi, implemented by kube.aio.Api): keeps
what the operator wrote, in order."""

from __future__ import annotations

from typing import Any


class FakeApi:
    """`calls` lists (verb, what) in order: ("create"|"apply", "Kind/name"), ("delete", "namespace/name") for pods,
    ("status", job), ("pool-status", pool), ("delete-job", job); `objects` holds what exists, by (kind, name)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.statuses: dict[str, dict[str, Any]] = {}  # job name → its last status patch
        self.urgent: list[str] = []  # jobs whose status was written in the urgent lanes, in order
        self.pool_status: dict[str, Any] = {}  # the last pool status patch
        self.labels: dict[tuple[str, str, str], dict[str, str]] = {}  # (kind, namespace, name) → labels, for labels_of
        self.generations: dict[str, int] = {}  # job name → the generation its last spec write made

    def count(self, verb: str, kind: str | None = None) -> int:
        return sum(1 for v, what in self.calls if v == verb and (kind is None or what.startswith(f"{kind}/")))

    def pods(self) -> list[str]:
        return sorted(name for kind, name in self.objects if kind == "Pod")

    async def apply(self, obj: dict[str, Any]) -> None:
        self.calls.append(("apply", f"{obj['kind']}/{obj['metadata']['name']}"))
        self.objects[(obj["kind"], obj["metadata"]["name"])] = obj

    async def create_if_absent(self, obj: dict[str, Any]) -> bool:
        key = (obj["kind"], obj["metadata"]["name"])
        self.calls.append(("create", f"{obj['kind']}/{obj['metadata']['name']}"))
        if key in self.objects:
            return False
        self.objects[key] = obj
        return True

    async def patch_owned(self, target: tuple[str, str, str, str], patch: list[dict[str, Any]]) -> bool:
        """A JSON patch of test and add ops, as the API server applies it: False when the object is missing or a
        test fails (its path absent or its value another), and then nothing is changed."""
        _, kind, _, name = target
        self.calls.append(("patch", f"{kind}/{name}"))
        obj = self.objects.get((kind, name))
        if obj is None or not all(_at(obj, op["path"]) == op["value"] for op in patch if op["op"] == "test"):
            return False
        for op in patch:
            if op["op"] == "add":
                *parents, last = op["path"].split("/")[1:]
                node = obj
                for part in parents:
                    node = node.setdefault(part, {})
                node[last] = op["value"]
        return True

    async def delete_pod(self, namespace: str, name: str, grace_seconds: int | None = None) -> None:
        self.calls.append(("delete", f"{namespace}/{name}"))
        self.objects.pop(("Pod", name), None)

    async def delete_raycluster(self, namespace: str, name: str) -> None:
        self.calls.append(("delete", f"{namespace}/{name}"))
        self.objects.pop(("RayCluster", name), None)

    async def remove_pod_finalizer(self, namespace: str, name: str, finalizers: tuple[str, ...], finalizer: str) -> None:
        self.calls.append(("release", f"{namespace}/{name}"))

    async def delete_job(self, namespace: str, name: str, uid: str = "") -> None:
        self.calls.append(("delete-job", name))

    async def patch_job_status(self, namespace: str, name: str, status: dict[str, Any], uid: str = "",
                               urgent: bool = False) -> None:
        self.calls.append(("status", name))
        self.statuses[name] = status
        if urgent:
            self.urgent.append(name)

    async def patch_pool_status(self, name: str, status: dict[str, Any]) -> None:
        self.calls.append(("pool-status", name))
        self.pool_status = status

    async def crd_exists(self, name: str) -> bool:
        return False

    async def labels_of(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, str] | None:
        return self.labels.get((kind, namespace, name))

    async def metadata_of(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        obj = self.objects.get((kind, name))
        if obj is not None:
            return dict(obj["metadata"])
        labels = self.labels.get((kind, namespace, name))
        return None if labels is None else {"name": name, "namespace": namespace, "labels": labels}

    async def access_modes_of(self, namespace: str, name: str) -> list[str] | None:
        claim = self.objects.get(("PersistentVolumeClaim", name))
        return None if claim is None else list(claim.get("spec", {}).get("accessModes") or [])

    async def get_object(self, api_version: str, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        return self.objects.get((kind, name))

    async def delete_object(self, api_version: str, kind: str, namespace: str, name: str) -> None:
        self.calls.append(("delete", f"{kind}/{name}"))
        self.objects.pop((kind, name), None)

    async def replace_status(self, obj: dict[str, Any], status: dict[str, Any]) -> None:
        self.calls.append(("replace-status", f"{obj['kind']}/{obj['metadata']['name']}"))
        self.objects[(obj["kind"], obj["metadata"]["name"])] = {**obj, "status": status}

    async def set_job_suspend(self, namespace: str, name: str, suspend: bool, uid: str) -> int:
        self.calls.append(("suspend" if suspend else "resume", name))
        return self._spec_written(name)

    async def set_job_placement(self, namespace: str, name: str, suspend: bool, uid: str,
                                annotations: dict[str, str | None]) -> int:
        self.calls.append(("suspend" if suspend else "resume", name))
        return self._spec_written(name)

    def _spec_written(self, name: str) -> int:
        """The generation a spec write made: one past the last (the jobs of the tests start at 1)."""
        self.generations[name] = self.generations.get(name, 1) + 1
        return self.generations[name]

    async def post_event(self, event: dict[str, Any]) -> None:
        self.calls.append(("event", str(event.get("reason"))))

    async def get_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.objects.get(("Lease", name))

    async def write_lease(self, namespace: str, name: str, spec: dict[str, Any], resource_version: str | None) -> None:
        self.calls.append(("apply", f"Lease/{name}"))
        self.objects[("Lease", name)] = {"metadata": {"name": name, "namespace": namespace}, "spec": spec}

    async def ensure_peering(self, name: str, namespaces: tuple[str, ...]) -> bool:
        return False

    async def close(self) -> None:
        pass


def _at(obj: Any, pointer: str) -> Any:
    """The value at a JSON pointer, or a marker that equals nothing when the path is absent."""
    node = obj
    for part in pointer.split("/")[1:]:
        try:
            node = node[int(part)] if isinstance(node, list) else node[part]
        except (KeyError, IndexError, ValueError, TypeError):
            return object()
    return node
