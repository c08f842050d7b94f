"""PNG figures of policy comparisons.

Figures are built with matplotlib's object API (:class:`matplotlib.figure.Figure`) and rendered by the Agg
canvas, so nothing here touches pyplot's global figure registry or the process-wide backend: plotting works
headless and leaks no open figures.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from semsched.metrics.summary import ClassSummary, Summary

PathLike = str | os.PathLike[str]
Sweep = Mapping[str, Sequence[tuple[float, Summary]]]

DEFAULT_BAR_METRICS = ("ttft_p90", "e2e_mean", "slo_attainment", "tdg_ratio")
_PANEL_SIZE_IN = (4.0, 3.2)


def plot_latency_vs_rate(sweep: Sweep, path: PathLike, metric: str = "e2e_mean") -> None:
    """One panel for all requests and one per priority class; in each, one line per policy of ``metric``
    (any :meth:`ClassSummary.metric` name) against request rate (req/s). Missing values leave gaps."""
    summaries = [s for points in sweep.values() for _, s in points]
    classes: list[int | None] = [None, *_priorities(summaries)]
    figure, axes = _panels(len(classes))
    for ax, priority in zip(axes, classes, strict=True):
        for policy, points in sweep.items():
            rates, values = _series(points, priority, metric)
            ax.plot(rates, values, marker="o", label=policy)
        ax.set_title(_class_title(summaries, priority))
        ax.set_xlabel("request rate (req/s)")
        ax.set_ylabel(metric_label(metric))
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize="small")
    _save(figure, path)


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
    results: Mapping[str, Summary], path: PathLike, metrics: Sequence[str] = DEFAULT_BAR_METRICS
) -> None:
    """One panel per metric; bars grouped by class ("all", then each priority), one bar per policy."""
    summaries = list(results.values())
    classes: list[int | None] = [None, *_priorities(summaries)]
    figure, axes = _panels(len(metrics))
    bar_width = 0.8 / max(len(results), 1)
    positions = np.arange(len(classes), dtype=np.float64)
    for ax, metric in zip(axes, metrics, strict=True):
        for k, (policy, summary) in enumerate(results.items()):
            values = [_value(summary.class_summary(p), metric) for p in classes]
            ax.bar(positions + k * bar_width, values, width=bar_width, label=policy)
        ax.set_xticks(positions + bar_width * (len(results) - 1) / 2)
        ax.set_xticklabels(
            [_class_title(summaries, p) for p in classes], fontsize="small", rotation=30, ha="right"
        )
        ax.set_title(metric_label(metric))
        if metric_label(metric).endswith("(s)"):
            ax.set_yscale("log")  # latencies of different policies span orders of magnitude
        ax.grid(axis="y", alpha=0.3)
    axes[0].legend(fontsize="small")
    _save(figure, path)


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
