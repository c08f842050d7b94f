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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from semsched.metrics.request_metrics import REQUEST_ATTRIBUTES, RequestMetrics
from semsched.metrics.summary import SCALAR_METRICS, ClassSummary, Summary, metric_columns, short_metric_name
from semsched.metrics.units import MISSING, time_unit_for, with_significant_digits

PathLike = str | os.PathLike[str]


def write_json(path: PathLike, results: Mapping[str, Summary], meta: Mapping[str, Any]) -> None:
    """Write ``{"meta": meta, "results": {policy: summary.to_dict()}}``; NaN/inf in ``meta`` become null."""
    document = {"meta": _json_safe(meta), "results": {name: s.to_dict() for name, s in results.items()}}
    text = json.dumps(document, indent=2, allow_nan=False)
    Path(path).write_text(text + "\n", encoding="utf-8")


def _request_columns() -> list[str]:
    """The :class:`RequestMetrics` fields as columns: ``attributes`` spread into one column per
    :data:`REQUEST_ATTRIBUTES` entry, the ITL array reduced to its largest gap."""
    columns: list[str] = []
    for field in dataclasses.fields(RequestMetrics):
        if field.name == "attributes":
            columns.extend(REQUEST_ATTRIBUTES)
        elif field.name == "itl_s":
            columns.append("itl_max_s")
        else:
            columns.append(field.name)
    return columns


REQUEST_CSV_COLUMNS = ["policy", *_request_columns()]


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
    """One row per policy x class ("all" first, then each priority), one column per metric, named with its
    unit (:func:`~semsched.metrics.summary.metric_column`)."""
    columns = ["policy", "class", "priority", "tiers", *metric_columns()]
    with Path(path).open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        for policy, summary in results.items():
            writer.writerows({"policy": policy, **c.flat()} for c in summary.classes())


def _request_row(m: RequestMetrics, policy: str) -> dict[str, Any]:
    row: dict[str, Any] = {"policy": policy}
    for field in dataclasses.fields(m):
        if field.name == "attributes":
            row.update({name: _csv_cell(value) for name, value in m.attributes.items()})
        elif field.name == "itl_s":
            row["itl_max_s"] = float(m.itl_s.max()) if m.itl_s.size else ""
        else:
            row[field.name] = _csv_cell(getattr(m, field.name))
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


class ColumnKind(enum.Enum):
    """How a table column is shown: durations pick one unit per column (:mod:`.units`)."""

    DURATION = "duration"  # seconds
    DURATION_PER_TOKEN = "duration_per_token"  # seconds per output token
    FRACTION = "fraction"  # shown as a percentage
    COUNT = "count"
    NUMBER = "number"


@dataclass(frozen=True)
class Column:
    """One column of the comparison table: its header (a duration's unit is appended), the
    :meth:`ClassSummary.metric` name it shows, and how."""

    header: str
    metric: str
    kind: ColumnKind


COMPARISON_COLUMNS: tuple[Column, ...] = (
    Column("rejected", "num_rejected", ColumnKind.COUNT),
    Column("dropped", "num_dropped", ColumnKind.COUNT),
    Column("TTFT mean", "ttft_mean", ColumnKind.DURATION),
    Column("TTFT p90", "ttft_p90", ColumnKind.DURATION),
    Column("TPOT p90", "tpot_p90", ColumnKind.DURATION),
    Column("E2E mean", "e2e_mean", ColumnKind.DURATION),
    Column("E2E p99", "e2e_p99", ColumnKind.DURATION),
    Column("norm. lat.", "normalized_latency_mean", ColumnKind.DURATION_PER_TOKEN),
    Column("SLO met", "slo_attainment", ColumnKind.FRACTION),
    Column("goodput\n(req/s)", "goodput", ColumnKind.NUMBER),
    Column("TDG ratio", "tdg_ratio", ColumnKind.FRACTION),
    Column("preempt.", "preemptions", ColumnKind.COUNT),
)


#: requests a run with ``allow_stalls`` ended STALLED; shown (in red) only when some run has them
STALLED_COLUMN = Column("stalled", "num_stalled", ColumnKind.COUNT)


