"""Aggregate serving metrics of one run, overall and per priority class.

Conventions:

* latency distributions (TTFT, TPOT, E2E, normalized latency, queueing delay, ITL) are taken over FINISHED
  requests only: a rejected or dropped request has no complete latency, and it is accounted for in SLO
  attainment and TDG instead. ITL pools every inter-token gap of the class.
* percentiles use numpy's default (linear interpolation between order statistics);
* SLO attainment is the fraction of the class's requests *that have a target* which finished and met every
  target they have (TTFT, TPOT, E2E; see :mod:`.request_metrics`). Rejected, dropped and unfinished requests
  with a target count as misses, so a policy cannot raise it by shedding load. A class none of whose requests
  has a target has no attainment (``None``), never 100 %. ``ttft_tpot_attainment`` is the same over the TTFT
  and TPOT targets only (PROSERVE's figure), and each per-target attainment is over the requests with that
  target;
* goodput is the rate of requests that met their SLO by that definition (``None`` when none has a target);
* the TDG ratio (PROSERVE's eq. 3) is ``None`` for a class none of whose requests has a TTFT or TPOT target:
  every token such a request emits is on time by construction, so the ratio would measure only shedding;
* rates (throughput, goodput) divide by the run's duration, by default first arrival to last finish, the same
  duration for every class;
* a statistic with no data is ``None``, never NaN, so :meth:`Summary.to_dict` is valid JSON;
* JSON and CSV name every quantity with its unit (:func:`metric_column`: ``ttft_p90_s``,
  ``goodput_requests_per_s``); :meth:`ClassSummary.metric` accepts those names and the short ones
  (``ttft_p90``, ``goodput``) that the CLI's ``--metric`` takes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from semsched.core.request import Request, RequestState
from semsched.metrics.request_metrics import RequestMetrics, rejection_kind, request_metrics
from semsched.metrics.tdg import TDGTotals, TDGWeights, request_ideal_gains, request_tdg_gains

DISTRIBUTIONS = ("ttft", "tpot", "e2e", "normalized_latency", "queueing_delay", "itl")
STATISTICS = ("mean", "median", "p90", "p99")


@dataclass(frozen=True)
class Distribution:
    """Summary statistics of a sample; every statistic is ``None`` for an empty sample."""

    count: int
    mean: float | None
    median: float | None
    p90: float | None
    p99: float | None

    @classmethod
    def of(cls, values: np.ndarray) -> Distribution:
        values = np.asarray(values, dtype=np.float64)
        if values.size == 0:
            return cls(count=0, mean=None, median=None, p90=None, p99=None)
        p50, p90, p99 = np.percentile(values, [50.0, 90.0, 99.0])
        return cls(
            count=int(values.size),
            mean=float(values.mean()),
            median=float(p50),
            p90=float(p90),
            p99=float(p99),
        )

    def stat(self, name: str) -> float | None:
        if name not in STATISTICS:
            raise KeyError(f"unknown statistic {name!r}; expected one of {STATISTICS}")
        value: float | None = getattr(self, name)
        return value

    def to_dict(self) -> dict[str, Any]:
        return {"count": self.count, **{name: _json_float(self.stat(name)) for name in STATISTICS}}


@dataclass(frozen=True)
class ClassSummary:
    """Metrics of one priority class (``priority`` set) or of all requests (``priority is None``).

    Latencies are in seconds (normalized latency in seconds per output token); rates are per second.
    ``num_with_slo`` requests have at least one target: they are what ``slo_attainment`` divides by, and an
    attainment, goodput or TDG ratio is ``None`` when its targets are absent (see the module docstring).
    ``rejections_by_reason`` counts the rejected and dropped requests by :func:`.rejection_kind` of their reason
    (JSON only: CSV columns are fixed).
    """

    label: str
    priority: int | None
    tiers: tuple[str, ...]
    num_requests: int
    num_finished: int
    num_rejected: int
    num_dropped: int
    #: ended STALLED: left stranded by a scheduler defect (counted only in a run with ``allow_stalls``)
    num_stalled: int
    num_unfinished: int
    num_with_slo: int
    output_tokens: int
    ttft_s: Distribution
    tpot_s: Distribution
    e2e_s: Distribution
    normalized_latency_s_per_token: Distribution
    queueing_delay_s: Distribution
    itl_s: Distribution
    num_preemptions: int
    throughput_requests_per_s: float | None
    output_tokens_per_s: float | None
    slo_attainment: float | None
    ttft_tpot_attainment: float | None
    ttft_slo_attainment: float | None
    tpot_slo_attainment: float | None
    e2e_slo_attainment: float | None
    goodput_requests_per_s: float | None
    tdg: float
    tdg_ideal: float
    tdg_ratio: float | None
    rejections_by_reason: Mapping[str, int] = field(default_factory=dict)

    def distribution(self, name: str) -> Distribution:
        """One of :data:`DISTRIBUTIONS` by its short name (``"ttft"``, ``"e2e"``, ...)."""
        if name not in DISTRIBUTIONS:
            raise KeyError(f"unknown distribution {name!r}; expected one of {DISTRIBUTIONS}")
        dist: Distribution = getattr(self, _DISTRIBUTION_FIELDS[name])
        return dist

    def metric(self, name: str) -> float | None:
        """A scalar by name: ``"<distribution>_<statistic>"`` (e.g. ``"e2e_mean"``, ``"ttft_p90"``) or one of
        :data:`SCALAR_METRICS` (e.g. ``"slo_attainment"``, ``"goodput"``, ``"tdg_ratio"``), or the
        :func:`metric_column` name of either (``"e2e_mean_s"``, ``"goodput_requests_per_s"``)."""
        name = short_metric_name(name)
        if name in SCALAR_METRICS:
            return SCALAR_METRICS[name](self)
        dist_name, _, stat_name = name.rpartition("_")
        if dist_name not in DISTRIBUTIONS or stat_name not in STATISTICS:
            raise KeyError(f"unknown metric {name!r}; see semsched.metrics.summary.metric_names()")
        return self.distribution(dist_name).stat(stat_name)

    def flat(self) -> dict[str, Any]:
        """Every scalar of this class under its :func:`metric_column` name, plus label, priority and tiers."""
        row: dict[str, Any] = {"class": self.label, "priority": self.priority, "tiers": "|".join(self.tiers)}
        row.update({metric_column(name): _json_float(self.metric(name)) for name in metric_names()})
        return row

    def to_dict(self) -> dict[str, Any]:
        """Scalars under their :func:`metric_column` names, distributions under their field names."""
        scalars = {metric_column(name): _json_float(getter(self)) for name, getter in SCALAR_METRICS.items()}
        dists = {key: self.distribution(name).to_dict() for name, key in _DISTRIBUTION_FIELDS.items()}
        return {
            "label": self.label,
            "priority": self.priority,
            "tiers": list(self.tiers),
            **scalars,
            **dists,
            "rejections_by_reason": dict(self.rejections_by_reason),
        }


_DISTRIBUTION_FIELDS = {
    "ttft": "ttft_s",
    "tpot": "tpot_s",
    "e2e": "e2e_s",
    "normalized_latency": "normalized_latency_s_per_token",
    "queueing_delay": "queueing_delay_s",
    "itl": "itl_s",
}

SCALAR_METRICS: dict[str, Callable[[ClassSummary], float | None]] = {
    "num_requests": lambda c: c.num_requests,
    "num_finished": lambda c: c.num_finished,
    "num_rejected": lambda c: c.num_rejected,
    "num_dropped": lambda c: c.num_dropped,
    "num_stalled": lambda c: c.num_stalled,
    "num_unfinished": lambda c: c.num_unfinished,
    "num_with_slo": lambda c: c.num_with_slo,
    "output_tokens": lambda c: c.output_tokens,
    "preemptions": lambda c: c.num_preemptions,
    "throughput": lambda c: c.throughput_requests_per_s,
    "output_tokens_per_s": lambda c: c.output_tokens_per_s,
    "slo_attainment": lambda c: c.slo_attainment,
    "ttft_tpot_attainment": lambda c: c.ttft_tpot_attainment,
    "ttft_slo_attainment": lambda c: c.ttft_slo_attainment,
    "tpot_slo_attainment": lambda c: c.tpot_slo_attainment,
    "e2e_slo_attainment": lambda c: c.e2e_slo_attainment,
    "goodput": lambda c: c.goodput_requests_per_s,
    "tdg": lambda c: c.tdg,
    "tdg_ideal": lambda c: c.tdg_ideal,
    "tdg_ratio": lambda c: c.tdg_ratio,
}


# the unit suffix of scalars whose short name has none
_SCALAR_COLUMNS = {
    "throughput": "throughput_requests_per_s",
    "goodput": "goodput_requests_per_s",
    "preemptions": "num_preemptions",
}
_DISTRIBUTION_UNITS = {name: key.removeprefix(name) for name, key in _DISTRIBUTION_FIELDS.items()}


def metric_names() -> list[str]:
    """Every short name :meth:`ClassSummary.metric` accepts (it accepts each :func:`metric_column` too)."""
    dist_names = [f"{d}_{s}" for d in DISTRIBUTIONS for s in STATISTICS]
    return [*SCALAR_METRICS, *dist_names]


def metric_column(name: str) -> str:
    """The name of metric ``name`` in JSON and CSV, with its unit: ``ttft_p90`` -> ``ttft_p90_s``,
    ``normalized_latency_mean`` -> ``normalized_latency_mean_s_per_token``, ``goodput`` ->
    ``goodput_requests_per_s``; fractions, counts and gains keep their name."""
    if name in SCALAR_METRICS:
        return _SCALAR_COLUMNS.get(name, name)
    dist_name, _, stat_name = name.rpartition("_")
    if dist_name not in DISTRIBUTIONS or stat_name not in STATISTICS:
        raise KeyError(f"unknown metric {name!r}; see semsched.metrics.summary.metric_names()")
    return f"{name}{_DISTRIBUTION_UNITS[dist_name]}"


def metric_columns() -> list[str]:
    """:func:`metric_column` of every :func:`metric_names` entry, in the same order."""
    return [metric_column(name) for name in metric_names()]


_METRIC_OF_COLUMN = {metric_column(name): name for name in metric_names()}


def short_metric_name(name: str) -> str:
    """The :func:`metric_names` entry of a :func:`metric_column` name; any other name unchanged."""
    return _METRIC_OF_COLUMN.get(name, name)


@dataclass(frozen=True)
class Summary:
    """The metrics of one run: ``overall`` plus one :class:`ClassSummary` per priority present, ascending."""

    duration_s: float | None
    overall: ClassSummary
    by_priority: dict[int, ClassSummary]
    tdg_weights: TDGWeights

    def classes(self) -> list[ClassSummary]:
        """``overall`` first, then each priority class in ascending priority (most important first)."""
        return [self.overall, *self.by_priority.values()]

    def class_summary(self, priority: int | None) -> ClassSummary | None:
        """The class of ``priority`` (``None`` for overall); ``None`` if no request had that priority."""
        return self.overall if priority is None else self.by_priority.get(priority)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable view (no NaN: missing values are ``None``)."""
        return {
            "duration_s": _json_float(self.duration_s),
            "tdg_weights": _weights_dict(self.tdg_weights),
            "overall": self.overall.to_dict(),
            "by_priority": {str(p): c.to_dict() for p, c in self.by_priority.items()},
        }


