"""Snowflake's runtime_environment and imports, mapped to the job's image and payload (no cluster)."""

from __future__ import annotations

import json
import sys
import zipfile
from pathlib import Path

import pytest
from fakes import FakeKube, pool

from kubepool import jobs
from kubepool.jobs.options import RUNTIME_TAG_ENV, import_files, resolve_image, with_tag
from kubepool.jobs.payload import MANIFEST_KEY


def test_with_tag() -> None:
    assert with_tag("reg:5000/team/rt:1.0", "2.0") == "reg:5000/team/rt:2.0"
    assert with_tag("team/rt", "2.0") == "team/rt:2.0"
    assert with_tag("team/rt:1@sha256:" + "a" * 64, "2.0") == "team/rt:2.0"


def test_resolve_image(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(RUNTIME_TAG_ENV, raising=False)
    never = lambda: pytest.fail("the pool is read only for a tag")  # noqa: E731
    assert resolve_image(None, None, never) is None
    assert resolve_image("mine:1", None, never) == "mine:1"
    assert resolve_image(None, "reg/team/rt:3", never) == "reg/team/rt:3"
    assert resolve_image(None, "1.7.1", lambda: "team/gpu:1.0") == "team/gpu:1.7.1"
    with pytest.raises(ValueError, match="is a tag, and the compute pool names no image"):
        resolve_image(None, "1.7.1", lambda: None)
    with pytest.raises(ValueError, match="not both"):
        resolve_image("mine:1", "1.7.1", never)
    monkeypatch.setenv(RUNTIME_TAG_ENV, "9")
    assert resolve_image(None, None, lambda: "team/rt:1") == "team/rt:9"


def test_import_files_place_each_by_its_module_path(tmp_path: Path) -> None:
    (tmp_path / "lib" / "pkg" / "sub").mkdir(parents=True)
    (tmp_path / "lib" / "pkg" / "__init__.py").write_text("")
    (tmp_path / "lib" / "pkg" / "sub" / "m.py").write_text("X = 1\n")
    (tmp_path / "u.py").write_text("Y = 2\n")
    with zipfile.ZipFile(tmp_path / "z.zip", "w") as z:
        z.writestr("zmod.py", "Z = 3\n")
    files = import_files([tmp_path / "lib" / "pkg", (str(tmp_path / "u.py"), "team.u"), (tmp_path / "z.zip",),
                          (tmp_path / "lib" / "pkg", "a.pkg")])
    assert sorted(f.path for f in files) == ["a/pkg/__init__.py", "a/pkg/sub/m.py", "pkg/__init__.py",
                                             "pkg/sub/m.py", "team/u.py", "z.zip"]
    with pytest.raises(ValueError, match="must end with the source's name 'u'"):
        import_files([(str(tmp_path / "u.py"), "team.other")])
    for hostile in ("..u", "a/../u", "a..u", " "):
        with pytest.raises(ValueError, match="not a dotted module path"):
            import_files([(str(tmp_path / "u.py"), hostile)])
    with pytest.raises(FileNotFoundError):
        import_files([tmp_path / "missing"])
    # Laid out as the runtime lays out a payload (its dir and zips on sys.path), each imports by its path.
    root = tmp_path / "payload"
    for f in files:
        (root / f.path).parent.mkdir(parents=True, exist_ok=True)
        (root / f.path).write_bytes(f.content)
    code = "import sys; sys.path[:0] = [sys.argv[1], sys.argv[1] + '/z.zip']; " \
           "import pkg.sub.m, a.pkg.sub.m, team.u, zmod; print(pkg.sub.m.X + team.u.Y + zmod.Z)"
    import subprocess

    out = subprocess.run([sys.executable, "-c", code, str(root)], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "6", out.stderr


def test_submit_with_imports_and_runtime_environment(fake_kube: FakeKube, tmp_path: Path) -> None:
    script = tmp_path / "main.py"
    script.write_text("import helpers\n")
    (tmp_path / "helpers.py").write_text("")
    fake_kube.pools["gpu"] = pool("gpu", 2, "GPU_NV_S", image="team/rt:1.0-cuda")
    job = jobs.submit_file(script, "gpu", imports=[tmp_path / "helpers.py"], runtime_environment="1.1-cuda")
    stored = fake_kube.jobs[("team", job.name)]
    assert stored.spec.image == "team/rt:1.1-cuda"
    manifest = json.loads(fake_kube.configmaps[("team", f"{job.name}-payload")].data[MANIFEST_KEY])  # type: ignore[index]
    assert set(manifest["files"]) == {"main.py", "helpers.py"}
    with pytest.raises(ValueError, match="would replace files of the payload: main.py"):
        jobs.submit_file(script, "gpu", imports=[script])