def _comparison_columns(results: Mapping[str, Summary]) -> tuple[Column, ...]:
    if any(summary.overall.num_stalled for summary in results.values()):
        return (STALLED_COLUMN, *COMPARISON_COLUMNS)
    return COMPARISON_COLUMNS


def format_column(values: Sequence[float | None], kind: ColumnKind) -> tuple[str | None, list[str]]:
    """The unit the cells are in (``"ms"``, ``"s/tok"``, ...; ``None`` where the header names it or there is
    none) and one cell per value; missing values show as :data:`~semsched.metrics.units.MISSING`."""
    if kind in (ColumnKind.DURATION, ColumnKind.DURATION_PER_TOKEN):
        unit = time_unit_for(values)
        per_token = "/tok" if kind is ColumnKind.DURATION_PER_TOKEN else ""
        return f"{unit.symbol}{per_token}", [unit.format(v) for v in values]
    return None, [_FORMATTERS[kind](v) for v in values]


def format_columns(
    columns: Sequence[Column], values: Sequence[Sequence[float | None]]
) -> list[tuple[str | None, list[str]]]:
    """:func:`format_column` for the columns of one table, durations of one kind in one unit (chosen by the
    largest of them): request latencies (TTFT, E2E, queueing), token gaps (TPOT, ITL) and normalized latency
    each share a unit, so a table never shows "E2E mean (ms)" beside "E2E p99 (s)"; a column of small values
    gets the decimals it needs to keep three significant digits."""
    groups: dict[str, list[float | None]] = {}
    for column, column_values in zip(columns, values, strict=True):
        if (group := _unit_group(column)) is not None:
            groups.setdefault(group, []).extend(column_values)
    units = {group: time_unit_for(group_values) for group, group_values in groups.items()}
    formatted = []
    for column, column_values in zip(columns, values, strict=True):
        group = _unit_group(column)
        if group is None:
            formatted.append(format_column(column_values, column.kind))
            continue
        unit = with_significant_digits(units[group], column_values)
        per_token = "/tok" if column.kind is ColumnKind.DURATION_PER_TOKEN else ""
        formatted.append((f"{unit.symbol}{per_token}", [unit.format(v) for v in column_values]))
    return formatted


def _unit_group(column: Column) -> str | None:
    """Which durations share a unit in one table (``None``: not a duration)."""
    if column.kind is ColumnKind.DURATION_PER_TOKEN:
        return "per token"
    if column.kind is not ColumnKind.DURATION:
        return None
    return "token gap" if short_metric_name(column.metric).startswith(("tpot", "itl")) else "latency"


def _fmt_pct(fraction: float | None) -> str:
    return MISSING if fraction is None else f"{fraction * 100:.1f}%"


def _fmt_num(value: float | None) -> str:
    return MISSING if value is None else f"{value:.3g}"


def _fmt_int(value: float | None) -> str:
    return MISSING if value is None else f"{int(value)}"


_FORMATTERS: dict[ColumnKind, Callable[[float | None], str]] = {
    ColumnKind.FRACTION: _fmt_pct,
    ColumnKind.COUNT: _fmt_int,
    ColumnKind.NUMBER: _fmt_num,
}


def comparison_table(results: Mapping[str, Summary], *, title: str = "Policy comparison (all requests)") -> Table:
    """Policies as rows, the headline metrics of :data:`COMPARISON_COLUMNS` (over all requests) as columns;
    durations of one kind in one unit (:func:`format_columns`)."""
    table = Table(title=title)
    table.add_column("policy", style="bold", no_wrap=True)
    overall = [summary.overall for summary in results.values()]
    columns = _comparison_columns(results)
    values = [[one.metric(column.metric) for one in overall] for column in columns]
    cells_by_column = []
    for column, column_values, (unit, cells) in zip(columns, values, format_columns(columns, values), strict=True):
        if column is STALLED_COLUMN:  # a scheduler defect, never a normal outcome: red wherever it happened
            cells = [f"[bold red]{c}[/]" if v else c for c, v in zip(cells, column_values, strict=True)]
        # the unit on a line of its own keeps the columns narrow enough for one screen
        table.add_column(column.header if unit is None else f"{column.header}\n({unit})", justify="right")
        cells_by_column.append(cells)
    for row, policy in enumerate(results):
        table.add_row(policy, *(cells[row] for cells in cells_by_column))
    return table