def summarize(
    requests: Sequence[Request], *, duration_s: float | None = None, tdg_weights: TDGWeights | None = None
) -> Summary:
    """Summarise a finished run.

    ``duration_s`` defaults to first arrival to last finish; ``tdg_weights`` defaults to
    :meth:`TDGWeights.paper_defaults` of ``requests``.
    """
    weights = tdg_weights if tdg_weights is not None else TDGWeights.paper_defaults(requests)
    metrics = [request_metrics(r) for r in requests]
    gains = request_tdg_gains(requests, weights)
    ideal = request_ideal_gains(requests, weights)
    duration = duration_s if duration_s is not None else default_duration_s(requests)

    def summarize_class(label: str, priority: int | None, index: np.ndarray) -> ClassSummary:
        totals = TDGTotals(gain=float(gains[index].sum()), ideal_gain=float(ideal[index].sum()))
        return _class_summary(label, priority, [metrics[i] for i in index], totals, duration)

    by_priority = {p: summarize_class(f"p{p}", p, idx) for p, idx in _indices_by_priority(requests).items()}
    overall = summarize_class("all", None, np.arange(len(requests)))
    return Summary(duration_s=duration, overall=overall, by_priority=by_priority, tdg_weights=weights)


def default_duration_s(requests: Sequence[Request]) -> float | None:
    """First arrival to last finish; ``None`` when no request finished or the span is not positive."""
    finish_times_s = [r.finish_time_s for r in requests if r.finish_time_s is not None]
    if not finish_times_s:
        return None
    span_s = max(finish_times_s) - min(r.arrival_time_s for r in requests)
    return span_s if span_s > 0 else None


