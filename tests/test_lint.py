"""The code base stays clean: ruff (pyflakes, pycodestyle, import order, bugbear, pyupgrade) over every
Python folder. Style drift fails here rather than piling up."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_is_clean() -> None:
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "--output-format", "concise", "src", "tests", "bench"],
                          cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_test_modules_have_unique_names() -> None:
    # pytest imports test modules by basename (rootdir packages are not used): two of one name fail collection.
    names: dict[str, list[str]] = {}
    for path in (ROOT / "tests").rglob("test_*.py"):
        names.setdefault(path.name, []).append(str(path.relative_to(ROOT)))
    assert not {n: ps for n, ps in names.items() if len(ps) > 1}
