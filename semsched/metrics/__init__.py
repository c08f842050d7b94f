"""Serving metrics: per-request latencies and SLO outcomes, PROSERVE's TDG, per-class summaries, and output.

Typical use after a run::

    summary = summarize(requests)                       # overall + per priority class
    write_json("out.json", {"fcfs": summary}, meta={})  # or write_summary_csv / print_comparison

A request meets its SLO when it finishes and meets every target it has (TTFT, TPOT, E2E); a class none of whose
requests has a target reports no attainment (``None``, "—" in tables), never 100 %.

Modules: :mod:`.request_metrics` (one request), :mod:`.tdg` (eq. 3 of seed 001), :mod:`.summary`
(aggregation), :mod:`.report` (JSON, CSV, rich tables), :mod:`.units` (one display unit per table column),
:mod:`.plots` (PNG figures), :mod:`.series` (per-minute monitoring series of a simulated run).
"""

from semsched.metrics.report import (
    class_table,
    comparison_table,
    print_comparison,
    write_json,
    write_requests_csv,
    write_summary_csv,
)
from semsched.metrics.request_metrics import REQUEST_ATTRIBUTES, RequestMetrics, request_metrics
from semsched.metrics.summary import (
    ClassSummary,
    Distribution,
    Summary,
    metric_column,
    metric_columns,
    metric_names,
    summarize,
)
from semsched.metrics.tdg import TDGTotals, TDGWeights, request_ideal_gains, request_tdg_gains, tdg_totals
from semsched.metrics.units import MISSING, TimeUnit, time_unit_for

__all__ = [
    "MISSING",
    "REQUEST_ATTRIBUTES",
    "ClassSummary",
    "Distribution",
    "RequestMetrics",
    "Summary",
    "TDGTotals",
    "TDGWeights",
    "TimeUnit",
    "class_table",
    "comparison_table",
    "metric_column",
    "metric_columns",
    "metric_names",
    "print_comparison",
    "request_ideal_gains",
    "request_metrics",
    "request_tdg_gains",
    "summarize",
    "tdg_totals",
    "time_unit_for",
    "write_json",
    "write_requests_csv",
    "write_summary_csv",
]
