"""What an instance keeps when its payload ends (spec.output, SageMaker's OutputDataConfig): /opt/ml/model and
/opt/ml/output/data as model.tar.gz and output.tar.gz under <location>/<job>/output/ (instance 0's, always, as
SageMaker always writes them) and under <location>/<job>/output/<host>/ (another instance's, when it wrote any).
SageMaker merges every host's files into one archive; here each instance's are kept apart, so no host can
overwrite another's. Also /opt/ml/output/failure, which becomes the failure message as on SageMaker."""

from __future__ import annotations

import os
import tarfile
import tempfile
from collections.abc import Mapping
from pathlib import Path

from kubepool.contract import InstanceIdentity, JobContract, OutputTarget, output_artifacts
from kubepool.runtime.channels import parse_s3_uri, s3_client
from kubepool.runtime.sagemaker import Layout

FAILURE_MAX_CHARS = 1024  # SageMaker's FailureReason: the first 1024 characters of the file


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


def _store(target: OutputTarget, local: Path, uri: str, env: Mapping[str, str]) -> None:
    if target.s3_uri:
        bucket, key = parse_s3_uri(uri)
        s3_client(target.s3_endpoint_url, env).upload_file(str(local), bucket, key)
        return
    dest = Path(target.local_path or "") / uri[len(target.location.rstrip("/")) + 1:]
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".part")
    tmp.write_bytes(local.read_bytes())
    os.replace(tmp, dest)  # a reader never sees half an archive


def keep(contract: JobContract, me: InstanceIdentity, layout: Layout, env: Mapping[str, str]) -> list[str]:
    """Store this instance's outputs; returns where they went (nothing without spec.output)."""
    target = contract.output
    if target is None:
        return []
    host = None if me.instance_id == 0 else me.host
    model_uri, data_uri = output_artifacts(target.location, contract.job_name, host)
    items = [(layout.model_dir, model_uri), (layout.output_data_dir, data_uri)]
    if host is not None:  # instance 0's archives always exist; another's only when it wrote something
        items = [(d, u) for d, u in items if d.is_dir() and any(d.iterdir())]
    kept = []
    with tempfile.TemporaryDirectory(prefix="kubepool-outputs-") as tmp:
        for src, uri in items:
            local = Path(tmp) / Path(uri).name
            src.mkdir(parents=True, exist_ok=True)
            archive(src, local)
            _store(target, local, uri, env)
            kept.append(uri)
    return kept
