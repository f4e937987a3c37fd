"""What an instance keeps when its payload ends (spec.output, SageMaker's OutputDataConfig): /opt/ml/model and
/opt/ml/output/data as model.tar.gz and output.tar.gz under <location>/<job>/output/, as SageMaker keeps them:
one archive of every host's files together ("SageMaker aggregates the result in a TAR file"), so a job whose
model is saved by any host, not only the first, has it in model.tar.gz. Each instance that wrote something also
keeps its own archive under <location>/<job>/output/<host>/, and then rewrites the aggregate from every host's
archive there; where two hosts wrote the same path (SageMaker asks that they don't), the lowest host number's
file is the aggregate's and each host's own stays in its archive. Also /opt/ml/output/failure, which becomes the
failure message as on SageMaker."""

from __future__ import annotations

import os
import tarfile
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from kubepool.contract import InstanceIdentity, JobContract, OutputTarget, output_artifacts
from kubepool.runtime import ownership
from kubepool.runtime.channels import parse_s3_uri, s3_client
from kubepool.runtime.sagemaker import Layout

FAILURE_MAX_CHARS = 1024  # SageMaker's FailureReason: the first 1024 characters of the file
MODEL, DATA = 0, 1  # index in output_artifacts()


def failure_reason(layout: Layout) -> str | None:
    """The payload's own words for why it failed (/opt/ml/output/failure), if it wrote any."""
    path = layout.output_dir / "failure"
    try:
        text = path.read_text(errors="replace").strip()
    except OSError:
        return None
    return text[:FAILURE_MAX_CHARS] or None


def archive(src: Path, dest: Path) -> None:
    """A gzipped tar of the directory's contents (paths relative to it; an empty directory gives an empty one)."""
    with tarfile.open(dest, "w:gz") as tar:
        for path in sorted(src.rglob("*")):
            tar.add(path, arcname=path.relative_to(src).as_posix(), recursive=False)


def merge(parts: Sequence[Path], dest: Path) -> None:
    """One gzipped tar of the members of `parts` (host order); a path already taken keeps the first host's."""
    taken: set[str] = set()
    with tarfile.open(dest, "w:gz") as out:
        for part in parts:
            with tarfile.open(part, "r:gz") as tar:
                for member in tar:
                    if member.name in taken or not (member.isfile() or member.isdir()):
                        continue
                    taken.add(member.name)
                    out.addfile(member, tar.extractfile(member) if member.isfile() else None)


class _Store:
    """The output location: an S3 prefix or a mounted volume (a PVC)."""

    def __init__(self, target: OutputTarget, env: Mapping[str, str]) -> None:
        self.target = target
        self.s3: Any = s3_client(target.s3_endpoint_url, env) if target.s3_uri else None

    def _path(self, uri: str) -> Path:
        return Path(self.target.local_path or "") / uri[len(self.target.location.rstrip("/")) + 1:]

    def put(self, local: Path, uri: str) -> None:
        if self.s3 is not None:
            self.s3.upload_file(str(local), *parse_s3_uri(uri))
            return
        dest = self._path(uri)
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(f"{dest.name}.{os.getpid()}.part")
        tmp.write_bytes(local.read_bytes())
        os.replace(tmp, dest)  # a reader never sees half an archive

    def version(self, uri: str) -> str | None:
        """What identifies this stored archive's content (None: there is none)."""
        try:
            if self.s3 is not None:
                bucket, key = parse_s3_uri(uri)
                return str(self.s3.head_object(Bucket=bucket, Key=key)["ETag"])
            st = self._path(uri).stat()
        except Exception as e:  # noqa: BLE001 - only "not there" is an answer; anything else is raised
            if _missing(e):
                return None
            raise
        return f"{st.st_mtime_ns}:{st.st_size}"

    def get(self, uri: str, local: Path) -> bool:
        try:
            if self.s3 is not None:
                self.s3.download_file(*parse_s3_uri(uri), str(local))
            else:
                local.write_bytes(self._path(uri).read_bytes())
        except Exception as e:  # noqa: BLE001 - only "not there" is an answer; anything else is raised
            if _missing(e):
                return False
            raise
        return True


def _missing(e: Exception) -> bool:
    """A file or an S3 object that is not there (boto3 says so with a ClientError's code)."""
    code = (getattr(e, "response", None) or {}).get("Error", {}).get("Code")
    return isinstance(e, FileNotFoundError) or code in ("404", "NoSuchKey", "NotFound")


def aggregate(contract: JobContract, store: _Store, kind: int, tmp: Path) -> str:
    """Rewrite the job's aggregate archive from every host's; again while a host's archive changed meanwhile
    (another instance finishing at the same time), so the last writer's aggregate has every host's."""
    target = store.target
    top = output_artifacts(target.location, contract.job_name)[kind]
    hosts = [i.host for i in sorted(contract.instances, key=lambda i: i.instance_id)]
    uris = {h: output_artifacts(target.location, contract.job_name, h)[kind] for h in hosts}
    for _ in range(len(hosts) + 2):  # bounded: a host rewriting its archive forever cannot hold this instance
        seen = {h: store.version(u) for h, u in uris.items()}
        parts = []
        for h in hosts:
            local = tmp / f"{h}-{kind}.tar.gz"
            if seen[h] is not None and store.get(uris[h], local):
                parts.append(local)
        merged = tmp / f"aggregate-{kind}.tar.gz"
        merge(parts, merged)
        store.put(merged, top)
        if {h: store.version(u) for h, u in uris.items()} == seen:
            break
    return top


def claim(contract: JobContract, env: Mapping[str, str]) -> str | None:
    """Before the payload: the job's output prefix is this job's (runtime.ownership), else it raises."""
    t = contract.output
    return None if t is None else ownership.claim(_Store(t, env), t.location, contract.namespace, contract.job_name, contract.job_uid)


def keep(contract: JobContract, me: InstanceIdentity, layout: Layout, env: Mapping[str, str]) -> list[str]:
    """Store this instance's outputs and the job's aggregate; returns where they went (nothing without
    spec.output)."""
    target = contract.output
    if target is None:
        return []
    store = _Store(target, env)
    mine = output_artifacts(target.location, contract.job_name, me.host)
    kept = []
    with tempfile.TemporaryDirectory(prefix="kubepool-outputs-") as tmp:
        for kind, src in ((MODEL, layout.model_dir), (DATA, layout.output_data_dir)):
            if src.is_dir() and any(src.iterdir()):
                local = Path(tmp) / f"mine-{kind}.tar.gz"
                archive(src, local)
                store.put(local, mine[kind])
                kept.append(mine[kind])
        if kept or me.instance_id == 0:  # instance 0's aggregate always exists, as SageMaker's archives do
            kept.extend(aggregate(contract, store, kind, Path(tmp)) for kind in (MODEL, DATA))
    return kept
