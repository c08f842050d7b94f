"""Writing results out: JSON and CSV files, and rich tables for the terminal.

``results`` everywhere maps a policy name to the :class:`~semsched.metrics.summary.Summary` of its run on one
workload. Files are written in full on each call (no partial files are left if serialisation fails).
"""

from __future__ import annotations

import csv
import dataclasses
import enum
import json
import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from semsched.metrics.request_metrics import RequestMetrics
from semsched.metrics.summary import STATISTICS, ClassSummary, Summary, metric_names

PathLike = str | os.PathLike[str]


def write_json(path: PathLike, results: Mapping[str, Summary], meta: Mapping[str, Any]) -> None:
    """Write ``{"meta": meta, "results": {policy: summary.to_dict()}}``; NaN/inf in ``meta`` become null."""
    document = {"meta": _json_safe(meta), "results": {name: s.to_dict() for name, s in results.items()}}
    text = json.dumps(document, indent=2, allow_nan=False)
    Path(path).write_text(text + "\n", encoding="utf-8")


_REQUEST_COLUMNS = [f.name for f in dataclasses.fields(RequestMetrics) if f.name != "itl_s"]
REQUEST_CSV_COLUMNS = ["policy", *_REQUEST_COLUMNS, "itl_max_s"]


def write_requests_csv(
    path: PathLike, metrics: Sequence[RequestMetrics], policy: str, *, append: bool = False
) -> None:
    """One row per request, columns :data:`REQUEST_CSV_COLUMNS`; missing values are empty cells.

    With ``append=True`` rows are added to an existing file (the header is written only if the file is new),
    so several policies can share one file.
    """
    target = Path(path)
    write_header = not (append and target.exists() and target.stat().st_size > 0)
    with target.open("a" if append else "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=REQUEST_CSV_COLUMNS)
        if write_header:
            writer.writeheader()
        writer.writerows(_request_row(m, policy) for m in metrics)


def write_summary_csv(path: PathLike, results: Mapping[str, Summary]) -> None:
    """One row per policy x class ("all" first, then each priority), one column per metric name."""
    columns = ["policy", "class", "priority", "tiers", *metric_names()]
    with Path(path).open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        for policy, summary in results.items():
            writer.writerows({"policy": policy, **c.flat()} for c in summary.classes())


def _request_row(m: RequestMetrics, policy: str) -> dict[str, Any]:
    row: dict[str, Any] = {"policy": policy}
    row.update({name: _csv_cell(getattr(m, name)) for name in _REQUEST_COLUMNS})
    row["itl_max_s"] = float(m.itl_s.max()) if m.itl_s.size else ""
    return row


def _csv_cell(value: object) -> object:
    if value is None:
        return ""
    if isinstance(value, enum.Enum):
        return value.value
    return value


def _json_safe(value: object) -> object:
    """Convert numpy scalars and containers to plain JSON values; non-finite floats become ``None``."""
    if isinstance(value, Mapping):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    if isinstance(value, np.ndarray):
        return [_json_safe(v) for v in value.tolist()]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


# ---- terminal tables --------------------------------------------------------------------------------

Formatter = Callable[[float | None], str]


def _fmt_ms(value_s: float | None) -> str:
    return "-" if value_s is None else f"{value_s * 1e3:.1f}"


def _fmt_s(value_s: float | None) -> str:
    return "-" if value_s is None else f"{value_s:.2f}"


def _fmt_pct(fraction: float | None) -> str:
    return "-" if fraction is None else f"{fraction * 100:.1f}%"


def _fmt_num(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def _fmt_int(value: float | None) -> str:
    return "-" if value is None else f"{int(value)}"


# (column header, metric name, formatter)
COMPARISON_COLUMNS: tuple[tuple[str, str, Formatter], ...] = (
    ("TTFT mean (ms)", "ttft_mean", _fmt_ms),
    ("TTFT p90 (ms)", "ttft_p90", _fmt_ms),
    ("TPOT p90 (ms)", "tpot_p90", _fmt_ms),
    ("E2E mean (s)", "e2e_mean", _fmt_s),
    ("E2E p99 (s)", "e2e_p99", _fmt_s),
    ("norm. lat. (ms/tok)", "normalized_latency_mean", _fmt_ms),
    ("SLO attain.", "slo_attainment", _fmt_pct),
    ("goodput (req/s)", "goodput", _fmt_num),
    ("TDG ratio", "tdg_ratio", _fmt_pct),
    ("preempt.", "preemptions", _fmt_int),
)


def comparison_table(results: Mapping[str, Summary], *, title: str = "Policy comparison (all requests)") -> Table:
    """Policies as rows, the headline metrics of :data:`COMPARISON_COLUMNS` (over all requests) as columns."""
    table = Table(title=title)
    table.add_column("policy", style="bold", no_wrap=True)
    for header, _, _ in COMPARISON_COLUMNS:
        table.add_column(header, justify="right")
    for policy, summary in results.items():
        cells = [fmt(summary.overall.metric(name)) for _, name, fmt in COMPARISON_COLUMNS]
        table.add_row(policy, *cells)
    return table


def class_table(results: Mapping[str, Summary], metric: str) -> Table:
    """Policies as rows; ``all`` and each priority class seen in any result as columns; cells ``metric``."""
    priorities = sorted({p for s in results.values() for p in s.by_priority})
    fmt = _formatter_for(metric)
    table = Table(title=f"{metric} by priority class")
    table.add_column("policy", style="bold", no_wrap=True)
    table.add_column("all", justify="right")
    for priority in priorities:
        table.add_column(_class_header(results.values(), priority), justify="right")
    for policy, summary in results.items():
        cells = [fmt(_class_metric(summary.class_summary(p), metric)) for p in [None, *priorities]]
        table.add_row(policy, *cells)
    return table


def print_comparison(console: Console, results: Mapping[str, Summary]) -> None:
    """Print the comparison table, then per-class SLO attainment and TDG ratio."""
    console.print(comparison_table(results))
    console.print(class_table(results, "slo_attainment"))
    console.print(class_table(results, "tdg_ratio"))


def _class_metric(summary: ClassSummary | None, metric: str) -> float | None:
    return None if summary is None else summary.metric(metric)


def _class_header(summaries: Iterable[Summary], priority: int) -> str:
    tiers = sorted({t for s in summaries if priority in s.by_priority for t in s.by_priority[priority].tiers})
    return f"p{priority} ({', '.join(tiers)})" if tiers else f"p{priority}"


def _formatter_for(metric: str) -> Formatter:
    for _, name, fmt in COMPARISON_COLUMNS:
        if name == metric:
            return fmt
    if "attainment" in metric or metric == "tdg_ratio":
        return _fmt_pct
    if metric.split("_")[-1] in STATISTICS:
        return _fmt_s if metric.startswith("e2e") else _fmt_ms
    return _fmt_num