def _indices_by_priority(requests: Sequence[Request]) -> dict[int, np.ndarray]:
    priorities = np.fromiter((r.priority for r in requests), dtype=np.int64, count=len(requests))
    return {int(p): np.flatnonzero(priorities == p) for p in np.unique(priorities)}


def _class_summary(
    label: str,
    priority: int | None,
    metrics: Sequence[RequestMetrics],
    tdg: TDGTotals,
    duration_s: float | None,
) -> ClassSummary:
    finished = [m for m in metrics if m.finished]
    output_tokens = sum(m.output_tokens for m in metrics)
    num_with_slo = sum(m.slo_met is not None for m in metrics)
    num_slo_met = sum(m.slo_met is True for m in metrics)
    return ClassSummary(
        label=label,
        priority=priority,
        tiers=tuple(sorted({m.tier for m in metrics})),
        num_requests=len(metrics),
        num_finished=len(finished),
        num_rejected=_count_state(metrics, RequestState.REJECTED),
        num_dropped=_count_state(metrics, RequestState.DROPPED),
        num_stalled=_count_state(metrics, RequestState.STALLED),
        num_unfinished=sum(not m.state.is_terminal for m in metrics),
        num_with_slo=num_with_slo,
        output_tokens=output_tokens,
        ttft_s=_distribution(finished, lambda m: m.ttft_s),
        tpot_s=_distribution(finished, lambda m: m.tpot_s),
        e2e_s=_distribution(finished, lambda m: m.e2e_s),
        normalized_latency_s_per_token=_distribution(finished, lambda m: m.normalized_latency_s_per_token),
        queueing_delay_s=_distribution(finished, lambda m: m.queueing_delay_s),
        itl_s=Distribution.of(_pooled_itl_s(finished)),
        num_preemptions=sum(m.num_preemptions for m in metrics),
        throughput_requests_per_s=_rate(len(finished), duration_s),
        output_tokens_per_s=_rate(output_tokens, duration_s),
        slo_attainment=_fraction(num_slo_met, num_with_slo),
        ttft_tpot_attainment=_attainment(m.ttft_tpot_slo_met for m in metrics),
        ttft_slo_attainment=_attainment(m.ttft_slo_met for m in metrics),
        tpot_slo_attainment=_attainment(m.tpot_slo_met for m in metrics),
        e2e_slo_attainment=_attainment(m.e2e_slo_met for m in metrics),
        goodput_requests_per_s=_rate(num_slo_met, duration_s) if num_with_slo else None,
        tdg=tdg.gain,
        tdg_ideal=tdg.ideal_gain,
        tdg_ratio=tdg.ratio if any(m.ttft_tpot_slo_met is not None for m in metrics) else None,
        rejections_by_reason=rejections_by_reason(metrics),
    )


