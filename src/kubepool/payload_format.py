"""The payload format: how a job's code is packed into its payload ConfigMap's keys (the SDK's side) and
unpacked from the mounted ConfigMap (the runtime's side). Pure: both import it, neither imports the other,
and the runtime gets no API client with it. The ConfigMap object itself is built by `kubepool.jobs.payload`.

The SDK writes the payload of job `J` into the ConfigMap `naming.payload_configmap_name(J)` (owned by the
MLJob, so it is deleted with it) and sets `spec.code.configMap` to that name. The operator mounts the whole
ConfigMap at `contract.PAYLOAD_DIR`, so every key appears there as one flat file.

Format (version 1):

* One key per file. Text files (valid UTF-8) go to `data`, all others to `binaryData`; a mounted ConfigMap
  shows both the same way, as the file's original bytes.
* Keys are the file's relative path with `/` written as `__` and any character a key may not hold
  (`[-._a-zA-Z0-9]`) written as `_`; a key that would collide or exceed 253 characters becomes
  `f<n>-<hash>`. Keys are therefore NOT reversible: the manifest is the only source of paths.
* The key `__manifest__.json` (in `data`) is `{"version": 1, "files": {"<key>": {"path": "<relative
  path>", "mode": <int>}}}`: `path` is POSIX, relative, without `..`; `mode` is the file's permission bits
  (0o755 for executables, else 0o644).

The runtime materialises the payload with `unpack(PAYLOAD_DIR, workdir)`: it reads
`PAYLOAD_DIR/__manifest__.json` and copies each `PAYLOAD_DIR/<key>` to `<workdir>/<path>` with `mode`
(creating parent directories), then runs the entrypoint from `<workdir>`. A ConfigMap holds at most 1 MiB; payloads over `MAX_PAYLOAD_BYTES` are refused
with `PayloadTooLarge`, which names the alternatives (a PersistentVolumeClaim in `spec.code`, or the image).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

MANIFEST_KEY = "__manifest__.json"
MANIFEST_VERSION = 1
# The API server stores at most 1 MiB per ConfigMap (plus metadata); leave room for keys and the manifest.
MAX_PAYLOAD_BYTES = 900 * 1024
MAX_KEY = 253
# Never shipped: caches and VCS metadata are large and useless to the job.
SKIP_DIRS = frozenset({"__pycache__", ".git", ".hg", ".svn", ".mypy_cache", ".pytest_cache", ".ruff_cache"})
SKIP_SUFFIXES = (".pyc", ".pyo")
_BAD_KEY_CHARS = re.compile(r"[^-._a-zA-Z0-9]")


class PayloadTooLarge(ValueError):
    """The payload does not fit in a ConfigMap."""


@dataclass(frozen=True)
class PayloadFile:
    """One file of a payload: POSIX relative path, contents and permission bits."""

    path: str
    content: bytes
    mode: int = 0o644


@dataclass(frozen=True)
class Payload:
    """A packed payload: the ConfigMap's `data` and `binaryData` (base64) maps, manifest included."""

    data: dict[str, str]
    binary_data: dict[str, str]

    @property
    def size(self) -> int:
        """Bytes the ConfigMap's contents take on the API server."""
        return sum(len(k) + len(v.encode()) for k, v in self.data.items()) + sum(
            len(k) + len(v) for k, v in self.binary_data.items()
        )


def _key_for(path: str, taken: set[str], index: int) -> str:
    key = _BAD_KEY_CHARS.sub("_", path.replace("/", "__"))
    if key in taken or key == MANIFEST_KEY or len(key) > MAX_KEY or key in {".", ".."}:
        key = f"f{index}-{hashlib.sha256(path.encode()).hexdigest()[:12]}"
    return key


def _check_path(path: str) -> str:
    p = PurePosixPath(path)
    if p.is_absolute() or ".." in p.parts or not p.parts:
        raise ValueError(f"payload path {path!r} must be relative and must not contain '..'")
    return p.as_posix()


