"""The benchmark package lives at the repo root (`bench/`), which pytest does not put on sys.path; and this
folder, also named `bench`, would otherwise be imported in its place as a namespace package."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = str(Path(__file__).resolve().parents[2])
if sys.path[0] != ROOT:
    sys.path.insert(0, ROOT)
if getattr(sys.modules.get("bench"), "__file__", None) is None:
    sys.modules.pop("bench", None)