def class_table(results: Mapping[str, Summary], metric: str) -> Table:
    """Policies as rows; ``all`` and each priority class seen in any result as columns; cells ``metric``,
    durations in one unit for the whole table (named in the title) so that classes compare at a glance."""
    priorities = sorted({p for s in results.values() for p in s.by_priority})
    classes: list[int | None] = [None, *priorities]
    values = [_class_metric(s.class_summary(p), metric) for s in results.values() for p in classes]
    unit, cells = format_column(values, metric_kind(metric))
    table = Table(title=f"{metric} by priority class" if unit is None else f"{metric} ({unit}) by priority class")
    table.add_column("policy", style="bold", no_wrap=True)
    table.add_column("all", justify="right")
    for priority in priorities:
        table.add_column(_class_header(results.values(), priority), justify="right")
    for row, policy in enumerate(results):
        table.add_row(policy, *cells[row * len(classes) : (row + 1) * len(classes)])
    return table


def print_comparison(console: Console, results: Mapping[str, Summary]) -> None:
    """Print the comparison table, then per-class SLO attainment and TDG ratio."""
    console.print(comparison_table(results))
    console.print(class_table(results, "slo_attainment"))
    console.print(class_table(results, "tdg_ratio"))


def metric_kind(metric: str) -> ColumnKind:
    """How to show a :meth:`ClassSummary.metric` name (short or with its unit)."""
    name = short_metric_name(metric)
    if name.endswith("attainment") or name == "tdg_ratio":
        return ColumnKind.FRACTION
    if name.startswith("num_") or name in ("preemptions", "output_tokens"):
        return ColumnKind.COUNT
    if name in SCALAR_METRICS:
        return ColumnKind.NUMBER
    if name.startswith("normalized_latency"):
        return ColumnKind.DURATION_PER_TOKEN
    return ColumnKind.DURATION


def _class_metric(summary: ClassSummary | None, metric: str) -> float | None:
    return None if summary is None else summary.metric(metric)


def _class_header(summaries: Iterable[Summary], priority: int) -> str:
    tiers = sorted({t for s in summaries if priority in s.by_priority for t in s.by_priority[priority].tiers})
    return f"p{priority} ({', '.join(tiers)})" if tiers else f"p{priority}"


def sweep_table(sweep: Mapping[str, Sequence[tuple[float, Summary]]], metric: str) -> Table:
    """Policies as rows, request rates as columns, ``metric`` over all requests in the cells (one unit for the
    whole table, named in the title), and beside each rate what did not finish: rejected and dropped requests
    (``rejected/dropped``, and in red any requests a run with ``allow_stalls`` ended STALLED), so a policy cannot
    look fast by turning work away unseen."""
    rates = sorted({rate for points in sweep.values() for rate, _ in points})
    by_rate = {policy: dict(points) for policy, points in sweep.items()}
    values = [_class_metric(by_rate[p][r].overall if r in by_rate[p] else None, metric)
              for p in sweep for r in rates]
    unit, cells = format_column(values, metric_kind(metric))
    table = Table(title=f"{metric} ({unit}) by request rate" if unit else f"{metric} by request rate")
    table.add_column("policy", style="bold", no_wrap=True)
    for rate in rates:
        table.add_column(f"{rate:g}/s", justify="right")
        table.add_column("rejected/\ndropped", justify="right")
    for row, policy in enumerate(sweep):
        row_cells = []
        for k, rate in enumerate(rates):
            summary = by_rate[policy].get(rate)
            lost = MISSING if summary is None else f"{summary.overall.num_rejected}/{summary.overall.num_dropped}"
            if summary is not None and summary.overall.num_stalled:  # a defect (--allow-stalls): red
                lost += f" [bold red]+{summary.overall.num_stalled} stalled[/]"
            row_cells += [cells[row * len(rates) + k], lost]
        table.add_row(policy, *row_cells)
    return table