def pack(files: Iterable[PayloadFile], *, limit: int = MAX_PAYLOAD_BYTES) -> Payload:
    """Pack files into ConfigMap maps with the version-1 manifest.

    Args:
        files: The payload's files; paths are POSIX and relative.
        limit: Largest packed size accepted, in bytes.

    Returns:
        The packed payload.

    Raises:
        PayloadTooLarge: The packed payload exceeds `limit`.
        ValueError: A path is absolute, contains `..`, or appears twice.
    """
    data: dict[str, str] = {}
    binary: dict[str, str] = {}
    entries: dict[str, dict[str, object]] = {}
    seen: set[str] = set()
    for index, f in enumerate(files):
        path = _check_path(f.path)
        if path in seen:
            raise ValueError(f"payload path {path!r} appears twice")
        seen.add(path)
        key = _key_for(path, set(entries), index)
        try:
            data[key] = f.content.decode("utf-8")
        except UnicodeDecodeError:
            binary[key] = base64.b64encode(f.content).decode()
        entries[key] = {"path": path, "mode": f.mode}
    data[MANIFEST_KEY] = json.dumps({"version": MANIFEST_VERSION, "files": entries}, sort_keys=True)
    payload = Payload(data, binary)
    if payload.size > limit:
        raise PayloadTooLarge(
            f"the payload is {payload.size / 1024:.0f} KiB packed, over the {limit // 1024} KiB a ConfigMap can "
            "carry; put the code on a PersistentVolumeClaim (MLJob spec.code.persistentVolumeClaim) or bake it "
            "into the image (spec.image, entrypoint path inside the image)"
        )
    return payload


def _mode(path: Path) -> int:
    return 0o755 if path.stat().st_mode & stat.S_IXUSR else 0o644


def file_payload(path: Path, arcname: str | None = None) -> list[PayloadFile]:
    """One local file as a payload (stored under its base name unless `arcname` is given)."""
    if not path.is_file():
        raise FileNotFoundError(f"payload file {path} does not exist")
    return [PayloadFile(arcname or path.name, path.read_bytes(), _mode(path))]


def directory_payload(root: Path) -> list[PayloadFile]:
    """Every file under `root` (symlinks followed), minus caches and VCS metadata, with paths relative to it."""
    if not root.is_dir():
        raise NotADirectoryError(f"payload directory {root} does not exist")
    out: list[PayloadFile] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
        for name in sorted(filenames):
            if name.endswith(SKIP_SUFFIXES):
                continue
            full = Path(dirpath, name)
            if full.is_file():
                out.append(PayloadFile(full.relative_to(root).as_posix(), full.read_bytes(), _mode(full)))
    return out


def unpack(mounted: Path, dest: Path) -> list[Path]:
    """Materialise a mounted payload ConfigMap (the runtime side of `pack`).

    Args:
        mounted: Directory where the ConfigMap is mounted (one file per key), e.g. `contract.PAYLOAD_DIR`.
        dest: Writable directory to create the payload's tree in.

    Returns:
        The files written. A directory without a manifest is copied as is, key by key.
    """
    manifest_file = mounted / MANIFEST_KEY
    if manifest_file.is_file():
        manifest = json.loads(manifest_file.read_text())
        if manifest.get("version") != MANIFEST_VERSION:
            raise ValueError(f"payload manifest version {manifest.get('version')} is not {MANIFEST_VERSION}")
        entries = {key: (_check_path(e["path"]), int(e["mode"])) for key, e in manifest["files"].items()}
    else:
        entries = {p.name: (p.name, 0o644) for p in mounted.iterdir() if p.is_file() and not p.name.startswith(".")}
    written: list[Path] = []
    for key, (path, mode) in sorted(entries.items()):
        target = dest / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes((mounted / key).read_bytes())
        target.chmod(mode)
        written.append(target)
    return written
