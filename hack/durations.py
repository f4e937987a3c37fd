#!/usr/bin/env python3
"""Writes tests/durations.json, the weights `make test` orders its files by (tests/support/file_order.py), from
the output of a whole-suite run with `--durations=0` (e.g. `.ci/run` with PYTEST_ARGS='-q --durations=0').

    .venv/bin/python hack/durations.py LOG [OUT]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from support.file_order import WEIGHTS, file_weights  # noqa: E402


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        return 2
    weights = file_weights(Path(argv[1]).read_text(errors="replace").splitlines())
    if not weights:
        print(f"no --durations lines in {argv[1]}", file=sys.stderr)
        return 1
    out = Path(argv[2]) if len(argv) == 3 else WEIGHTS
    out.write_text(json.dumps(weights, indent=1) + "\n")
    print(f"{out}: {len(weights)} files, {sum(weights.values()):.0f} s in all")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
