"""`python -m bench [--quick] [part ...]`: run the named benchmark parts (default: all) one after the other."""

from __future__ import annotations

import importlib
import sys

PARTS = ["distributors", "operator_scale", "live_jobs", "latency", "realnodes", "sagemaker_api", "summary"]  # each is a module bench.<part> with main(argv) -> int
# `--quick`: the arguments that make each part a smaller run.
QUICK = {"distributors": ["--repeats", "1"], "operator_scale": ["--quick"], "live_jobs": ["--quick"], "latency": ["--quick"], "realnodes": ["--quick"],
         "sagemaker_api": ["--quick"], "summary": ["--quick"]}


def main(argv: list[str]) -> int:
    quick = "--quick" in argv
    parts = [a for a in argv if a != "--quick"] or PARTS
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        print(f"unknown benchmark parts {unknown}; known: {PARTS}", file=sys.stderr)
        return 2
    return max(importlib.import_module(f"bench.{p}").main(QUICK[p] if quick else []) for p in parts)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
