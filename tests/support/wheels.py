"""A tiny wheel built in the test itself (a zip with its METADATA, WHEEL and RECORD), for pipRequirements tests
that must not depend on a package index: the package is surely not in the image, and an air-gapped install
from a wheelhouse is exactly what it exercises."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path

PROBE = "kubepool-wheel-probe"
PROBE_MODULE = "kubepool_wheel_probe"


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
