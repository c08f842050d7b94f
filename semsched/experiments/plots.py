"""Figures of the experiment reports: one line or bar series per policy, each policy always in the same colour.

A policy's colour depends on its spec alone (``fcfs`` is the same blue in every figure of every report);
axes are labelled with units; a series with no data is drawn as a note on the axes, never an error. The legend,
log axes and unseen bars follow :mod:`semsched.metrics.plots` (legend outside the axes, log only over a decade
or more with plain-number ticks, ``n/a`` for a missing value and ``0`` for a zero).
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

from semsched.metrics.plots import (
    NOT_AVAILABLE,
    ZERO,
    figure_legend,
    log_scale,
    mark_bars,
    spans_a_decade,
)

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
    zero: str = ZERO,
    missing: str = NOT_AVAILABLE,
) -> None:
    """Write :func:`bar_chart_figure` as a PNG."""
    _save(bar_chart_figure(groups, series, ylabel=ylabel, title=title, log=log, zero=zero, missing=missing), path)


def bar_chart_figure(
    groups: Sequence[str],
    series: Mapping[str, Sequence[float | None]],
    *,
    ylabel: str,
    title: str,
    log: bool = False,
    zero: str = ZERO,
    missing: str = NOT_AVAILABLE,
) -> Figure:
    """Bars grouped by ``groups`` (x axis), one bar per policy in each group; a ``None`` bar says ``missing``
    and a zero bar ``zero`` (:func:`~semsched.metrics.plots.mark_bars`). ``log``: a log axis if the values span
    a decade, else a linear one from 0."""
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
    ax.set_xlim(-width, len(groups) - 1 + len(series) * width)  # room for every group, drawn or not
    log = log and spans_a_decade(v for values in series.values() for v in values)
    if drawn and log:
        log_scale(ax)
    if drawn:
        mark_bars(ax, series, positions, width, colours, zero=zero, missing=missing)
        if not log:
            ax.set_ylim(bottom=0.0)
    _finish(ax, figure, ylabel=ylabel, title=title, log=log and drawn, drawn=drawn)
    return figure


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
    _finish(ax, figure, ylabel=ylabel, title=title, log=log and drawn, drawn=drawn)
    _save(figure, path)


def band_chart(
    path: Path,
    xs: Sequence[float],
    series: Mapping[str, Sequence[object]],
    marks: Sequence[tuple[str, float, float | None]] = (),
    *,
    xlabel: str,
    ylabel: str,
    title: str,
) -> None:
    """One line per policy through its medians with the min-max over seeds as a shaded band (each item of a
    series has ``median``, ``low`` and ``high``, as :class:`~semsched.experiments.curves.Band`); ``marks`` are
    collapses ``(policy, x, value)``, drawn as crosses (a missing value at the bottom of the axes)."""
    figure, ax = _figure()
    colours = policy_colours(list(series))
    drawn = False
    for policy, bands in series.items():
        points = [(x, _finite(b.median), _finite(b.low), _finite(b.high))  # type: ignore[attr-defined]
                  for x, b in zip(xs, bands, strict=True)]
        points = [p for p in points if not math.isnan(p[1])]
        if not points:
            continue
        drawn = True
        px, med, low, high = (list(column) for column in zip(*points, strict=True))
        ax.plot(px, med, marker="o", label=policy, color=colours[policy])
        ax.fill_between(px, low, high, color=colours[policy], alpha=0.18, linewidth=0)
    for policy, x, value in marks:
        if policy not in colours:
            continue
        if value is None or not math.isfinite(value):
            ax.plot([x], [0], marker="x", markersize=10, color=colours[policy], transform=ax.get_xaxis_transform(),
                    clip_on=False)
        else:
            ax.plot([x], [value], marker="x", markersize=10, color=colours[policy])
    ax.set_xlabel(xlabel)
    _finish(ax, figure, ylabel=ylabel, title=title, log=False, drawn=drawn)
    _save(figure, path)


def _figure() -> tuple[Figure, Axes]:
    figure = Figure(figsize=(9.0, 4.2), layout="constrained")  # room for the legend on the right
    FigureCanvasAgg(figure)
    ax: Axes = figure.subplots()
    return figure, ax


def _finish(ax: Axes, figure: Figure, *, ylabel: str, title: str, log: bool, drawn: bool) -> None:
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize="medium")
    if log:
        log_scale(ax)
    if drawn:
        figure_legend(figure, [ax])
        ax.grid(axis="y", alpha=0.3)
    else:
        ax.text(0.5, 0.5, "no data: no request of these runs has this value", ha="center", transform=ax.transAxes)


def _save(figure: Figure, path: Path) -> None:
    figure.savefig(path, format="png", dpi=110)
    figure.clear()


def _finite(value: float | None) -> float:
    return math.nan if value is None or not math.isfinite(value) else float(value)
