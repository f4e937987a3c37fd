"""Smoke test of the images `make images` built (hack/images/build.sh): each OCI archive is unpacked into a
runtime bundle by umoci and run by runc, a real OCI runtime, as the image's own user.

Checks per image: the image config's user is the Dockerfile's numeric non-root USER and its entrypoint is the
Dockerfile's ENTRYPOINT; inside the container `id -u` prints that uid, the entrypoint's program resolves, and
the image's Python imports what its entrypoint needs (every runtime variant: SageMaker's training toolkit too), each
module from its compiled .pyc, and no compiler came along from the runtime's builder stage. Skips (with the
reason) when an archive is missing, so `make test` on a machine without built images skips them; `make
images-test` runs only these.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.images

REPO = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("KUBEPOOL_IMAGES_CACHE", Path.home() / ".cache/kubepool/images"))
TAG = os.environ.get("IMAGE_TAG", "dev")


@dataclass(frozen=True)
class Image:
    name: str  # archive name: <name>-<tag>.oci.tar
    ref: str  # the name in the archive's index
    dockerfile: str
    imports: str  # what `python -c` must import inside


# Every runtime variant carries SageMaker's training toolkit (framework-image scripts run unchanged), its C
# extension (`gethostname`, compiled in the builder stage) included.
TOOLKIT = "sagemaker_training.environment, gethostname"
RUNTIME_IMPORTS = f"import kubepool.runtime, ray, torch, xgboost, {TOOLKIT}"
IMAGES = [
    Image(
        "operator", f"docker.io/kubepool/operator:{TAG}", "operator/Dockerfile", "import kubepool.controller"
    ),
    Image(
        "runtime",
        f"docker.io/kubepool/runtime:{TAG}",
        "runtime-image/Dockerfile",
        RUNTIME_IMPORTS,
    ),
    Image(
        "runtime-cuda",
        f"docker.io/kubepool/runtime:{TAG}-cuda",
        "runtime-image/Dockerfile",
        RUNTIME_IMPORTS,
    ),
    # The real-node tier's runtime: no torch (hack/images/build.sh runtime-lean); archive runtime-<tag>-lean.
    Image(
        "runtime-lean",
        f"docker.io/kubepool/runtime:{TAG}-lean",
        "runtime-image/Dockerfile",
        f"import kubepool.runtime, ray, xgboost, {TOOLKIT}",
    ),
]


def _archive(image: Image) -> Path:
    stem = f"runtime-{TAG}-lean" if image.name == "runtime-lean" else f"{image.name}-{TAG}"
    return CACHE / f"{stem}.oci.tar"


def _sweep_stale_unpacks(smoke: Path) -> None:
    """Unpack dirs of runs that were killed (an unpacked runtime image is 11 GB): each dir is named after the
    pid of the test run that made it, so a dir whose process is gone is stale; live runs (other checkouts
    share the cache) keep theirs. A dir without a pid (older test code) goes after an hour."""
    for d in smoke.iterdir() if smoke.is_dir() else ():
        pid = d.name.split("-")[-2] if d.name.count("-") >= 2 else ""
        stale = not Path(f"/proc/{pid}").exists() if pid.isdigit() else time.time() - d.stat().st_mtime > 3600
        if stale:
            shutil.rmtree(d, ignore_errors=True)


def _dockerfile_final(dockerfile: str) -> tuple[str, list[str]]:
    """The final stage's USER and ENTRYPOINT (exec form), as the Dockerfile says them."""
    text = (REPO / dockerfile).read_text()
    final = text.split("\nFROM ")[-1]
    user = re.findall(r"^USER\s+(\S+)\s*$", final, re.M)[-1]
    entrypoint = json.loads(re.findall(r"^ENTRYPOINT\s+(\[.*\])\s*$", final, re.M)[-1])
    return user, entrypoint


