"""How the command line prints objects: kubectl's `-o` formats over plain documents (dicts), with the columns
of each table declared once (`wide` adds the ones marked wide)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from kubepool import naming

Doc = dict[str, Any]
MLJOB_KIND = f"{naming.MLJOB_KIND.lower()}.{naming.GROUP}"  # what `-o name` prints, as kubectl does
POOL_KIND = f"{naming.POOL_KIND.lower()}.{naming.GROUP}"


@dataclass(frozen=True)
class Column:
    header: str
    value: Callable[[Doc], Any]
    wide: bool = False  # only with -o wide


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Left-aligned columns separated by two spaces (kubectl's style)."""
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells)


def table(docs: Sequence[Doc], columns: Sequence[Column], wide: bool) -> str:
    cols = [c for c in columns if wide or not c.wide]
    return format_table([c.header for c in cols], [[c.value(d) for c in cols] for d in docs])


def serialize(data: Any, fmt: str) -> str:
    if fmt == "yaml":
        return yaml.safe_dump(json.loads(json.dumps(data, default=str)), sort_keys=False).rstrip("\n")
    return json.dumps(data, indent=1, default=str)


def render(docs: Sequence[Doc], fmt: str, columns: Sequence[Column], kind: str) -> str:
    """A list of objects in format `fmt` (table, wide, json, yaml, name)."""
    if fmt in ("json", "yaml"):
        return serialize(list(docs), fmt)
    if fmt == "name":
        return "\n".join(f"{kind}/{d['name']}" for d in docs)
    return table(docs, columns, wide=fmt == "wide")
