"""The order the suite's files are handed to pytest-xdist's workers (`make test`: `--dist loadfile`, a file's tests
on one worker, files given out in collection order with `--no-loadscope-reorder`): the longest first, by the
seconds each file took in a measured run (tests/durations.json, written by hack/durations.py), so no worker
starts a long file while the other has nothing left. A file the weights do not know (new, renamed) goes first:
it may be long, and a short one costs nothing there."""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from pathlib import Path

WEIGHTS = Path(__file__).resolve().parent.parent / "durations.json"

# A `--durations=0` line: "12.34s call     tests/x/test_y.py::test_z[a b]"
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)s\s+(setup|call|teardown)\s+(\S+?\.py)(?:::|\s|$)")


def file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def file_weights(durations_log: Iterable[str]) -> dict[str, float]:
    """Seconds per file (setup, call and teardown of its tests) from a `pytest --durations=0` output, longest
    first. Parametrized ids may hold spaces: the file is what comes before the first `::`."""
    totals: dict[str, float] = {}
    for line in durations_log:
        m = _DURATION.match(line)
        if m:
            totals[m.group(3)] = totals.get(m.group(3), 0.0) + float(m.group(1))
    return {f: round(s, 1) for f, s in sorted(totals.items(), key=lambda fs: (-fs[1], fs[0]))}


def file_order(nodeids: Sequence[str], weights: Mapping[str, float], exclusive: Collection[str] = (),
               free: Collection[str] = ()) -> list[int]:
    """Indexes of `nodeids` grouped by file, the files unknown to `weights` first (in collection order), then the
    known ones, heaviest first; a file's tests keep their order (its fixtures and its tests' own order hold).
    While a file with an `exclusive` test runs, the other worker's cluster tests wait for it: so each such file is
    followed by `free` files (no cluster test) of about its weight, which the other worker runs meanwhile; the
    free files left over come last, where they fill the end of the run."""
    first: dict[str, int] = {}
    for i, nid in enumerate(nodeids):
        first.setdefault(file_of(nid), i)
    unknown = [f for f in first if f not in weights]
    known = sorted((f for f in first if f in weights), key=lambda f: (-weights[f], first[f]))
    frees = [f for f in known if f in free and f not in exclusive]
    files = list(unknown)
    for x in (f for f in known if f in exclusive):
        files.append(x)
        paired = 0.0
        while frees and paired < weights[x]:
            paired += weights[frees[0]]
            files.append(frees.pop(0))
    files += [f for f in known if f not in exclusive and f not in free] + frees
    position = {f: n for n, f in enumerate(files)}
    return sorted(range(len(nodeids)), key=lambda i: (position[file_of(nodeids[i])], i))


def load_weights(path: Path = WEIGHTS) -> dict[str, float]:
    """The weights file, or none (every file then keeps its collection order)."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    return {str(f): float(s) for f, s in data.items()}
