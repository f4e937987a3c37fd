"""A tiny wheel built in the test itself (a zip with its METADATA, WHEEL and RECORD), for pipRequirements tests
that must not depend on a package index: the package is surely not in the image, and an air-gapped install
from a wheelhouse is exactly what it exercises."""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import http.server
import subprocess
import sys
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path

PROBE = "kubepool-wheel-probe"
PROBE_MODULE = "kubepool_wheel_probe"
# A pin of a package the runtime image has in another version (its numpy is 2.x): what users of xgboost 2.1 write.
NUMPY_PIN = "1.26.4"
# The image's pyarrow 26 needs numpy 2 and Ray imports it: a job pinning numpy<2 in Ray mode pins pyarrow too.
PYARROW_PIN = "21.0.0"
WHEELS = Path.home() / ".cache" / "kubepool" / "wheels"


def build_probe_wheel(out: Path, version: str = "0.1", answer: str = "42") -> Path:
    """`kubepool_wheel_probe-<version>-py3-none-any.whl`, whose module has ANSWER = <answer>."""
    dist = f"{PROBE_MODULE}-{version}"
    files = {
        f"{PROBE_MODULE}/__init__.py": f"ANSWER = {answer}\n",
        f"{dist}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {PROBE}\nVersion: {version}\n",
        f"{dist}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: kubepool-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for name, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(text.encode())}")
    files[f"{dist}.dist-info/RECORD"] = "\n".join([*record, f"{dist}.dist-info/RECORD,,"]) + "\n"
    out.mkdir(parents=True, exist_ok=True)
    wheel = out / f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
    return wheel


def cached_wheel(name: str, version: str, tag: str = "cp311-*", why: str = "") -> Path:
    """A package's wheel (`tag`: cp311 for this machine, `py3-none-any` for a pure one), downloaded once into the
    wheel cache; `why` is said while downloading (a published wheel read as a test oracle, never installed)."""
    stem = f"{name.replace('-', '_')}-{version}-{tag}.whl"
    found = sorted(WHEELS.glob(stem))
    if not found:
        if why:
            print(f"downloading {name} {version} ({why})", file=sys.stderr)
        proc = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(WHEELS),
                               f"{name}=={version}"], capture_output=True, text=True, timeout=300)
        found = sorted(WHEELS.glob(stem))
        assert proc.returncode == 0 and found, f"cannot download {name} {version} from the package index:\n{proc.stderr}"
    return found[0]


def numpy_wheel() -> Path:
    return cached_wheel("numpy", NUMPY_PIN)


@contextlib.contextmanager
def simple_index(root: Path, wheels: dict[str, Path]) -> Iterator[str]:
    """A PEP 503 simple index on loopback (the local nodes' pods share the host's network) serving `wheels`
    (project name -> wheel file) and nothing else; yields its URL."""
    (root / "wheels").mkdir(parents=True, exist_ok=True)
    for name, wheel in wheels.items():
        served = root / "wheels" / wheel.name
        if served != wheel:
            served.symlink_to(wheel)
        page = root / "simple" / name
        page.mkdir(parents=True)
        (page / "index.html").write_text(f'<a href="../../wheels/{wheel.name}">{wheel.name}</a>\n')
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/simple"
    finally:
        server.shutdown()
