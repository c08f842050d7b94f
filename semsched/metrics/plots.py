"""PNG figures of policy comparisons.

Figures are built with matplotlib's object API (:class:`matplotlib.figure.Figure`) and rendered by the Agg
canvas, so nothing here touches pyplot's global figure registry or the process-wide backend: plotting works
headless and leaks no open figures.

Every figure reads the same way (the experiment reports' figures too, through the helpers here): the legend sits
outside the axes, never over the data; a log axis is used only where the values span at least a decade, and its
ticks are plain numbers (12, 0.5, 1,000), never 1.26x10^1; a bar with no value says ``n/a`` and a bar of zero
says ``0``, so neither reads as the other; a panel whose lines are all zero has its axis from 0 and says ``none``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial
from pathlib import Path

import numpy as np
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import StepPatch
from matplotlib.ticker import LogFormatter

from semsched.core.plan import PreemptionMode
from semsched.metrics.report import ColumnKind, metric_kind
from semsched.metrics.series import MonitoringSeries
from semsched.metrics.summary import ClassSummary, Summary

PathLike = str | os.PathLike[str]
Sweep = Mapping[str, Sequence[tuple[float, Summary]]]

DEFAULT_BAR_METRICS = ("ttft_p90", "e2e_mean", "slo_attainment", "tdg_ratio")
_PANEL_SIZE_IN = (4.0, 3.2)


def plot_latency_vs_rate(sweep: Sweep, path: PathLike, metric: str = "e2e_mean") -> None:
    """Write :func:`latency_vs_rate_figure` as a PNG."""
    _save(latency_vs_rate_figure(sweep, metric), path)


def latency_vs_rate_figure(sweep: Sweep, metric: str = "e2e_mean") -> Figure:
    """One panel for all requests and one per priority class; in each, one line per policy of ``metric``
    (any :meth:`ClassSummary.metric` name) against request rate (req/s). Missing values leave gaps; a policy
    with no value in a panel has no line there, and a panel with no value at all says so."""
    summaries = [s for points in sweep.values() for _, s in points]
    classes: list[int | None] = [None, *_priorities(summaries)]
    colours = _colours(sweep)
    figure, axes = _panels(len(classes))
    for ax, priority in zip(axes, classes, strict=True):
        for policy, points in sweep.items():
            rates, values = _series(points, priority, metric)
            if _has_data(values):
                ax.plot(rates, values, marker="o", label=policy, color=colours[policy])
        _note_if_empty(ax)
        ax.set_title(_class_title(summaries, priority))
        ax.set_xlabel("request rate (req/s)")
        ax.set_ylabel(metric_label(metric))
        ax.grid(alpha=0.3)
    figure_legend(figure, axes)
    return figure


def metric_label(metric: str) -> str:
    """Axis label with the unit of a :meth:`ClassSummary.metric` name."""
    if metric.startswith("normalized_latency"):
        return f"{metric} (s/token)"
    if metric.startswith(("ttft", "tpot", "e2e", "queueing", "itl")):
        return f"{metric} (s)"
    if metric.startswith(("throughput", "goodput")):
        return f"{metric} (req/s)"
    return metric


def plot_class_bars(
    results: Mapping[str, Summary],
    path: PathLike,
    metrics: Sequence[str] = DEFAULT_BAR_METRICS,
    colours: Mapping[str, str] | None = None,
) -> None:
    """Write :func:`class_bars_figure` as a PNG."""
    _save(class_bars_figure(results, metrics, colours), path)


def class_bars_figure(
    results: Mapping[str, Summary],
    metrics: Sequence[str] = DEFAULT_BAR_METRICS,
    colours: Mapping[str, str] | None = None,
) -> Figure:
    """One panel per metric; bars grouped by class ("all", then each priority), one bar per policy (``colours``:
    policy -> colour, as :func:`series_figure` takes them; default one of matplotlib's cycle each). A missing
    value leaves its bar out; a panel with no value at all (no request finished, no class with a target) says
    so instead of failing, and so does the figure when there are no metrics or no results."""
    summaries = list(results.values())
    classes: list[int | None] = [None, *_priorities(summaries)]
    colours = dict(colours) if colours is not None else _colours(results)
    figure, axes = _panels(max(len(metrics), 1))
    bar_width = 0.8 / max(len(results), 1)
    positions = np.arange(len(classes), dtype=np.float64)
    for ax, metric in zip(axes, metrics, strict=False):
        values_by_policy = {
            policy: [_value(summary.class_summary(p), metric) for p in classes]
            for policy, summary in results.items()
        }
        for k, (policy, values) in enumerate(values_by_policy.items()):
            if _has_data(values):
                ax.bar(positions + k * bar_width, values, width=bar_width, label=policy, color=colours[policy])
        ax.set_xticks(positions + bar_width * (len(results) - 1) / 2)
        ax.set_xticklabels(
            [_class_title(summaries, p) for p in classes], fontsize="small", rotation=30, ha="right"
        )
        ax.set_xlim(-bar_width, positions[-1] + len(results) * bar_width)  # room for every bar, drawn or not
        ax.set_title(metric_label(metric))
        _scale_y(ax, metric, [v for values in values_by_policy.values() for v in values])
        ax.grid(axis="y", alpha=0.3)
        if ax.has_data():
            fraction = metric_kind(metric) is ColumnKind.FRACTION  # attainment, TDG: None means no target
            mark_bars(ax, values_by_policy, positions, bar_width, colours, zero="0 %" if fraction else ZERO,
                      missing=NO_SLO if fraction else NOT_AVAILABLE)
        _note_if_empty(ax)
    if not metrics:
        _note_if_empty(axes[0], "no metric to plot")
    figure_legend(figure, axes)
    return figure


def _series(
    points: Sequence[tuple[float, Summary]], priority: int | None, metric: str
) -> tuple[list[float], list[float]]:
    ordered = sorted(points, key=lambda point: point[0])
    rates = [rate for rate, _ in ordered]
    values = [_value(s.class_summary(priority), metric) for _, s in ordered]
    return rates, values


def _value(summary: ClassSummary | None, metric: str) -> float:
    value = None if summary is None else summary.metric(metric)
    return math.nan if value is None else float(value)


def _scale_y(ax: Axes, metric: str, values: Sequence[float]) -> None:
    if metric_kind(metric) is ColumnKind.FRACTION:
        ax.set_ylim(0.0, 1.05)
    elif metric_label(metric).endswith("(s)") and spans_a_decade(values):
        log_scale(ax)  # latencies of different policies span orders of magnitude
    else:
        ax.set_ylim(bottom=0.0)


# ---- what every figure shares -------------------------------------------------------------------------------
NOT_AVAILABLE = "n/a"
"""What a bar with no value says (a class without an SLO target, nothing finished): never a bar of height 0."""
NO_SLO = "no SLO"
"""What a bar of SLO attainment or TDG ratio says for a class without a target."""
ZERO = "0"
"""What a bar of height zero says, so that a real 0 (0 % of requests met their SLO) is seen."""
NONE = "none"
"""What a panel of monitoring series says when every value in it is zero."""


def plain_number(value: float) -> str:
    """``value`` as a person writes it on an axis: 12, 12.6, 0.25, 1,000; three significant digits."""
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    decimals = max(0, 2 - math.floor(math.log10(abs(value))))
    text = f"{value:,.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


class PlainLogFormatter(LogFormatter):
    """matplotlib's choice of which log ticks to label, each label a :func:`plain_number`."""

    def __call__(self, x: float, pos: int | None = None) -> str:
        return plain_number(x) if super().__call__(x, pos) else ""


def log_scale(ax: Axes) -> None:
    """A logarithmic y axis whose ticks read as plain numbers (minor ticks labelled where the range is short)."""
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(PlainLogFormatter())
    ax.yaxis.set_minor_formatter(PlainLogFormatter(labelOnlyBase=False, minor_thresholds=(2, 0.5)))


def spans_a_decade(values: Iterable[float | None]) -> bool:
    """Whether the positive finite ``values`` span a factor of ten or more: only then does a log axis help
    (bars over a shorter range on a log axis exaggerate small differences)."""
    positive = [v for v in values if v is not None and math.isfinite(v) and v > 0]
    return bool(positive) and max(positive) >= 10 * min(positive)


def mark_bars(
    ax: Axes,
    values_by_series: Mapping[str, Sequence[float | None]],
    positions: np.ndarray,
    bar_width: float,
    colours: Mapping[str, str],
    *,
    zero: str = ZERO,
    missing: str = NOT_AVAILABLE,
) -> None:
    """Label the bars that cannot be seen: ``missing`` where a value is missing (one grey label over the group
    when the whole group is, else one per bar in its series' colour) and ``zero`` where a value is 0 (``≈``
    and ``zero`` where it is under 1 % of the largest, on a linear axis), at the foot of the bar with a stub of
    the bar's colour (right on a log scale too)."""
    foot = ax.get_xaxis_transform()  # x in data, y in axes coordinates
    columns = list(values_by_series.values())
    largest = max((abs(v) for series in columns for v in map(_finite, series) if not math.isnan(v)), default=0.0)
    tiny = 0.01 * largest if ax.get_yscale() == "linear" else 0.0
    for group, position in enumerate(positions):
        values = [_finite(series[group]) for series in columns]
        if all(math.isnan(v) for v in values):
            centre = position + bar_width * (len(values) - 1) / 2
            ax.text(centre, 0.02, missing, transform=foot, ha="center", va="bottom", color="dimgrey",
                    fontsize="small", fontstyle="italic")
            continue
        for k, (series, value) in enumerate(zip(values_by_series, values, strict=True)):
            x = position + k * bar_width
            label = _bar_label(value, tiny, zero=zero, missing=missing)
            if label is None:
                continue
            if label != missing:  # a stub of the bar's colour on the axis: a bar of height zero, seen
                ax.plot([x - 0.4 * bar_width, x + 0.4 * bar_width], [0.006, 0.006], transform=foot,
                        color=colours[series], linewidth=3, solid_capstyle="butt", clip_on=False, label="_zero")
            ax.text(x, 0.025, label, transform=foot, ha="center", va="bottom", color=colours[series],
                    fontsize="small", fontweight="bold", rotation=90)


def _bar_label(value: float, tiny: float, *, zero: str, missing: str) -> str | None:
    if math.isnan(value):
        return missing
    if value == 0:
        return zero
    return f"≈{zero}" if abs(value) < tiny else None


def figure_legend(figure: Figure, axes: Sequence[Axes]) -> None:
    """One legend for the whole figure, outside the axes on the right (never over a bar or a line), naming
    every series drawn in any panel."""
    entries: dict[str, Artist] = {}
    for ax in axes:
        handles, labels = ax.get_legend_handles_labels()
        for handle, label in zip(handles, labels, strict=True):
            entries.setdefault(label, handle)
    if entries:
        figure.legend(list(entries.values()), list(entries), loc="outside right upper", fontsize="small")


def _finite(value: float | None) -> float:
    return math.nan if value is None or not math.isfinite(value) else float(value)


def _has_data(values: Sequence[float]) -> bool:
    return any(math.isfinite(v) for v in values)


def _colours(policies: Iterable[str]) -> dict[str, str]:
    """One colour per policy, the same in every panel even where a policy has nothing to draw."""
    return {policy: f"C{k % 10}" for k, policy in enumerate(policies)}


NO_DATA = "no data"


def _note_if_empty(ax: Axes, note: str = NO_DATA) -> None:
    """Write ``note`` across an axes that holds no plotted data, so an empty panel reads as empty on purpose."""
    if not ax.has_data():
        ax.text(0.5, 0.5, note, transform=ax.transAxes, ha="center", va="center", color="grey")


def _priorities(summaries: Sequence[Summary]) -> list[int]:
    return sorted({p for s in summaries for p in s.by_priority})


def _class_title(summaries: Sequence[Summary], priority: int | None) -> str:
    if priority is None:
        return "all"
    tiers = sorted({t for s in summaries if priority in s.by_priority for t in s.by_priority[priority].tiers})
    return f"p{priority} ({', '.join(tiers)})" if tiers else f"p{priority}"


def _panels(count: int) -> tuple[Figure, list[Axes]]:
    figure = Figure(figsize=(_PANEL_SIZE_IN[0] * count, _PANEL_SIZE_IN[1]), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(1, count, squeeze=False)[0]
    return figure, list(axes)


def _save(figure: Figure, path: PathLike) -> None:
    figure.savefig(Path(path), format="png", dpi=120)
    figure.clear()


# ---- monitoring series --------------------------------------------------------------------------------------
_SERIES_TOP_PANELS = 5  # preemptions by mode (3), swap blocks in use, rejections


def plot_series(
    series: Mapping[str, MonitoringSeries], path: PathLike, colours: Mapping[str, str] | None = None
) -> None:
    """Write :func:`series_figure` as a PNG."""
    _save(series_figure(series, colours), path)


def series_figure(series: Mapping[str, MonitoringSeries], colours: Mapping[str, str] | None = None) -> Figure:
    """Monitoring series against time, one line per policy (``colours``: policy -> colour; default one of
    matplotlib's cycle each). First row: preemptions per bin by mode, swap blocks in use (max), rejections per
    bin; second row: mean queue depth per priority; third: SLO compliance per priority. A panel with nothing
    to draw says so, and so does the figure when there are no series."""
    colour_of = dict(colours) if colours is not None else _colours(series)
    priorities = sorted({p for one in series.values() for p in one.priorities})
    tiers = {p: sorted({t for one in series.values() if p in one.tiers for t in one.tiers[p]}) for p in priorities}
    columns = max(_SERIES_TOP_PANELS, len(priorities))
    figure = Figure(figsize=(_PANEL_SIZE_IN[0] * columns, _PANEL_SIZE_IN[1] * 3), layout="constrained")
    FigureCanvasAgg(figure)
    grid = figure.subplots(3, columns, squeeze=False)
    per_bin = _per_bin(next(iter(series.values())).bin_s) if series else "per bin"
    top = list(grid[0][:_SERIES_TOP_PANELS])
    for ax, mode in zip(top, PreemptionMode, strict=False):
        _series_lines(ax, series, colour_of, partial(_preemptions_of, mode=mode))
        ax.set_title(f"preemptions ({mode.value}) {per_bin}")
    _series_lines(top[3], series, colour_of, lambda one: one.swap_blocks_max)
    top[3].set_title("swap blocks in use (max)")
    _series_lines(top[4], series, colour_of, lambda one: one.num_rejections)
    top[4].set_title(f"rejections {per_bin}")
    for row, (title, values_of) in enumerate(_PRIORITY_ROWS, start=1):
        for ax, p in zip(grid[row], priorities, strict=False):
            _series_lines(ax, series, colour_of, partial(values_of, p))
            ax.set_title(f"{title} p{p}" + (f" ({', '.join(tiers[p])})" if tiers[p] else ""))
            if row == 2:
                ax.set_ylim(0.0, 1.05)
        for ax in grid[row][len(priorities):]:
            ax.set_axis_off()
    counts = [*top, *(ax for ax in grid[1][: len(priorities)])]  # counts and depths: never below 0
    for ax in [*counts, *(ax for ax in grid[2][: len(priorities)])]:
        ax.set_xlabel("time (min)")
        ax.grid(alpha=0.3)
        _note_if_empty(ax)
    for ax in counts:
        _from_zero(ax)
    for ax in grid[0][_SERIES_TOP_PANELS:]:
        ax.set_axis_off()
    figure_legend(figure, top)
    return figure


def _from_zero(ax: Axes) -> None:
    """A count's axis starts at 0; a panel whose every value is 0 gets the axis 0 to 1 and says :data:`NONE`
    (matplotlib would centre a flat line at 0 between -0.04 and 0.04)."""
    if not ax.has_data():
        return
    steps = [patch for patch in ax.patches if isinstance(patch, StepPatch)]
    values = [v for step in steps for v in np.asarray(step.get_data()[0], dtype=np.float64)]
    if all(v == 0 or math.isnan(v) for v in values):
        ax.set_ylim(0.0, 1.0)
        ax.text(0.5, 0.5, NONE, transform=ax.transAxes, ha="center", va="center", color="grey")
    else:
        ax.set_ylim(bottom=0.0)


def _series_lines(
    ax: Axes,
    series: Mapping[str, MonitoringSeries],
    colours: Mapping[str, str],
    values_of: Callable[[MonitoringSeries], Sequence[float | None]],
) -> None:
    """One step line per policy, each bin's value across the bin (minutes); missing values leave gaps, a policy
    with no value draws nothing."""
    for policy, one in series.items():
        values = [math.nan if v is None else float(v) for v in values_of(one)]
        if _has_data(values):
            edges_min = np.append(one.starts_s, one.num_bins * one.bin_s) / 60.0
            ax.stairs(values, edges_min, label=policy, color=colours.get(policy), baseline=None)


def _preemptions_of(one: MonitoringSeries, mode: PreemptionMode) -> Sequence[float | None]:
    return one.preemptions_by_mode[mode]


def _queue_depth_of(p: int, one: MonitoringSeries) -> Sequence[float | None]:
    return one.queue_depth_mean.get(p, ())


def _slo_compliance_of(p: int, one: MonitoringSeries) -> Sequence[float | None]:
    return one.slo_compliance(p) if p in one.slo_requests else ()


_PRIORITY_ROWS: tuple[tuple[str, Callable[[int, MonitoringSeries], Sequence[float | None]]], ...] = (
    ("queue depth (mean)", _queue_depth_of),
    ("SLO compliance", _slo_compliance_of),
)


def _per_bin(bin_s: float) -> str:
    return "per min" if bin_s == 60.0 else f"per {bin_s:g} s"
