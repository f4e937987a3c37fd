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
