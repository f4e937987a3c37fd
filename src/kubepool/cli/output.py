"""How the command line prints objects: kubectl's `-o` formats over plain documents (dicts), with the columns
of each table declared once (`wide` adds the ones marked wide)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from kubepool import naming
from kubepool.cli import jsonpath

Doc = dict[str, Any]
TABLE_OUTPUTS = ("table", "wide", "json", "yaml", "name")
OBJECT_OUTPUTS = ("jsonpath=", "custom-columns=")  # over the objects themselves, as kubectl get
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


def output_format(value: str) -> str:
    """An `-o` value: one of TABLE_OUTPUTS, or jsonpath=TEMPLATE / custom-columns=SPEC (checked here, so a bad
    template is a usage error before anything reaches the cluster)."""
    if value in TABLE_OUTPUTS:
        return value
    try:
        if value.startswith("jsonpath="):
            jsonpath.render(value.partition("=")[2], {})
            return value
        if value.startswith("custom-columns="):
            for _, path in _columns(value.partition("=")[2]):
                jsonpath.find(path, {})
            return value
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    raise argparse.ArgumentTypeError(f"{value!r}: use one of {', '.join(TABLE_OUTPUTS)}, jsonpath=TEMPLATE or "
                                     "custom-columns=HEADER:PATH,...")


def list_object(items: Sequence[Doc]) -> Doc:
    """What `kubectl get` prints for several objects with -o json/yaml/jsonpath: a `List`."""
    return {"apiVersion": "v1", "items": list(items), "kind": "List", "metadata": {"resourceVersion": ""}}


def _columns(spec: str) -> list[tuple[str, str]]:
    cols = []
    for part in spec.split(","):
        header, sep, path = part.partition(":")
        if not sep or not header or not path:
            raise ValueError(f"custom-columns: {part!r} is not HEADER:PATH")
        cols.append((header, path))
    return cols


def custom_columns(spec: str, objects: Sequence[Doc]) -> str:
    """kubectl's custom-columns: one row per object, `<none>` where a path finds nothing, columns padded as
    kubectl's tabwriter pads them (3 spaces after the longest cell; the last not padded)."""
    cols = _columns(spec)
    rows = [[h for h, _ in cols]]
    for obj in objects:
        row = []
        for _, path in cols:
            found = jsonpath.find(path, obj)
            row.append(",".join(jsonpath.text_of(v) for v in found) if found else "<none>")
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) + 3 for i in range(len(cols) - 1)]
    return "\n".join("".join(c.ljust(w) for c, w in zip(r[:-1], widths, strict=True)) + r[-1] for r in rows)


def render_objects(objects: Sequence[Doc], fmt: str, *, single: bool = False) -> str:
    """Whole objects as kubectl get prints them: json/yaml/jsonpath of a List (the object itself when `single`),
    custom-columns one row each."""
    if fmt.startswith("custom-columns="):
        return custom_columns(fmt.partition("=")[2], objects)
    data = objects[0] if single else list_object(objects)
    if fmt.startswith("jsonpath="):
        return jsonpath.render(fmt.partition("=")[2], data)
    if fmt == "yaml":
        return yaml.safe_dump(data, sort_keys=True).rstrip("\n")
    return json.dumps(data, indent=4, sort_keys=True)
