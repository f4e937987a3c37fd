"""Pure helpers of the operator benchmarks: percentiles, the API server's request counters, /proc readings
and Markdown tables. No I/O here, so tests/bench can check them without a cluster."""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence

# One sample of a Prometheus text exposition: name{labels} value.
_SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100), linear between closest ranks (numpy's default); NaN when empty."""
    if not values:
        return math.nan
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def median(values: Sequence[float]) -> float:
    return percentile(values, 50)


def request_totals(text: str) -> dict[tuple[str, str], float]:
    """`apiserver_request_total` summed by (verb, resource[/subresource]) from a /metrics body."""
    out: defaultdict[tuple[str, str], float] = defaultdict(float)
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if not m or m["name"] != "apiserver_request_total":
            continue
        labels = dict(_LABEL.findall(m["labels"] or ""))
        res = labels.get("resource", "")
        if labels.get("subresource"):
            res += "/" + labels["subresource"]
        out[(labels.get("verb", ""), res)] += float(m["value"])
    return out


def delta(before: Mapping[tuple[str, str], float], after: Mapping[tuple[str, str], float]) -> dict[tuple[str, str], float]:
    """Requests made between two scrapes (counters only grow; a key absent before started at 0)."""
    return {k: v - before.get(k, 0.0) for k, v in after.items() if v - before.get(k, 0.0) > 0}


def largest(requests: Mapping[tuple[str, str], float], n: int) -> list[tuple[tuple[str, str], float]]:
    """The `n` largest counts, largest first (ties in first-seen order, as Counter.most_common)."""
    return sorted(requests.items(), key=lambda kv: -kv[1])[:n]


def by_verb(requests: Mapping[tuple[str, str], float]) -> dict[str, float]:
    verbs: defaultdict[str, float] = defaultdict(float)
    for (verb, _), n in requests.items():
        verbs[verb] += n
    return dict(sorted(verbs.items(), key=lambda kv: -kv[1]))


def proc_status_kib(status_text: str, key: str) -> int:
    """A `kB` field of /proc/<pid>/status (VmRSS, VmHWM) in KiB; 0 when absent."""
    for line in status_text.splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def proc_cpu_seconds(stat_text: str, ticks_per_second: int) -> float:
    """utime + stime of /proc/<pid>/stat (fields 14 and 15; the command name may contain spaces)."""
    fields = stat_text.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / ticks_per_second


def ratio(a: float, b: float) -> float:
    return a / b if b else math.nan


def fmt(x: float | int | None, digits: int = 2) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return f"{x:.{digits}f}" if isinstance(x, float) else str(x)


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[object]], right: Sequence[int] = ()) -> str:
    """A GitHub Markdown table; columns listed in `right` are right-aligned (numbers)."""
    align = ["---:" if i in right else "---" for i in range(len(headers))]
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def profile_top(collapsed: str, include: Sequence[str], exclude: Sequence[str] = (), n: int = 15) -> list[tuple[str, float]]:
    """Inclusive share of the samples per function in py-spy's raw output (lines `f (file:line);g (...) N`),
    for functions whose file path contains one of `include` and none of `exclude`; largest first."""
    share: Counter[str] = Counter()
    total = 0
    for line in collapsed.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        total += int(count)
        frames = {f.rsplit(":", 1)[0] + ")" if "(" in f else f for f in stack.split(";")}  # drop line numbers
        wanted = (f for f in frames if any(i in f for i in include) and not any(x in f for x in exclude))
        share.update(dict.fromkeys(wanted, int(count)))
    # Ties in name order: the counts come from sets, whose order varies with the hash seed.
    ranked = sorted(share.items(), key=lambda fc: (-fc[1], fc[0]))[:n]
    return [(f, c / total) for f, c in ranked] if total else []
