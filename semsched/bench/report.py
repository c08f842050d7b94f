"""A benchmark run as the simulator's results: every :class:`Outcome` becomes a terminal
:class:`~semsched.core.request.Request` with its token times in a :class:`~semsched.core.request.TokenTimeline`,
so :mod:`semsched.metrics` computes TTFT, TPOT, ITL, E2E, throughput, SLO attainment and goodput, overall and per
priority class, exactly as for a simulation, and ``requests.csv`` has the simulator's columns.

A request's arrival is the time it was sent (seconds after the run's start); how late the client sent it
against the workload's arrival is reported apart (``send_lag_s``). A success is FINISHED; a refusal for load
(429/503, semsched's abort) REJECTED; any other failure DROPPED; the reason is the rejection reason.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from semsched.bench.client import Outcome
from semsched.bench.replay import ReplayResult
from semsched.core.request import Request, RequestState, TokenTimeline
from semsched.metrics import Distribution, Summary, request_metrics, summarize, write_json, write_requests_csv
from semsched.metrics.report import Column, ColumnKind, format_columns

#: the name of the run in ``bench.json``'s results and ``requests.csv``'s policy column
LABEL = "bench"

BENCH_COLUMNS: tuple[Column, ...] = (
    Column("sent", "num_requests", ColumnKind.COUNT),
    Column("rejected", "num_rejected", ColumnKind.COUNT),
    Column("errors", "num_dropped", ColumnKind.COUNT),
    Column("out\ntok/s", "output_tokens_per_s", ColumnKind.NUMBER),
    Column("TTFT\np50", "ttft_median", ColumnKind.DURATION),
    Column("TTFT\np99", "ttft_p99", ColumnKind.DURATION),
    Column("TPOT\np50", "tpot_median", ColumnKind.DURATION),
    Column("TPOT\np99", "tpot_p99", ColumnKind.DURATION),
    Column("ITL\np50", "itl_median", ColumnKind.DURATION),
    Column("ITL\np99", "itl_p99", ColumnKind.DURATION),
    Column("E2E\np50", "e2e_median", ColumnKind.DURATION),
    Column("E2E\np99", "e2e_p99", ColumnKind.DURATION),
    Column("SLO\nmet", "slo_attainment", ColumnKind.FRACTION),
    Column("goodput\nreq/s", "goodput", ColumnKind.NUMBER),
)


@dataclass(frozen=True)
class BenchReport:
    """The requests of a run in terminal states, their :class:`Summary`, and what the client itself did."""

    requests: list[Request]
    summary: Summary
    #: send time minus the workload's arrival time, per request (how far the client fell behind)
    send_lag_s: Distribution
    model: str
    wall_s: float

    def client_stats(self) -> dict[str, Any]:
        """What JSON reports beside the summary: model, wall time, send lag, failures by reason."""
        overall = self.summary.overall
        return {
            "model": self.model,
            "wall_s": round(self.wall_s, 3),
            "num_sent": len(self.requests),
            "num_rejected": overall.num_rejected,
            "num_errors": overall.num_dropped,
            "send_lag_s": self.send_lag_s.to_dict(),
            "failures_by_reason": dict(overall.rejections_by_reason),
        }

    def document(self, meta: Mapping[str, Any]) -> dict[str, Any]:
        """``bench.json``'s content: ``{"meta": meta + client stats, "results": {"bench": summary}}``, the
        layout of ``semsched simulate``'s ``summary.json``."""
        return {"meta": {**meta, "client": self.client_stats()}, "results": {LABEL: self.summary.to_dict()}}


def build_report(result: ReplayResult) -> BenchReport:
    requests = [result_request(o) for o in result.outcomes]
    lags = np.asarray([o.send_time_s - o.request.arrival_time_s for o in result.outcomes], dtype=np.float64)
    return BenchReport(requests, summarize(requests), Distribution.of(lags), result.model, result.wall_s)