def rejections_by_reason(metrics: Iterable[RequestMetrics]) -> dict[str, int]:
    """Rejected and dropped requests counted by :func:`.rejection_kind` of their reason, most frequent first."""
    counts = Counter(rejection_kind(m.rejection_reason) for m in metrics if m.rejection_reason is not None)
    return dict(counts.most_common())


def _count_state(metrics: Sequence[RequestMetrics], state: RequestState) -> int:
    return sum(m.state is state for m in metrics)


def _distribution(
    metrics: Sequence[RequestMetrics], value_of: Callable[[RequestMetrics], float | None]
) -> Distribution:
    values = [v for v in map(value_of, metrics) if v is not None]
    return Distribution.of(np.asarray(values, dtype=np.float64))


def _pooled_itl_s(metrics: Sequence[RequestMetrics]) -> np.ndarray:
    gaps = [m.itl_s for m in metrics if m.itl_s.size]
    return np.concatenate(gaps) if gaps else np.empty(0, dtype=np.float64)


def _rate(count: float, duration_s: float | None) -> float | None:
    return count / duration_s if duration_s else None


def _fraction(count: int, total: int) -> float | None:
    return count / total if total else None


def _attainment(outcomes: Iterable[bool | None]) -> float | None:
    """Share of met outcomes among those with a target; ``None`` when no request had the target."""
    present = [o for o in outcomes if o is not None]
    return _fraction(sum(present), len(present))


def _json_float(value: float | None) -> float | None:
    """``None`` for missing or non-finite values, so JSON never carries NaN or Infinity."""
    if value is None or not np.isfinite(value):
        return None
    return value if isinstance(value, int) else float(value)


def _weights_dict(weights: TDGWeights) -> dict[str, Any]:
    return {
        "first_token": weights.first_token,
        "decode_token": weights.decode_token,
        "per_priority": {str(p): w for p, w in weights.per_priority.items()},
        "default_priority_weight": weights.default_priority_weight,
    }
