"""Pack a root filesystem tar (mmdebstrap's output) as a one-layer OCI image layout.

    python3 oci_base.py ROOTFS.tar LAYOUT_DIR TAG [CREATED_BY]

The tar becomes the layer blob as it is (uncompressed, so its digest is also its diff_id); the layout can then
be used as `oci:LAYOUT_DIR:TAG` by buildah/skopeo. Stdlib only: it runs before any builder exists.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import sys
from pathlib import Path


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def _put_blob(blobs: Path, data: bytes) -> tuple[str, int]:
    digest = hashlib.sha256(data).hexdigest()
    (blobs / digest).write_bytes(data)
    return "sha256:" + digest, len(data)


def pack(rootfs_tar: Path, layout: Path, tag: str, created_by: str) -> str:
    blobs = layout / "blobs" / "sha256"
    blobs.mkdir(parents=True, exist_ok=True)
    layer_hex = _sha256_file(rootfs_tar)
    layer_size = rootfs_tar.stat().st_size
    # Moved, not copied: the tar is a build intermediate.
    os.replace(rootfs_tar, blobs / layer_hex)

    # The tar's mtime, not now: packing the same rootfs twice gives the same digest.
    created = datetime.datetime.fromtimestamp((blobs / layer_hex).stat().st_mtime, datetime.UTC)
    created_s = created.strftime("%Y-%m-%dT%H:%M:%SZ")
    config = {
        "created": created_s,
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8"],
            "Cmd": ["python3"],
        },
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + layer_hex]},
        "history": [{"created": created_s, "created_by": created_by}],
    }
    config_digest, config_size = _put_blob(blobs, json.dumps(config, sort_keys=True).encode())
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": config_digest,
            "size": config_size,
        },
        "layers": [
            {
                "mediaType": "application/vnd.oci.image.layer.v1.tar",
                "digest": "sha256:" + layer_hex,
                "size": layer_size,
            }
        ],
    }
    manifest_digest, manifest_size = _put_blob(blobs, json.dumps(manifest, sort_keys=True).encode())
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [
            {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": manifest_digest,
                "size": manifest_size,
                "platform": {"architecture": "amd64", "os": "linux"},
                "annotations": {"org.opencontainers.image.ref.name": tag},
            }
        ],
    }
    (layout / "oci-layout").write_text(json.dumps({"imageLayoutVersion": "1.0.0"}))
    (layout / "index.json").write_text(json.dumps(index, sort_keys=True))
    return manifest_digest


if __name__ == "__main__":
    if len(sys.argv) not in (4, 5):
        sys.exit(__doc__)
    print(
        pack(
            Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], sys.argv[4] if len(sys.argv) == 5 else "rootfs"
        )
    )
