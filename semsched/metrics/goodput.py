"""Tier-weighted goodput and per-tier SLO attainment: the production mix's headline (issue 31).

* **tier-weighted goodput**: the rate of requests that were served well, each counted with its tier's weight
  (:data:`TIER_WEIGHTS`: SYSTEM 8, PREMIUM 4, STANDARD 2, BACKGROUND 1, by priority). A request counts when it
  FINISHED and met every SLO it has (``RequestMetrics.slo_met`` is ``True``); a finished request with no target
  at all (``slo_met is None``, e.g. SYSTEM) counts too, since there was nothing for it to miss. A rejected,
  dropped or unfinished request never counts: :mod:`.request_metrics` makes it miss every target it has, and one
  without targets did not finish. The sum is divided by the run's duration, by default first arrival to last
  finish (:func:`.summary.default_duration_s`, the same span ``summarize`` uses). With long-tailed outputs that
  span is dominated by the drain after the last arrival (on the production mix one answer of thousands of tokens
  can double it), and it differs between policies run on the same requests; to compare policies, pass
  ``duration_s=workload.duration_s()`` (the arrival span, the same for every policy).
* **tier attainment**: per tier name, the share of the tier's requests *with a target* that finished and met
  every target they have (the same definition as ``ClassSummary.slo_attainment``); ``None`` for a tier none of
  whose requests has a target (SYSTEM) or that sent no request, never 100 %.

Both read the per-request outcomes of :func:`.request_metrics.request_metrics`; nothing here re-derives them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from semsched.core.errors import SemschedError
from semsched.core.request import Request
from semsched.core.tiers import BACKGROUND, DEFAULT_TIERS, PREMIUM, STANDARD, SYSTEM
from semsched.metrics.request_metrics import RequestMetrics, request_metrics
from semsched.metrics.summary import default_duration_s

#: weight of a served request by its priority: SYSTEM(0) 8, PREMIUM(1) 4, STANDARD(2) 2, BACKGROUND(3) 1
TIER_WEIGHTS: dict[int, float] = {
    SYSTEM.priority: 8.0,
    PREMIUM.priority: 4.0,
    STANDARD.priority: 2.0,
    BACKGROUND.priority: 1.0,
}


class GoodputError(SemschedError):
    """A goodput cannot be computed as asked; the message names the argument and the bad value."""


def tier_weighted_goodput(
    requests: Sequence[Request],
    duration_s: float | None = None,
    *,
    weights: Mapping[int, float] = TIER_WEIGHTS,
) -> float:
    """Weighted requests per second that finished and met every SLO they have (see the module docstring).

    ``duration_s`` defaults to first arrival to last finish; with no finished request the goodput is 0.0.
    ``weights`` maps priority to weight (default :data:`TIER_WEIGHTS`); a request whose priority it does not
    name raises :class:`GoodputError`, so a workload outside the table is never silently weighted.
    """
    if duration_s is not None and (not math.isfinite(duration_s) or duration_s <= 0):
        raise GoodputError(f"duration_s: must be a finite number > 0 or None (got {duration_s!r})")
    good = math.fsum(_weight(r.priority, weights) for r in requests if counts_as_good(request_metrics(r)))
    span_s = duration_s if duration_s is not None else default_duration_s(requests)
    if span_s is None:  # nothing finished: nothing was good
        return 0.0
    return good / span_s


def counts_as_good(metrics: RequestMetrics) -> bool:
    """Finished, and met every SLO it has (a finished request without targets counts)."""
    return metrics.finished and metrics.slo_met is not False


def tier_attainment(requests: Sequence[Request]) -> dict[str, float | None]:
    """Per tier name, the share of its requests with a target that finished and met every target they have.

    Keys: every tier of :data:`~semsched.core.tiers.DEFAULT_TIERS` in priority order (``None`` when absent or
    without targets), then any other tier the requests name, in order of first appearance.
    """
    met: dict[str, int] = {tier.name: 0 for tier in DEFAULT_TIERS}
    with_slo: dict[str, int] = {tier.name: 0 for tier in DEFAULT_TIERS}
    for metrics in map(request_metrics, requests):
        met.setdefault(metrics.tier, 0)
        with_slo.setdefault(metrics.tier, 0)
        if metrics.slo_met is not None:
            with_slo[metrics.tier] += 1
            met[metrics.tier] += metrics.slo_met
    return {name: (met[name] / with_slo[name] if with_slo[name] else None) for name in met}


def _weight(priority: int, weights: Mapping[int, float]) -> float:
    try:
        return weights[priority]
    except KeyError:
        raise GoodputError(
            f"weights: no weight for priority {priority} (known priorities: {sorted(weights)})"
        ) from None