@pytest.fixture(scope="module")
def tools() -> None:
    missing = [t for t in ("umoci", "runc") if shutil.which(t) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed (hack/images/build.sh installs them with apt-get)")
    if os.geteuid() != 0:
        pytest.skip("runc runs the bundles as root here (not rootless)")


@pytest.fixture(params=IMAGES, ids=[i.name for i in IMAGES])
def bundle(request: pytest.FixtureRequest, tools: None) -> Iterator[tuple[Image, Path, dict]]:
    image: Image = request.param
    archive = _archive(image)
    if not archive.exists():
        target = {"runtime-cuda": "make images-cuda", "runtime-lean": "hack/images/build.sh runtime-lean"}
        pytest.skip(f"{archive} not built: run `{target.get(image.name, 'make images')}` first")
    # Beside the archives, not in pytest's tmp_path: an unpacked runtime image is GBs, and pytest keeps the
    # last runs' temporary directories.
    _sweep_stale_unpacks(CACHE / "smoke")
    (CACHE / "smoke").mkdir(exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f"{image.name}-{os.getpid()}-", dir=CACHE / "smoke"))
    try:
        yield _unpack(image, archive, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _unpack(image: Image, archive: Path, tmp_path: Path) -> tuple[Image, Path, dict]:
    layout = tmp_path / "layout"
    with tarfile.open(archive) as tar:
        # The extraction filter exists from Python 3.11.4 on (Debian's 3.11.2 has none).
        tar.extractall(layout, **({"filter": "tar"} if hasattr(tarfile, "data_filter") else {}))
    index = json.loads((layout / "index.json").read_text())
    by_ref = {
        m.get("annotations", {}).get("org.opencontainers.image.ref.name"): m for m in index["manifests"]
    }
    assert image.ref in by_ref, f"{archive} names {list(by_ref)}, not {image.ref}"
    manifest = json.loads(_blob(layout, by_ref[image.ref]["digest"]))
    config = json.loads(_blob(layout, manifest["config"]["digest"]))
    out = tmp_path / "bundle"
    proc = subprocess.run(
        ["umoci", "unpack", "--image", f"{layout}:{image.ref}", str(out)], capture_output=True, text=True
    )
    assert proc.returncode == 0, f"umoci unpack failed: {proc.stderr[-4000:]}"
    shutil.rmtree(layout)  # the runtime image would take its size twice
    return image, out, config


def _blob(layout: Path, digest: str) -> bytes:
    algo, hexdigest = digest.split(":", 1)
    return (layout / "blobs" / algo / hexdigest).read_bytes()


def _run(bundle: Path, script: str, state: Path) -> subprocess.CompletedProcess[str]:
    config_path = bundle / "config.json"
    config = json.loads(config_path.read_text())
    config["process"]["terminal"] = False
    config["process"]["args"] = ["/bin/sh", "-c", script]
    config_path.write_text(json.dumps(config))
    return subprocess.run(
        [
            "runc",
            "--root",
            str(state),
            "run",
            "--bundle",
            str(bundle),
            f"kubepool-smoke-{uuid.uuid4().hex[:8]}",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.timeout(1800)  # unpacking the runtime image alone takes minutes
def test_image(bundle: tuple[Image, Path, dict], tmp_path: Path) -> None:
    image, path, config = bundle
    user, entrypoint = _dockerfile_final(image.dockerfile)
    uid = int(user.split(":")[0])
    assert uid != 0, f"{image.dockerfile} runs as root"

    # The image config: what any runtime (kubelet, docker, runc via umoci) starts.
    assert config["config"]["User"] == user
    assert config["config"]["Entrypoint"] == entrypoint
    if image.name.endswith("cuda"):
        # What the NVIDIA container runtime reads to mount the driver (hack/images/cuda-base.Dockerfile).
        assert {"NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=compute,utility"} <= set(
            config["config"]["Env"]
        )
    spec = json.loads((path / "config.json").read_text())["process"]
    assert spec["user"]["uid"] == uid
    assert spec["args"][: len(entrypoint)] == entrypoint

    script = f"id -u; command -v {entrypoint[0]} >/dev/null || {{ echo 'no {entrypoint[0]}' >&2; exit 3; }}; "
    # The builder stage's compiler stays there (the runtime's toolkit is compiled in it).
    script += (
        'for cc in gcc cc; do ! command -v $cc >/dev/null || { echo "$cc in the image" >&2; exit 4; }; done; '
    )
    # Every module those imports load comes from a .pyc: in a pod the root filesystem is read-only, so a module
    # without one is compiled again by each process at each start (python -v names it "code object from <x>.py").
    script += (
        f"if python -v -c '{image.imports}' 2>&1 | grep -E '^# code object from [^ ]+[.]py$' >&2; then "
        "echo 'compiled from source above: no .pyc in the image' >&2; exit 5; fi; "
    )
    script += f"python -c '{image.imports}; print(\"imports ok\")'"
    proc = _run(path, script, tmp_path / "runc")
    print(f"{image.name}: id -u -> {proc.stdout.splitlines()[:1]}, entrypoint {entrypoint}")
    assert proc.returncode == 0, (
        f"runc run exited {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr[-4000:]}"
    )
    lines = proc.stdout.splitlines()
    assert lines[0] == str(uid), proc.stdout
    assert lines[-1] == "imports ok", proc.stdout
