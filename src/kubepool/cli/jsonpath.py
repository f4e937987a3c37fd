"""kubectl's JSONPath templates (`-o jsonpath=...`, the cells of `-o custom-columns=...`): literal text, and
`{...}` holding a path (`.a.b`, `['a']`, `[0]`, `[1:3]`, `[*]`, `.*`, `..a`, `[?(@.a=="x")]`), a string
literal (`{"\\n"}`) or `{range PATH}...{end}`. As kubectl prints them: several results of one `{}` joined by a
space, maps and lists as compact JSON, a missing key printing nothing."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

_MISSING = object()


@dataclass(frozen=True)
class _Node:
    kind: str  # text, path, range, end
    value: Any


def relaxed(expr: str) -> str:
    """kubectl's relaxed form for custom-columns: `.a.b`, `a.b` and `{.a.b}` all mean `{.a.b}`."""
    expr = expr.strip()
    if expr.startswith("{") and expr.endswith("}"):
        expr = expr[1:-1]
    if expr and not expr.startswith((".", "[", "$", "@")):
        expr = "." + expr
    return "{" + expr + "}"


def _split(template: str) -> Iterator[_Node]:
    i = 0
    while i < len(template):
        start = template.find("{", i)
        if start < 0:
            yield _Node("text", template[i:])
            return
        if start > i:
            yield _Node("text", template[i:start])
        end, quote = start + 1, ""
        while end < len(template) and (quote or template[end] != "}"):
            c = template[end]
            if quote and c == "\\":
                end += 1
            elif c in "\"'" and (not quote or c == quote):
                quote = "" if quote else c
            end += 1
        if end >= len(template):
            raise ValueError(f"jsonpath {template!r}: unclosed {{")
        yield _expression(template[start + 1:end].strip())
        i = end + 1


def _expression(expr: str) -> _Node:
    if expr == "end":
        return _Node("end", None)
    if expr.startswith("range "):
        return _Node("range", _steps(expr[6:].strip()))
    if expr[:1] in "\"'" and expr[-1:] == expr[:1] and len(expr) >= 2:
        body = expr[1:-1].replace('\\' + expr[0], expr[0])  # either quote; escapes as in a Go string
        return _Node("text", json.loads('"' + body.replace('"', '\\"') + '"', strict=False))
    return _Node("path", _steps(expr))


_STEP = re.compile(r"""\.\.(?P<deep>[\w-]+)|\.(?P<field>[\w/-]+|\*)|\[(?P<bracket>[^\]]*(?:\([^)]*\))?[^\]]*)\]""")


def _steps(expr: str) -> list[tuple[str, Any]]:
    if expr.startswith(("$", "@")):
        expr = expr[1:]
    steps: list[tuple[str, Any]] = []
    pos = 0
    while pos < len(expr):
        m = _STEP.match(expr, pos)
        if not m:
            raise ValueError(f"jsonpath: cannot parse {expr[pos:]!r}")
        pos = m.end()
        if m["deep"]:
            steps.append(("deep", m["deep"]))
        elif m["field"]:
            steps.append(("all", None) if m["field"] == "*" else ("field", m["field"]))
        else:
            steps.append(_bracket(m["bracket"].strip()))
    return steps


def _bracket(text: str) -> tuple[str, Any]:
    if text == "*":
        return ("all", None)
    if text[:1] in "\"'":
        return ("field", text[1:-1])
    if text.startswith("?(") and text.endswith(")"):
        m = re.fullmatch(r"@((?:\.[\w/-]+)+)\s*(?:(==|!=|<=|>=|<|>)\s*(.+))?", text[2:-1].strip())
        if not m:
            raise ValueError(f"jsonpath: cannot parse filter {text!r}")
        value = m[3].strip() if m[3] else None
        if value is not None and value[:1] in "\"'":
            value = value[1:-1]
        elif value is not None:
            value = json.loads(value)
        return ("filter", (_steps(m[1]), m[2], value))
    if ":" in text:
        a, _, b = text.partition(":")
        return ("slice", (int(a) if a.strip() else None, int(b.partition(":")[0]) if b.strip() else None))
    return ("index", int(text))


def _walk(nodes: list[Any], steps: list[tuple[str, Any]]) -> list[Any]:
    for kind, arg in steps:
        out: list[Any] = []
        for n in nodes:
            if kind == "field":
                if isinstance(n, dict) and arg in n:
                    out.append(n[arg])
            elif kind == "all":
                out.extend(n.values() if isinstance(n, dict) else n if isinstance(n, list) else [])
            elif kind == "index":
                if isinstance(n, list) and -len(n) <= arg < len(n):
                    out.append(n[arg])
            elif kind == "slice":
                if isinstance(n, list):
                    out.extend(n[arg[0]:arg[1]])
            elif kind == "deep":
                out.extend(_deep(n, arg))
            elif kind == "filter" and isinstance(n, list):
                out.extend(item for item in n if _matches(item, *arg))
        nodes = out
    return nodes


def _deep(node: Any, name: str) -> Iterator[Any]:
    if isinstance(node, dict):
        if name in node:
            yield node[name]
        for v in node.values():
            yield from _deep(v, name)
    elif isinstance(node, list):
        for v in node:
            yield from _deep(v, name)


def _matches(item: Any, path: list[tuple[str, Any]], op: str | None, value: Any) -> bool:
    found = _walk([item], path)
    if op is None:
        return bool(found)
    if not found:
        return False
    left = found[0]
    try:
        return {"==": left == value, "!=": left != value, "<": left < value, ">": left > value,
                "<=": left <= value, ">=": left >= value}[op]
    except TypeError:
        return False


def text_of(value: Any) -> str:
    """How kubectl prints one result: strings as they are, booleans lowercase, maps and lists as JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"), sort_keys=True)
    return "" if value is None else str(value)


def find(expr: str, data: Any) -> list[Any]:
    """The results of one path (custom-columns' cells)."""
    nodes = list(_split(relaxed(expr)))
    if len(nodes) != 1 or nodes[0].kind != "path":
        raise ValueError(f"custom-columns: {expr!r} is not a path")
    return _walk([data], nodes[0].value)


def render(template: str, data: Any) -> str:
    """`template` over `data`, as `kubectl get -o jsonpath=TEMPLATE` prints it."""
    nodes = list(_split(template))
    out: list[str] = []
    _run(nodes, 0, len(nodes), data, out)
    return "".join(out)


def _run(nodes: list[_Node], start: int, stop: int, data: Any, out: list[str]) -> None:
    i = start
    while i < stop:
        node = nodes[i]
        if node.kind == "text":
            out.append(node.value)
        elif node.kind == "path":
            out.append(" ".join(text_of(v) for v in _walk([data], node.value)))
        elif node.kind == "range":
            end = _matching_end(nodes, i, stop)
            for item in _walk([data], node.value):
                _run(nodes, i + 1, end, item, out)
            i = end
        else:
            raise ValueError("jsonpath: {end} without {range}")
        i += 1


def _matching_end(nodes: list[_Node], at: int, stop: int) -> int:
    depth = 0
    for j in range(at + 1, stop):
        if nodes[j].kind == "range":
            depth += 1
        elif nodes[j].kind == "end":
            if depth == 0:
                return j
            depth -= 1
    raise ValueError("jsonpath: {range} without {end}")
