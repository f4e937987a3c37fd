"""Draws the panels in the dashboard's own grid (gridPos) into one PNG with matplotlib, in the colours of
Grafana's dark theme: a picture of what the dashboard shows, not Grafana itself."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display: a file only
import matplotlib.dates as mdates  # noqa: E402 - after the backend is chosen
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter  # noqa: E402

from bench.dashboard.panels import Panel, grid_height, legend, rect  # noqa: E402
from bench.dashboard.prometheus import Series  # noqa: E402

BACKGROUND, PANEL, TEXT, GRID, MUTED = "#111217", "#181b1f", "#ccccdc", "#2c3235", "#8e8e8e"
PALETTE = ("#73bf69", "#f2cc0c", "#8ab8ff", "#ff780a", "#f2495c", "#5794f2", "#b877d9", "#705da0", "#37872d", "#fade2a")
TICK_SECONDS = (10, 15, 20, 30, 60, 120, 300, 600, 900, 1200, 1800)  # Grafana-like round times, each dividing an hour
WIDTH_IN, UNIT_IN, HEADER_IN, DPI = 16.0, 0.3, 0.45, 90  # a grid row is 30 px in Grafana: 0.3 in here


def _x(unix: float) -> float:
    """matplotlib's date axis unit (days) of a unix time."""
    return float(mdates.date2num(datetime.fromtimestamp(unix, UTC)))


def _value(unit: str, v: float) -> str:
    """Axis labels in the panel's unit, as Grafana writes them."""
    if unit == "s":
        if v >= 3600:
            return f"{v / 3600:.3g} h"
        return f"{v / 60:.3g} min" if v >= 120 else f"{v:.3g} s"
    if unit == "ops":
        return f"{v:.2g} ops/s" if v else "0"
    return f"{v:.3g}"


def _panel(fig: plt.Figure, p: Panel, height: int, body_top: float, span: tuple[float, float],
           results: list[list[Series]]) -> None:
    left, bottom, w, h = rect(p.grid, height)
    frame = fig.add_axes((left, bottom * body_top, w, h * body_top))
    frame.set_facecolor(PANEL)
    frame.set_xticks([])
    frame.set_yticks([])
    for s in frame.spines.values():
        s.set_color(GRID)
    frame.text(0.01, 0.985, p.title, color=TEXT, fontsize=10, fontweight="bold", va="top", transform=frame.transAxes)
    fig_w, fig_h = fig.get_figwidth(), fig.get_figheight()  # room for the title, ticks and legend, in inches
    ax = fig.add_axes((left + 0.75 / fig_w, bottom * body_top + 0.5 / fig_h, w - 0.9 / fig_w, h * body_top - 0.85 / fig_h))
    ax.set_facecolor(PANEL)
    for s in ax.spines.values():
        s.set_visible(False)
    ax.grid(color=GRID, linewidth=0.6)
    ax.tick_params(colors=MUTED, labelsize=7, length=0)
    ax.set_xlim(_x(span[0]), _x(span[1]))  # one time range for every panel, as Grafana
    step = next((t for t in TICK_SECONDS if (span[1] - span[0]) / t <= 7), None)
    ax.xaxis.set_major_locator(mdates.SecondLocator(bysecond=range(0, 60, step), tz=UTC) if step and step < 60 else
                               mdates.MinuteLocator(byminute=range(0, 60, step // 60), tz=UTC) if step else
                               mdates.AutoDateLocator(maxticks=7, tz=UTC))
    ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M:%S" if span[1] - span[0] < 900 else "%H:%M", tz=UTC))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: _value(p.unit, v)))
    drawn = 0
    for target, series in zip(p.targets, results, strict=True):
        for labels, points in sorted(series, key=lambda s: legend(target.legend, s[0])):
            if all(math.isnan(v) for _, v in points):
                continue
            color = PALETTE[drawn % len(PALETTE)]
            xs = [_x(t) for t, _ in points]
            ax.plot(xs, [v for _, v in points], color=color, linewidth=1.4, label=legend(target.legend, labels))
            ax.fill_between(xs, [v for _, v in points], color=color, alpha=0.08, linewidth=0)
            drawn += 1
    if not drawn:
        ax.text(0.5, 0.5, "No data", color=MUTED, fontsize=12, ha="center", va="center", transform=ax.transAxes)
        return
    ax.set_ylim(bottom=0)
    labels = ax.get_legend_handles_labels()[1]
    ax.legend(loc="upper left", bbox_to_anchor=(0, -0.12), ncol=_columns(labels, ax.get_position().width * fig_w),
              frameon=False, fontsize=7, labelcolor=TEXT, handlelength=1.2, columnspacing=1.2)


def _columns(labels: list[str], width_in: float) -> int:
    """Legend columns that fit the panel's width (at most 6): long labels wrap onto more rows, not past its edge.
    A 7 pt character is about 0.055 in; the line, its gap and the column spacing about 0.45 in."""
    per_column = max((len(label) for label in labels), default=0) * 0.055 + 0.45
    return max(1, min(len(labels), 6, int(width_in / per_column)))


def draw(path: Path, title: str, subtitle: str, span: tuple[float, float], ps: list[Panel],
         results: list[list[list[Series]]]) -> None:
    """One PNG: the title strip, then every panel where its gridPos puts it, all over `span` (unix times)."""
    height = grid_height(ps)
    fig_h = height * UNIT_IN + HEADER_IN
    fig = plt.figure(figsize=(WIDTH_IN, fig_h), facecolor=BACKGROUND)
    body_top = 1 - HEADER_IN / fig_h
    fig.text(0.005, 1 - 0.12 / fig_h, title, color=TEXT, fontsize=13, fontweight="bold", va="top")
    fig.text(0.995, 1 - 0.14 / fig_h, subtitle, color=MUTED, fontsize=8, va="top", ha="right")
    for p, r in zip(ps, results, strict=True):
        _panel(fig, p, height, body_top, span, r)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI, facecolor=BACKGROUND)
    plt.close(fig)
