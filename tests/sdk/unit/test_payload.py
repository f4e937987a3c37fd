"""Payload packing: keys, manifest, binary files, limits, ownership, and the runtime's unpack (no cluster)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kubepool.jobs.payload import (
    MANIFEST_KEY,
    PayloadFile,
    PayloadTooLarge,
    configmap,
    directory_payload,
    file_payload,
    pack,
    unpack,
)

KEY = re.compile(r"^[-._a-zA-Z0-9]+$")


def mount(payload_data: dict[str, str], binary: dict[str, str], where: Path) -> Path:
    """What the kubelet does with a ConfigMap volume: one file per key, binaryData decoded."""
    import base64

    where.mkdir()
    for k, v in payload_data.items():
        (where / k).write_text(v)
    for k, v in binary.items():
        (where / k).write_bytes(base64.b64decode(v))
    return where


def test_single_file(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    p = pack(file_payload(script))
    assert p.data["train.py"] == "print('hi')\n"
    assert json.loads(p.data[MANIFEST_KEY]) == {"version": 1, "files": {"train.py": {"path": "train.py", "mode": 0o644}}}


def test_directory_roundtrip_through_a_mount(tmp_path: Path) -> None:
    src = tmp_path / "proj"
    (src / "pkg" / "__pycache__").mkdir(parents=True)
    (src / ".git").mkdir()
    (src / "main.py").write_text("import pkg.util\n")
    (src / "pkg" / "__init__.py").write_text("")
    (src / "pkg" / "util.py").write_text("X = 1\n")
    (src / "pkg" / "__pycache__" / "util.cpython-311.pyc").write_bytes(b"\0")
    (src / ".git" / "HEAD").write_text("ref")
    (src / "run me.sh").write_text("#!/bin/sh\n")
    (src / "run me.sh").chmod(0o755)
    (src / "weights.bin").write_bytes(bytes(range(256)))
    p = pack(directory_payload(src))
    assert all(KEY.match(k) and len(k) <= 253 for k in [*p.data, *p.binary_data])
    assert "pkg__util.py" in p.data and "weights.bin" in p.binary_data
    out = tmp_path / "work"
    written = unpack(mount(p.data, p.binary_data, tmp_path / "mnt"), out)
    assert sorted(str(w.relative_to(out)) for w in written) == [
        "main.py", "pkg/__init__.py", "pkg/util.py", "run me.sh", "weights.bin"]
    assert (out / "pkg" / "util.py").read_text() == "X = 1\n"
    assert (out / "weights.bin").read_bytes() == bytes(range(256))
    assert (out / "run me.sh").stat().st_mode & 0o777 == 0o755


def test_colliding_and_long_keys_get_hashed_keys(tmp_path: Path) -> None:
    files = [PayloadFile("a/b.py", b"1"), PayloadFile("a__b.py", b"2"), PayloadFile("d/" * 130 + "x.py", b"3")]
    p = pack(files)
    assert len(p.data) == 4 and all(KEY.match(k) and len(k) <= 253 for k in p.data)
    out = tmp_path / "w"
    unpack(mount(p.data, {}, tmp_path / "m"), out)
    assert (out / "a" / "b.py").read_text() == "1" and (out / "a__b.py").read_text() == "2"


@pytest.mark.parametrize("bad", ["../x.py", "/etc/passwd", "a/../../x"])
def test_paths_must_stay_inside(bad: str) -> None:
    with pytest.raises(ValueError, match="relative"):
        pack([PayloadFile(bad, b"")])


def test_too_large_names_the_alternatives() -> None:
    with pytest.raises(PayloadTooLarge) as err:
        pack([PayloadFile("big.bin", b"\xff" * 700 * 1024)])
    assert "persistentVolumeClaim" in str(err.value) and "image" in str(err.value)
    assert isinstance(err.value, ValueError)


def test_configmap_is_owned_by_the_job() -> None:
    cm = configmap(pack([PayloadFile("a.py", b"")]), "train-1", "team", "uid-9")
    assert cm.metadata is not None and cm.metadata.ownerReferences is not None
    assert cm.metadata.name == "train-1-payload" and cm.metadata.namespace == "team"
    ref = cm.metadata.ownerReferences[0]
    assert (ref.apiVersion, ref.kind, ref.name, ref.uid, ref.controller) == (
        "kubepool.dev/v1alpha1", "MLJob", "train-1", "uid-9", True)
    assert cm.binaryData is None


def test_unpack_without_manifest_copies_keys(tmp_path: Path) -> None:
    out = tmp_path / "w"
    unpack(mount({"a.py": "1"}, {}, tmp_path / "m"), out)
    assert (out / "a.py").read_text() == "1"


def test_missing_inputs(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        file_payload(tmp_path / "nope.py")
    with pytest.raises(NotADirectoryError):
        directory_payload(tmp_path / "nope")
