"""Figures of the experiment reports: one line or bar series per policy, each policy always in the same colour.

A policy's colour depends on its spec alone (``fcfs`` is the same blue in every figure of every report);
axes are labelled with units; a series with no data is drawn as a note on the axes, never an error.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

# The colours of tab10, in a fixed order for the policies semsched ships; any other spec gets one of tab20 by
# a hash of its text (stable across runs and machines).
_TAB10 = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22")
_KNOWN = ("fcfs", "priority", "priority-preempt", "sjf", "srpt", "edf", "hpjf", "semantic")
_TAB20 = (
    "#aec7e8",
    "#ffbb78",
    "#98df8a",
    "#ff9896",
    "#c5b0d5",
    "#c49c94",
    "#f7b6d2",
    "#dbdb8d",
    "#9edae5",
    "#17becf",
)


def policy_colour(spec: str) -> str:
    """The colour of policy ``spec`` in every figure (where two policies of one figure would share one,
    :func:`policy_colours` moves the later one on)."""
    if spec in _KNOWN:
        return _TAB10[_KNOWN.index(spec)]
    return _TAB20[zlib.crc32(spec.encode()) % len(_TAB20)]


def policy_colours(specs: Sequence[str]) -> dict[str, str]:
    """A colour for each policy of one figure: its :func:`policy_colour`, unless a policy before it in
    ``specs`` has that colour already; then the next free colour of tab20 (wrapping round), so the policies of
    one figure differ while they are at most ten variants."""
    colours: dict[str, str] = {}
    for spec in specs:
        colour = policy_colour(spec)
        if colour in colours.values() and colour in _TAB20:
            start = _TAB20.index(colour)
            free = [c for i in range(1, len(_TAB20)) if (c := _TAB20[(start + i) % len(_TAB20)])
                    not in colours.values()]
            colour = free[0] if free else colour
        colours[spec] = colour
    return colours


def bar_chart(
    path: Path,
    groups: Sequence[str],
    series: Mapping[str, Sequence[float | None]],
    *,
    ylabel: str,
    title: str,
    log: bool = False,
) -> None:
    """Bars grouped by ``groups`` (x axis), one bar per policy in each group; ``None`` leaves a gap."""
    figure, ax = _figure()
    width = 0.8 / max(len(series), 1)
    positions = np.arange(len(groups), dtype=np.float64)
    drawn = False
    colours = policy_colours(list(series))
    for k, (policy, values) in enumerate(series.items()):
        heights = [_finite(v) for v in values]
        drawn |= any(not math.isnan(h) for h in heights)
        ax.bar(positions + k * width, heights, width=width, label=policy, color=colours[policy])
    ax.set_xticks(positions + width * (len(series) - 1) / 2)
    ax.set_xticklabels(list(groups), fontsize="small")
    _finish(ax, figure, path, ylabel=ylabel, title=title, log=log and drawn, drawn=drawn)


def line_chart(
    path: Path,
    series: Mapping[str, tuple[Sequence[float], Sequence[float | None]]],
    *,
    xlabel: str,
    ylabel: str,
    title: str,
    log: bool = False,
) -> None:
    """One line per policy through its ``(x, y)`` points; ``None`` values are left out."""
    figure, ax = _figure()
    drawn = False
    colours = policy_colours(list(series))
    for policy, (xs, ys) in series.items():
        points = [(x, _finite(y)) for x, y in zip(xs, ys, strict=True)]
        points = [(x, y) for x, y in points if not math.isnan(y)]
        if points:
            drawn = True
            ax.plot(*zip(*points, strict=True), marker="o", label=policy, color=colours[policy])
    ax.set_xlabel(xlabel)
    _finish(ax, figure, path, ylabel=ylabel, title=title, log=log and drawn, drawn=drawn)


def _figure() -> tuple[Figure, Axes]:
    figure = Figure(figsize=(7.5, 4.2), layout="constrained")
    FigureCanvasAgg(figure)
    ax: Axes = figure.subplots()
    return figure, ax


def _finish(ax: Axes, figure: Figure, path: Path, *, ylabel: str, title: str, log: bool, drawn: bool) -> None:
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize="medium")
    if log:
        ax.set_yscale("log")
    if drawn:
        ax.legend(fontsize="small")
        ax.grid(axis="y", alpha=0.3)
    else:
        ax.text(0.5, 0.5, "no data: no request of these runs has this value", ha="center", transform=ax.transAxes)
    figure.savefig(path, format="png", dpi=110)
    figure.clear()


def _finite(value: float | None) -> float:
    return math.nan if value is None or not math.isfinite(value) else float(value)
