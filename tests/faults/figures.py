"""Sums the fault suite's figures (`<state dir>/fault-figures.jsonl`, one line per test run) into the markdown
table of docs/reliability.md: `python tests/faults/figures.py [FILE]` (default: the local cluster's state dir)."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def table(lines: list[dict[str, object]]) -> str:
    rows = ["| Test | Faults injected | Jobs run | Jobs lost | Orphaned pods | Converge (s) |", "|---|---:|---:|---:|---:|---:|"]
    for d in lines:
        rows.append(f"| {d['test']} | {d['faults']} | {d['jobs']} | {d['lost']} | {d['orphaned']} | {d['converge_s']} |")
    total = {k: sum(int(d[k]) for d in lines) for k in ("faults", "jobs", "lost", "orphaned")}  # type: ignore[call-overload]
    worst = max((float(d["converge_s"]) for d in lines), default=0.0)  # type: ignore[arg-type]
    rows.append(f"| **all** | **{total['faults']}** | **{total['jobs']}** | **{total['lost']}** | **{total['orphaned']}** "
                f"| **max {worst}** |")
    return "\n".join(rows)


def main() -> None:
    from kubepool.local.layout import default_state_dir

    path = Path(sys.argv[1]) if len(sys.argv) > 1 else default_state_dir() / "fault-figures.jsonl"
    print(table([json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]))


if __name__ == "__main__":
    main()
