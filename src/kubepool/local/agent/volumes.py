"""Pod volumes on the host: each volume becomes a directory (or an existing host path) that the sandbox
bind-mounts at the container's mountPath. `materialize` fetches ConfigMaps, Secrets, tokens and PVCs and
writes the files; the projections themselves (`configmap_files`, `downward_files`, ...) are pure."""

from __future__ import annotations

import base64
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lightkube import ApiError, AsyncClient
from lightkube.models.authentication_v1 import BoundObjectReference, TokenRequestSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import (
    ConfigMap,
    PersistentVolume,
    PersistentVolumeClaim,
    Secret,
    ServiceAccountToken,
)

from kubepool.local.agent.podspec import ConfigError, field_ref, resource_field_ref

Obj = dict[str, Any]
DEFAULT_MODE = 0o644
TOKEN_SECONDS = 3607  # what the kubelet asks for; refreshed long before it expires


class VolumeError(Exception):
    """A volume cannot be set up yet (missing ConfigMap, unbound PVC, ...): the pod stays ContainerCreating."""


@dataclass(frozen=True)
class File:
    path: str
    content: bytes
    mode: int


def _items(
    data: Mapping[str, bytes], items: list[Obj] | None, mode: int, what: str, optional: bool
) -> list[File]:
    if not items:
        return [File(k, v, mode) for k, v in sorted(data.items())]
    out = []
    for item in items:
        if item["key"] not in data:
            if optional:
                continue
            raise VolumeError(f"{what}: key {item['key']!r} not found")
        out.append(File(item["path"], data[item["key"]], int(item.get("mode", mode))))
    return out


def configmap_files(
    cm: Obj | None, items: list[Obj] | None, mode: int, name: str, optional: bool
) -> list[File]:
    if cm is None:
        if optional:
            return []
        raise VolumeError(f'configmap "{name}" not found')
    data = {k: v.encode() for k, v in (cm.get("data") or {}).items()}
    data.update({k: base64.b64decode(v) for k, v in (cm.get("binaryData") or {}).items()})
    return _items(data, items, mode, f"configmap {name}", optional)


def secret_files(
    secret: Obj | None, items: list[Obj] | None, mode: int, name: str, optional: bool
) -> list[File]:
    if secret is None:
        if optional:
            return []
        raise VolumeError(f'secret "{name}" not found')
    data = {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}
    return _items(data, items, mode, f"secret {name}", optional)


def downward_files(pod: Obj, items: list[Obj], mode: int, allocatable: Mapping[str, str]) -> list[File]:
    out = []
    for item in items:
        try:
            if "fieldRef" in item:
                value = field_ref(pod, item["fieldRef"]["fieldPath"])
            else:
                ref = item["resourceFieldRef"]
                containers = (pod.get("spec") or {}).get("containers") or []
                container = next(
                    (c for c in containers if c["name"] == ref.get("containerName")), containers[0]
                )
                value = resource_field_ref(container, ref, allocatable)
        except ConfigError as e:
            raise VolumeError(str(e)) from e
        out.append(File(item["path"], value.encode(), int(item.get("mode", mode))))
    return out


def write_files(directory: Path, files: list[File], gid: int | None) -> None:
    """Write a projection into `directory` atomically per file, removing files no longer projected."""
    directory.mkdir(parents=True, exist_ok=True)
    wanted = set()
    for f in files:
        rel = Path(f.path)
        if rel.is_absolute() or ".." in rel.parts:
            raise VolumeError(f"invalid item path {f.path!r}")
        target = directory / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.tmp")
        tmp.write_bytes(f.content)
        mode = f.mode
        if gid is not None:
            os.chown(tmp, -1, gid)
            mode |= 0o040  # fsGroup members may read
        tmp.chmod(mode)
        tmp.replace(target)
        wanted.add(target)
    for existing in directory.rglob("*"):
        if existing.is_file() and existing not in wanted:
            existing.unlink()


