"""SageMaker's checkpoints (checkpoint_s3_uri, /opt/ml/checkpoints) with an S3 location: what the prefix holds is
restored into the checkpoint dir before the payload starts, so a retried attempt (backoffLimit) resumes where the
last one left off; while the payload runs, new and changed files are uploaded every SYNC_SECONDS and once more
when it ends. Instances share the prefix, as on SageMaker: scripts that checkpoint on several hosts name their
files apart. (A PVC location is mounted at the checkpoint dir instead: nothing to sync.)"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from pathlib import Path

from kubepool.contract import OutputTarget
from kubepool.runtime.channels import list_s3, parse_s3_uri, relative_name, s3_client

SYNC_SECONDS = 10.0


def _key(prefix: str, rel: str) -> str:
    return f"{prefix.rstrip('/')}/{rel}" if prefix else rel


def restore(target: OutputTarget, local: Path, env: Mapping[str, str]) -> list[str]:
    """Download the prefix's objects into `local`; returns their paths relative to it."""
    bucket, prefix = parse_s3_uri(target.s3_uri or "")
    client = s3_client(target.s3_endpoint_url, env)
    base = prefix.rstrip("/") + "/" if prefix else ""
    rels = [(key, relative_name(key, base)) for key in list_s3(client, bucket, base)]  # all checked before any write
    for key, rel in rels:
        dest = local / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        client.download_file(bucket, key, str(dest))
    return [rel for _, rel in rels]


class Syncer:
    """Uploads what changed in `local` (by size and mtime) every SYNC_SECONDS, and at `stop()`."""

    def __init__(self, target: OutputTarget, local: Path, env: Mapping[str, str]) -> None:
        self.bucket, self.prefix = parse_s3_uri(target.s3_uri or "")
        self.client = s3_client(target.s3_endpoint_url, env)
        self.local = local
        self.seen: dict[str, tuple[int, int]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="checkpoint-sync", daemon=True)

    def mark_current(self) -> None:
        """What is there now (just restored) is already in the store."""
        self.seen = self._state()

    def _state(self) -> dict[str, tuple[int, int]]:
        out = {}
        for path in self.local.rglob("*"):
            if path.is_file():
                st = path.stat()
                out[path.relative_to(self.local).as_posix()] = (st.st_size, st.st_mtime_ns)
        return out

    def sync(self) -> list[str]:
        now = self._state()
        changed = [rel for rel, sig in sorted(now.items()) if self.seen.get(rel) != sig]
        for rel in changed:
            self.client.upload_file(str(self.local / rel), self.bucket, _key(self.prefix, rel))
            self.seen[rel] = now[rel]
        return changed

    def _loop(self) -> None:
        while not self._stop.wait(SYNC_SECONDS):
            try:
                self.sync()
            except Exception as e:  # noqa: BLE001 - a failed round is retried next round and at the end
                print(f"kubepool: checkpoint sync failed, retrying: {type(e).__name__}: {e}", flush=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> list[str]:
        """Stop the periodic rounds; one last round. Raises what that round raises."""
        self._stop.set()
        self._thread.join()
        return self.sync()
