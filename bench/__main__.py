"""`python -m bench [part ...]`: run the named benchmark parts (default: all) one after the other."""

from __future__ import annotations

import importlib
import sys

PARTS = ["distributors"]  # each is a module bench.<part> with main(argv) -> int


def main(argv: list[str]) -> int:
    parts = argv or PARTS
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        print(f"unknown benchmark parts {unknown}; known: {PARTS}", file=sys.stderr)
        return 2
    return max(importlib.import_module(f"bench.{p}").main([]) for p in parts)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