class Volumes:
    """Sets up the volumes of one pod under its pod dir."""

    def __init__(self, client: AsyncClient, pod: Obj, pod_dir: Path, allocatable: Mapping[str, str]) -> None:
        self.client = client
        self.pod = pod
        self.dir = pod_dir / "volumes"
        self.allocatable = allocatable
        self.uid = pod["metadata"]["uid"]
        self.ns = pod["metadata"]["namespace"]
        self.gid: int | None = ((pod.get("spec") or {}).get("securityContext") or {}).get("fsGroup")
        self.run_uid: int | None = ((pod.get("spec") or {}).get("securityContext") or {}).get("runAsUser")

    async def materialize(self) -> dict[str, str]:
        """Volume name → host path of every volume of the pod (idempotent: also refreshes projections)."""
        return {v["name"]: await self._one(v) for v in (self.pod.get("spec") or {}).get("volumes") or []}

    def memory_dir(self) -> Path:
        return Path("/dev/shm/kubepool") / self.uid

    async def _one(self, vol: Obj) -> str:
        name = vol["name"]
        target = self.dir / name
        if "emptyDir" in vol:
            medium = (vol["emptyDir"] or {}).get("medium")
            path = self.memory_dir() / name if medium == "Memory" else target
            if not path.exists():
                path.mkdir(parents=True)
                path.chmod(0o777)  # as the kubelet does: any runAsUser may write
                if self.gid is not None:
                    os.chown(path, -1, self.gid)
                    path.chmod(0o2777)
            return str(path)
        if "hostPath" in vol:
            return self._host_path(vol["hostPath"]["path"], vol["hostPath"].get("type") or "")
        if "persistentVolumeClaim" in vol:
            return await self._pvc(vol["persistentVolumeClaim"]["claimName"])
        files: list[File]
        if "configMap" in vol:
            src = vol["configMap"]
            files = configmap_files(await self._get(ConfigMap, src["name"]), src.get("items"),
                                    int(src.get("defaultMode", DEFAULT_MODE)), src["name"], bool(src.get("optional")))  # fmt: skip
        elif "secret" in vol:
            src = vol["secret"]
            files = secret_files(await self._get(Secret, src["secretName"]), src.get("items"),
                                 int(src.get("defaultMode", DEFAULT_MODE)), src["secretName"], bool(src.get("optional")))  # fmt: skip
        elif "downwardAPI" in vol:
            src = vol["downwardAPI"]
            files = downward_files(
                self.pod, src.get("items") or [], int(src.get("defaultMode", DEFAULT_MODE)), self.allocatable
            )
        elif "projected" in vol:
            files = await self._projected(vol["projected"] or {})
        else:
            raise VolumeError(f"volume {name}: only emptyDir, hostPath, persistentVolumeClaim, configMap, secret, downwardAPI and projected are supported on local nodes")  # fmt: skip
        write_files(target, files, self.gid)
        if self.run_uid is not None and self.gid is None:
            for f in target.rglob("*"):
                os.chown(f, self.run_uid, -1)  # without fsGroup the runtime user must still read its token
        return str(target)

    async def _projected(self, src: Obj) -> list[File]:
        mode = int(src.get("defaultMode", DEFAULT_MODE))
        files: list[File] = []
        for s in src.get("sources") or []:
            if "serviceAccountToken" in s:
                t = s["serviceAccountToken"]
                token = await self._token(t.get("audience"), int(t.get("expirationSeconds") or TOKEN_SECONDS))
                files.append(File(t["path"], token.encode(), mode if "defaultMode" in src else 0o600 if self.gid is None and self.run_uid is None else 0o640))  # fmt: skip
            elif "configMap" in s:
                c = s["configMap"]
                files += configmap_files(await self._get(ConfigMap, c["name"]), c.get("items"), mode, c["name"], bool(c.get("optional")))  # fmt: skip
            elif "secret" in s:
                c = s["secret"]
                files += secret_files(await self._get(Secret, c["name"]), c.get("items"), mode, c["name"], bool(c.get("optional")))  # fmt: skip
            elif "downwardAPI" in s:
                files += downward_files(self.pod, s["downwardAPI"].get("items") or [], mode, self.allocatable)
            else:
                raise VolumeError(f"unsupported projected source {sorted(s)}")
        return files

    async def _get(self, kind: type[ConfigMap] | type[Secret], name: str) -> Obj | None:
        try:
            obj = await self.client.get(kind, name, namespace=self.ns)
        except ApiError as e:
            if e.status.code == 404:
                return None
            raise
        return obj.to_dict()

    async def _token(self, audience: str | None, seconds: int) -> str:
        sa = (self.pod.get("spec") or {}).get("serviceAccountName") or "default"
        meta = self.pod["metadata"]
        request = ServiceAccountToken(metadata=ObjectMeta(name=sa, namespace=self.ns), spec=TokenRequestSpec(
            audiences=[audience] if audience else [],
            expirationSeconds=max(seconds, 600),
            boundObjectRef=BoundObjectReference(kind="Pod", apiVersion="v1", name=meta["name"], uid=meta["uid"]),
        ))  # fmt: skip
        try:
            result = await self.client.create(request, sa, namespace=self.ns)
        except ApiError as e:
            raise VolumeError(f"token for serviceaccount {sa}: {e.status.message}") from e
        assert result.status is not None
        return str(result.status.token)

    def _host_path(self, path: str, kind: str) -> str:
        p = Path(path)
        if kind == "DirectoryOrCreate":
            p.mkdir(parents=True, exist_ok=True)
        elif kind == "FileOrCreate":
            p.parent.mkdir(parents=True, exist_ok=True)
            p.touch(exist_ok=True)
        elif kind in ("Directory", "File", "Socket", "CharDevice", "BlockDevice") and not p.exists():
            raise VolumeError(f"hostPath {path} does not exist")
        elif not p.exists():
            p.mkdir(parents=True)  # type "": the runtime creates a missing path as a directory
        return str(p)

    async def _pvc(self, claim: str) -> str:
        try:
            pvc = await self.client.get(PersistentVolumeClaim, claim, namespace=self.ns)
        except ApiError as e:
            raise VolumeError(f'persistentvolumeclaim "{claim}" not found') from e
        volume = pvc.spec.volumeName if pvc.spec else None
        if not volume:
            raise VolumeError(f'persistentvolumeclaim "{claim}" is not bound')
        pv = await self.client.get(PersistentVolume, volume)
        spec = pv.spec
        path = (spec.hostPath.path if spec and spec.hostPath else None) or (
            spec.local.path if spec and spec.local else None
        )
        if not path:
            raise VolumeError(f"persistentvolume {volume} is neither hostPath nor local")
        return self._host_path(path, "DirectoryOrCreate")

    def cleanup(self) -> None:
        shutil.rmtree(self.memory_dir(), ignore_errors=True)
