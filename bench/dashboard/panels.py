"""The dashboard's panels as the renderer reads them (pure, no cluster): each panel's grid place, unit and
PromQL targets with Grafana's template variables resolved, legends from `legendFormat`, and where a panel
goes on the picture. A dashboard edit the renderer cannot follow fails tests/bench/test_bench_dashboard.py."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "charts" / "kubepool" / "dashboards" / "kubepool.json"
GRID_COLUMNS = 24  # Grafana's grid: gridPos.x + w <= 24
# $name, ${name}, ${name:format} and the deprecated [[name]]: the forms Grafana substitutes in a query.
_VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)(?::\w+)?\]\]")
_LEGEND = re.compile(r"\{\{\s*(\w+)\s*\}\}")


@dataclass(frozen=True)
class Grid:
    x: int
    y: int
    w: int
    h: int


@dataclass(frozen=True)
class Target:
    expr: str  # variables resolved
    legend: str  # Grafana's legendFormat ("" or "__auto": the series' labels)


@dataclass(frozen=True)
class Panel:
    title: str
    grid: Grid
    unit: str
    targets: tuple[Target, ...]


def load(path: Path = DASHBOARD) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(path.read_text())
    return out


def duration(seconds: float) -> str:
    """A PromQL duration: whole seconds."""
    if seconds < 1:
        raise ValueError(f"a PromQL range must be at least 1s, not {seconds}s")
    return f"{int(seconds)}s"


def variables(dashboard: dict[str, Any], *, interval_s: float, rate_interval_s: float, range_s: float) -> dict[str, str]:
    """Grafana's built-ins the renderer stands in for, and the dashboard's own template variables at their
    current value (a datasource variable names the one Prometheus the renderer queries)."""
    out = {"__interval": duration(interval_s), "__interval_ms": str(int(interval_s * 1000)),
           "__rate_interval": duration(rate_interval_s), "__range": duration(range_s),
           "__range_s": str(int(range_s)), "__range_ms": str(int(range_s * 1000))}
    for var in dashboard.get("templating", {}).get("list", []):
        name, kind = var["name"], var.get("type")
        if kind == "datasource":
            out[name] = "prometheus"
            continue
        current = (var.get("current") or {}).get("value")
        if isinstance(current, list):  # a multi-value variable: Grafana's regex form for =~
            current = "|".join(current)
        if current in (None, "", "$__all"):
            raise ValueError(f"dashboard variable ${name} ({kind}) has no current value the renderer could use")
        out[name] = str(current)
    return out


def substitute(expr: str, values: dict[str, str]) -> str:
    """The query with every variable replaced; an unknown one is an error, never sent to Prometheus as-is."""
    def one(m: re.Match[str]) -> str:
        name = next(g for g in m.groups() if g)
        if name not in values:
            raise ValueError(f"unknown variable ${name} in query {expr!r} (known: {sorted(values)})")
        return values[name]

    return _VARIABLE.sub(one, expr)


def panels(dashboard: dict[str, Any], values: dict[str, str]) -> list[Panel]:
    """Every graph panel (rows' nested panels included), in the dashboard's order. A panel without a query,
    or placed off Grafana's 24-column grid, is an error naming it."""
    flat: list[dict[str, Any]] = []
    for p in dashboard.get("panels", []):
        flat.extend(p.get("panels", []) if p.get("type") == "row" else [p])
    out = []
    for p in flat:
        title = p.get("title") or f"panel {p.get('id')}"
        g = p.get("gridPos") or {}
        grid = Grid(int(g.get("x", 0)), int(g.get("y", 0)), int(g.get("w", 0)), int(g.get("h", 0)))
        if grid.w <= 0 or grid.h <= 0 or grid.x < 0 or grid.x + grid.w > GRID_COLUMNS:
            raise ValueError(f"panel {title!r}: gridPos {g} is not on Grafana's {GRID_COLUMNS}-column grid")
        targets = tuple(Target(substitute(t["expr"], values), t.get("legendFormat", ""))
                        for t in p.get("targets", []) if not t.get("hide") and t.get("expr"))
        if not targets:
            raise ValueError(f"panel {title!r} has no PromQL query")
        unit = p.get("fieldConfig", {}).get("defaults", {}).get("unit", "short")
        out.append(Panel(title, grid, unit, targets))
    return out


def legend(fmt: str, labels: dict[str, str]) -> str:
    """Grafana's legendFormat: {{label}} becomes the series' value of it (empty when absent); no format, or
    `__auto`, shows the labels."""
    if fmt in ("", "__auto"):
        shown = {k: v for k, v in labels.items() if k != "__name__"}
        return labels.get("__name__", "") + ("{" + ", ".join(f'{k}="{v}"' for k, v in sorted(shown.items())) + "}" if shown else "")
    return _LEGEND.sub(lambda m: labels.get(m.group(1), ""), fmt).strip()


def grid_height(ps: list[Panel]) -> int:
    return max(p.grid.y + p.grid.h for p in ps)


def rect(grid: Grid, height: int, margin: float = 0.004) -> tuple[float, float, float, float]:
    """The panel's (left, bottom, width, height) as fractions of the figure: Grafana's grid, y growing down."""
    return (grid.x / GRID_COLUMNS + margin, 1 - (grid.y + grid.h) / height + margin,
            grid.w / GRID_COLUMNS - 2 * margin, grid.h / height - 2 * margin)