def result_request(outcome: Outcome) -> Request:
    """A fresh copy of the workload request, ended as ``outcome`` says, its tokens on its own timeline."""
    state, reason = _end_state(outcome)
    request = dataclasses.replace(
        outcome.request,
        arrival_time_s=outcome.send_time_s,
        state=state,
        finish_reason=reason,
        finish_time_s=outcome.finish_time_s,
        timeline=None,
        token_step_ranges=[],
        policy_state={},
    )
    times_s = token_times_s(outcome.chunk_times_s, outcome.completion_tokens)
    if times_s:
        timeline = TokenTimeline()
        request.record_tokens(timeline, timeline.extend(times_s), len(times_s))
    request.num_output_tokens = len(times_s)
    request.num_computed_tokens = request.num_tokens if state is RequestState.FINISHED else 0
    return request


def _end_state(outcome: Outcome) -> tuple[RequestState, str | None]:
    if outcome.error is None:
        return RequestState.FINISHED, None
    return (RequestState.REJECTED if outcome.rejected else RequestState.DROPPED), outcome.error


def token_times_s(chunk_times_s: list[float], completion_tokens: int | None) -> list[float]:
    """One time per output token: each chunk's time, matched to the usage's count when there is one. More
    tokens than chunks: the chunks held several (spread evenly, earlier chunks first); fewer: the first
    ``n - 1`` chunks and the last one."""
    chunks = len(chunk_times_s)
    n = chunks if completion_tokens is None else completion_tokens
    if n == chunks or chunks == 0:
        return list(chunk_times_s)
    if n < chunks:
        return [*chunk_times_s[: n - 1], chunk_times_s[-1]] if n else []
    per_chunk, extra = divmod(n, chunks)
    return [t for i, t in enumerate(chunk_times_s) for _ in range(per_chunk + (i < extra))]


# ---- output ---------------------------------------------------------------------------------------------------
def bench_table(summary: Summary, *, title: str = "Benchmark (per priority class)") -> Table:
    """Classes as rows (``all``, then each priority with its tiers), :data:`BENCH_COLUMNS` as columns; durations
    of one kind in one unit (:func:`~semsched.metrics.report.format_columns`)."""
    classes = summary.classes()
    table = Table(title=title)
    table.add_column("class", style="bold", no_wrap=True)
    cells_by_column = []
    values = [[c.metric(column.metric) for c in classes] for column in BENCH_COLUMNS]
    for column, (unit, cells) in zip(BENCH_COLUMNS, format_columns(BENCH_COLUMNS, values), strict=True):
        table.add_column(column.header if unit is None else f"{column.header}\n({unit})", justify="right")
        cells_by_column.append(cells)
    for row, summary_class in enumerate(classes):
        label = summary_class.label
        if summary_class.priority is not None and summary_class.tiers:
            label += f" ({', '.join(summary_class.tiers)})"
        table.add_row(label, *(cells[row] for cells in cells_by_column))
    return table


def print_report(console: Console, report: BenchReport) -> None:
    console.print(bench_table(report.summary))
    failures = report.summary.overall.rejections_by_reason
    if failures:
        console.print("failures by reason: " + ", ".join(f"{k}: {n}" for k, n in failures.items()), markup=False)
    lag = report.send_lag_s
    if lag.p99 is not None:
        console.print(f"[dim]client send lag: p99 {lag.p99 * 1000:.1f} ms, wall {report.wall_s:.1f} s[/]")


def write_report(out: Path, report: BenchReport, meta: Mapping[str, Any]) -> None:
    """``bench.json`` (:meth:`BenchReport.document`) and ``requests.csv`` (the simulator's columns) in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "bench.json", {LABEL: report.summary}, {**meta, "client": report.client_stats()})
    write_requests_csv(out / "requests.csv", [request_metrics(r) for r in report.requests], LABEL)


def report_json(report: BenchReport, meta: Mapping[str, Any]) -> str:
    return json.dumps(report.document(meta), indent=2, allow_nan=False)
