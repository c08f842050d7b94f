"""Serving metrics: per-request latencies and SLO outcomes, PROSERVE's TDG, per-class summaries, and output.

Typical use after a run::

    summary = summarize(requests)                       # overall + per priority class
    write_json("out.json", {"fcfs": summary}, meta={})  # or write_summary_csv / print_comparison

A request meets its SLO when it finishes and meets every target it has (TTFT, TPOT, E2E); a class none of whose
requests has a target reports no attainment (``None``, "—" in tables), never 100 %.

Modules: :mod:`.request_metrics` (one request), :mod:`.tdg` (eq. 3 of seed 001), :mod:`.summary`
(aggregation), :mod:`.goodput` (tier-weighted goodput, per-tier attainment), :mod:`.report` (JSON, CSV, rich
tables), :mod:`.units` (one display unit per table column), :mod:`.plots` (PNG figures), :mod:`.series`
(per-minute monitoring series of a simulated run).

In more detail:

* ``request_metrics``: TTFT, TPOT, ITL, E2E, normalized latency; per-target SLO outcomes, three-valued: met,
  missed, or ``None`` where the request has no target; rejected, dropped or unfinished requests miss every target
  they have. ``REQUEST_ATTRIBUTES``: one line per ``requests.csv`` column (``urgency``, ``urgency_true``,
  ``predicted_length``, the rejection reason among them).
* ``summary``: ``summarize`` (overall and per priority class; ``ttft_tpot_attainment`` is PROSERVE's figure;
  rejections counted by kind, ``rejections_by_reason``; requests a run with ``allow_stalls`` ended STALLED);
  ``metric_column`` (JSON and CSV keep seconds under unit-suffixed names).
* ``goodput``: the production mix's headline (issue 31): ``tier_weighted_goodput`` (requests a second that
  finished and met every SLO they have, weighted by tier, ``TIER_WEIGHTS`` 8/4/2/1) and ``tier_attainment``
  (per tier name; ``None`` for a tier without targets).
* ``tdg``: seed 001 eq. 3 and the TDG ratio (``TDGWeights.paper_defaults``).
* ``units``: one display unit per kind of duration, chosen by the largest: request latencies (TTFT, E2E)
  together, token gaps (TPOT, ITL), normalized latency; ms below 10 s, then s, min, h.
* ``report``: JSON, CSV and rich tables (rejected and dropped counts shown; ``sweep_table``).
* ``plots``: matplotlib figures that draw "no data" instead of failing; what every figure shares, the
  experiments' too (legend outside the axes, ``n/a``/``no SLO`` for a missing bar, log axes only over a decade).
* ``series``: ``monitoring_series`` (per-minute bins of a run: preemptions by mode and reason, SLO compliance per
  priority, queue depth, served-token share against target shares, swap blocks, rejections by kind), read
  through the ``MonitorRecord`` protocol; ``write_series_csv``, ``plots.plot_series``.
"""

from semsched.metrics.goodput import TIER_WEIGHTS, tier_attainment, tier_weighted_goodput
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
    "TIER_WEIGHTS",
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
    "tier_attainment",
    "tier_weighted_goodput",
    "time_unit_for",
    "write_json",
    "write_requests_csv",
    "write_summary_csv",
]
