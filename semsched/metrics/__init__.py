"""Serving metrics: per-request latencies and SLO outcomes, PROSERVE's TDG, per-class summaries, and output.

Typical use after a run::

    summary = summarize(requests)                       # overall + per priority class
    write_json("out.json", {"fcfs": summary}, meta={})  # or write_summary_csv / print_comparison

Modules: :mod:`.request_metrics` (one request), :mod:`.tdg` (eq. 3 of seed 001), :mod:`.summary`
(aggregation), :mod:`.report` (JSON, CSV, rich tables), :mod:`.plots` (PNG figures).
"""

from semsched.metrics.report import (
    class_table,
    comparison_table,
    print_comparison,
    write_json,
    write_requests_csv,
    write_summary_csv,
)
from semsched.metrics.request_metrics import RequestMetrics, request_metrics
from semsched.metrics.summary import ClassSummary, Distribution, Summary, metric_names, summarize
from semsched.metrics.tdg import TDGTotals, TDGWeights, request_ideal_gains, request_tdg_gains, tdg_totals

__all__ = [
    "ClassSummary",
    "Distribution",
    "RequestMetrics",
    "Summary",
    "TDGTotals",
    "TDGWeights",
    "class_table",
    "comparison_table",
    "metric_names",
    "print_comparison",
    "request_ideal_gains",
    "request_metrics",
    "request_tdg_gains",
    "summarize",
    "tdg_totals",
    "write_json",
    "write_requests_csv",
    "write_summary_csv",
]
