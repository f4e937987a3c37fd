"""Which MLJob owns a job's output prefix (`<location>/<job>/`, SageMaker's layout, keyed by the job's name).

A job deleted and created again under its name would write its archives (and its results) over the earlier
job's, or aggregate its hosts' archives with the earlier job's. Each instance therefore claims the prefix before
its payload starts: a marker object there names the job's uid. The first claim writes it; a claim by the same
uid (another instance, a retry) passes; a claim by another uid is refused before anything is written, and the
instance fails saying whose prefix it is and what to do. Deleting the marker (with the earlier outputs, or
after keeping them elsewhere) gives the prefix to the next job of that name.

The store is outputs' (`put(local, uri)`, `get(uri, local) -> bool`): an S3 prefix or a mounted volume."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Protocol

MARKER = "kubepool-owner.json"


class Store(Protocol):
    def put(self, local: Path, uri: str) -> None: ...

    def get(self, uri: str, local: Path) -> bool: ...


class OutputLocationOwned(RuntimeError):
    """The output prefix belongs to another MLJob of this name (an earlier one, deleted since)."""


def marker_uri(location: str, job_name: str) -> str:
    return f"{location.rstrip('/')}/{job_name}/{MARKER}"


def claim(store: Store, location: str, namespace: str, job_name: str, uid: str) -> str:
    """Claim `<location>/<job_name>/` for the job `uid`; returns the marker's URI. Raises OutputLocationOwned when
    another uid's marker is there."""
    uri = marker_uri(location, job_name)
    with tempfile.TemporaryDirectory(prefix="kubepool-owner-") as tmp:
        local = Path(tmp) / MARKER
        if store.get(uri, local):
            try:
                owner = json.loads(local.read_text()).get("uid")
            except ValueError:
                owner = None
            if owner == uid:
                return uri
            raise OutputLocationOwned(
                f"the output location {location.rstrip('/')}/{job_name}/ holds the outputs of another MLJob "
                f"{namespace}/{job_name} (uid {owner}): nothing was written. Keep them elsewhere and delete {uri}, "
                "or give this job another spec.output location or name")
        local.write_text(json.dumps({"uid": uid, "namespace": namespace, "job": job_name}))
        store.put(local, uri)
    return uri
