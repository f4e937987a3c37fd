"""Images of the real nodes: the pause image, built here, and the images `make images` built, imported into
each node's containerd as `kind load` does (`ctr -n k8s.io images import`); nothing is ever pulled.

The pause image is `gcc -static` of pause.c from the pinned kubernetes module, packed as a one-layer OCI
archive by `oci_archive` (pure). Archives are cached in ~/.cache/kubepool/realnode/.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import time
from collections.abc import Callable
from pathlib import Path

from kubepool.local.realnode.configs import PAUSE_IMAGE

Log = Callable[[str], None]
CACHE = Path(os.environ.get("KUBEPOOL_CACHE") or Path.home() / ".cache" / "kubepool")
IMAGES_CACHE = Path(os.environ.get("KUBEPOOL_IMAGES_CACHE") or CACHE / "images")
PAUSE_VERSION = PAUSE_IMAGE.rsplit(":", 1)[1]
# name in `make images`' cache -> the image reference pods use. runtime-lean is the runtime without torch
# (hack/images/build.sh runtime-lean); the full runtime (7 GB unpacked, per node) only when asked for;
# runtime-marked is runtime-lean plus a marker file (/etc/kubepool-image), a second runtime image for tests of
# a pool's `spec.image` (its layers are runtime-lean's: a node with both unpacks the marker only).
KNOWN_IMAGES = {
    "operator": "docker.io/kubepool/operator:dev",
    "runtime-lean": "docker.io/kubepool/runtime:dev-lean",
    "runtime": "docker.io/kubepool/runtime:dev",
    "runtime-marked": "docker.io/kubepool/runtime:dev-lean-marked",
}
DEFAULT_IMAGES = ("operator", "runtime-lean")
# Their files in that cache (hack/images/build.sh names them <image>-<tag>).
ARCHIVE_STEMS = {"operator": "operator-dev", "runtime-lean": "runtime-dev-lean", "runtime": "runtime-dev",
                 "runtime-marked": "runtime-dev-lean-marked"}


class ImageError(RuntimeError):
    """An image could not be built or imported; the message says which and why."""


def _tar_bytes(files: dict[str, tuple[bytes, int]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, (data, mode) in sorted(files.items()):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), mode, 0
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _blob(data: bytes) -> tuple[str, bytes]:
    return "sha256:" + hashlib.sha256(data).hexdigest(), data


def oci_archive(ref: str, files: dict[str, tuple[bytes, int]], entrypoint: list[str], user: str) -> tuple[bytes, str]:
    """A one-layer OCI image archive (an image layout in a tar) of `files` {path: (content, mode)}, named
    `ref`; returns (archive bytes, manifest digest). Uncompressed layer: its digest is its diff_id."""
    layer_digest, layer = _blob(_tar_bytes(files))
    config_digest, config = _blob(json.dumps({
        "architecture": "amd64", "os": "linux",
        "config": {"Entrypoint": entrypoint, "User": user},
        "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
        "history": [{"created_by": "kubepool.local.realnode.images"}],
    }, sort_keys=True).encode())
    manifest_digest, manifest = _blob(json.dumps({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest,
                   "size": len(config)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layer_digest,
                    "size": len(layer)}],
    }, sort_keys=True).encode())
    index = json.dumps({
        "schemaVersion": 2,
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": manifest_digest,
            "size": len(manifest),
            "annotations": {"io.containerd.image.name": ref, "org.opencontainers.image.ref.name": ref},
        }],
    }, sort_keys=True).encode()
    layout = {"oci-layout": (b'{"imageLayoutVersion":"1.0.0"}', 0o644), "index.json": (index, 0o644)}
    for digest, data in ((layer_digest, layer), (config_digest, config), (manifest_digest, manifest)):
        layout[f"blobs/sha256/{digest.split(':', 1)[1]}"] = (data, 0o644)
    return _tar_bytes(layout), manifest_digest


def pause_source(kube_version: str) -> Path:
    modcache = subprocess.run(["go", "env", "GOMODCACHE"], capture_output=True, text=True, check=True).stdout.strip()
    src = Path(modcache) / f"k8s.io/kubernetes@{kube_version}" / "build" / "pause" / "linux" / "pause.c"
    if not src.exists():
        raise ImageError(f"{src} is missing: hack/k8s-bin/build.sh downloads the kubernetes module that has it")
    return src


def ensure_pause(kube_version: str, say: Log) -> tuple[Path, str]:
    """The pause image's archive (built once: gcc -static, a few KB) and its manifest digest."""
    src = pause_source(kube_version)
    key = hashlib.sha256(src.read_bytes() + PAUSE_IMAGE.encode()).hexdigest()[:12]
    archive = CACHE / "realnode" / f"pause-{PAUSE_VERSION}-{key}.oci.tar"
    digest_file = archive.with_suffix(".digest")
    if archive.exists() and digest_file.exists():
        return archive, digest_file.read_text().strip()
    archive.parent.mkdir(parents=True, exist_ok=True)
    binary = archive.with_suffix(".bin")
    proc = subprocess.run(["gcc", "-Os", "-static", "-Wall", f"-DVERSION=v{PAUSE_VERSION}-kubepool", "-o",
                           str(binary), str(src)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise ImageError(f"gcc -static {src} failed: {proc.stderr.strip()}")
    subprocess.run(["strip", str(binary)], check=False)
    data, digest = oci_archive(PAUSE_IMAGE, {"pause": (binary.read_bytes(), 0o755)}, ["/pause"], "65535:65535")
    binary.unlink()
    tmp = archive.with_suffix(".tmp")
    tmp.write_bytes(data)
    tmp.replace(archive)
    digest_file.write_text(digest + "\n")
    say(f"  pause image: built {PAUSE_IMAGE} from {src.name} ({len(data) // 1024} KiB, {digest[:19]})")
    return archive, digest


def built_image(name: str) -> tuple[Path, str] | None:
    """(archive, manifest digest) of an image `make images` built, None when it has not been built."""
    stem = ARCHIVE_STEMS[name]
    archive = IMAGES_CACHE / f"{stem}.oci.tar"
    digest = IMAGES_CACHE / f"{stem}.digest"
    if not (archive.exists() and digest.exists()):
        return None
    return archive, digest.read_text().strip()


# An imported image takes its archive (the content store keeps the compressed layers) plus the unpacked
# snapshots, ~2-3x the archive: measured 2.9 GB per node for operator (102 MB) + runtime-lean (924 MB).
DISK_PER_ARCHIVE_BYTE = 3.5
DISK_MARGIN = 2 << 30


def disk_needed(layer_sizes: list[int]) -> int:
    """Free bytes `import_image` needs for compressed layers of these sizes, with a margin for everyone else
    (pure)."""
    return int(sum(layer_sizes) * DISK_PER_ARCHIVE_BYTE) + DISK_MARGIN if layer_sizes else 0


def archive_layers(archive: Path) -> dict[str, int]:
    """Compressed layer digest -> size of the image in an OCI archive; a file that is no OCI archive counts as
    one layer of its own size."""
    try:
        with tarfile.open(archive, "r:") as tar:  # uncompressed, as buildah and oci_archive write them
            index = json.load(tar.extractfile("index.json"))  # type: ignore[arg-type]
            digest = index["manifests"][0]["digest"].split(":", 1)[1]
            manifest = json.load(tar.extractfile(f"blobs/sha256/{digest}"))  # type: ignore[arg-type]
        return {layer["digest"]: layer["size"] for layer in manifest["layers"]}
    except (tarfile.TarError, OSError, KeyError, IndexError, ValueError, AttributeError):
        return {str(archive): archive.stat().st_size}


def layer_sizes(imports: list[tuple[str, dict[str, int]]]) -> list[int]:
    """Sizes of what (node, layers) imports store (pure): a layer that images share (runtime-marked is
    runtime-lean plus a marker) is stored once per node, containerd keying content and snapshots by digest."""
    per_node: dict[str, dict[str, int]] = {}
    for node, layers in imports:
        per_node.setdefault(node, {}).update(layers)
    return [size for layers in per_node.values() for size in layers.values()]


def check_disk(where: Path, imports: list[tuple[str, Path]]) -> None:
    """Refuse to import (node, archive) pairs when the filesystem of `where` cannot hold the images: a full
    disk breaks every process on the machine, not just the nodes."""
    need = disk_needed(layer_sizes([(node, archive_layers(archive)) for node, archive in imports]))
    free = shutil.disk_usage(where).free
    if need > free:
        raise ImageError(
            f"importing {len(imports)} image archive(s) into the nodes' containerd needs ~{need / 2**30:.1f} GiB "
            f"free on the filesystem of {where} (unpacked images + {DISK_MARGIN >> 30} GiB margin), "
            f"{free / 2**30:.1f} GiB are: free space, or use fewer nodes or images (--real-node-images)"
        )


def _ctr(ctr: str, socket: Path, *args: str, timeout: float = 60) -> str:
    proc = subprocess.run([ctr, f"--address={socket}", "--namespace=k8s.io", *args], capture_output=True,
                          text=True, timeout=timeout)
    if proc.returncode != 0:
        raise ImageError(f"ctr {' '.join(args)} failed: {proc.stderr.strip()}")
    return proc.stdout


def imported(ctr: str, socket: Path) -> dict[str, str]:
    """ref -> manifest digest of the images in a node's containerd."""
    out = _ctr(ctr, socket, "images", "ls")
    rows = [line.split() for line in out.splitlines()[1:]]
    return {r[0]: r[2] for r in rows if len(r) >= 3}


def import_image(ctr: str, socket: Path, node: str, ref: str, archive: Path, digest: str, say: Log) -> None:
    """Import `archive` unless the node already has `ref` at `digest`."""
    if imported(ctr, socket).get(ref) == digest:
        return
    size = archive.stat().st_size >> 20
    say(f"  {node}: importing {ref} ({size} MiB archive; ~15 MiB/s on 2 busy cores)")
    t0 = time.monotonic()
    # Unpacked for overlayfs now, so the first pod does not wait for it.
    _ctr(ctr, socket, "images", "import", "--snapshotter=overlayfs", str(archive),
         timeout=1800)
    if imported(ctr, socket).get(ref) != digest:
        raise ImageError(f"ctr import of {archive} did not give {ref}@{digest} on {node}")
    say(f"  {node}: {ref} imported in {time.monotonic() - t0:.0f}s")
