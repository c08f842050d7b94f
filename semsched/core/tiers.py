"""Service tiers: who sent a request, how urgent it is and which latency SLOs it is owed.

The default table follows the priority-tier design in seed 003 ("Priority Tier Architecture", section 2.1, and
"SLO Definitions", section 3.1):

* tiers SYSTEM (internal health checks and warm-up), PREMIUM, STANDARD and BACKGROUND. The seed numbers them
  -1, 0, 1, 2 ("lower number = higher priority"); here they are shifted to 0..3 so that priorities are
  non-negative, with the same order and the same vLLM convention (lower is more important);
* SLO targets from section 3.1: TTFT 200 ms (premium) / 500 ms (standard) / none (background); TPOT 30 ms /
  80 ms / none; E2E 5 s / 15 s / 60 s. The seed states no SLO for SYSTEM requests, so SYSTEM has none: it is
  served first by priority, not by deadline;
* traffic shares (``weight``) are not given by the seed; we choose 5% SYSTEM, 20% PREMIUM, 50% STANDARD and
  25% BACKGROUND, in line with the seed's remark that reserving capacity for premium pays off "when premium
  traffic constitutes 20-30% of total volume".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from semsched.core.errors import SemschedError


class TierError(SemschedError):
    """A tier table or a tier assignment is invalid; the message names the field and the bad value."""


@dataclass(frozen=True)
class TierSpec:
    """One service tier: its name, scheduling priority (lower = more important), share of traffic and SLOs.

    An SLO of ``None`` means the tier has no target for that metric.
    """

    name: str
    priority: int
    weight: float
    ttft_slo_s: float | None = None
    tpot_slo_s: float | None = None
    e2e_slo_s: float | None = None

    def __post_init__(self) -> None:
        if not self.name:
            raise TierError("TierSpec.name: must be a non-empty string")
        if isinstance(self.priority, bool) or not isinstance(self.priority, int):
            raise TierError(f"TierSpec.priority: must be an integer (got {self.priority!r})")
        if not math.isfinite(self.weight) or self.weight < 0:
            raise TierError(f"TierSpec.weight: must be a finite number >= 0 (got {self.weight!r})")
        for field_name in ("ttft_slo_s", "tpot_slo_s", "e2e_slo_s"):
            value = getattr(self, field_name)
            if value is not None and (not math.isfinite(value) or value <= 0):
                raise TierError(f"TierSpec.{field_name}: must be a finite number > 0 or None (got {value!r})")


SYSTEM = TierSpec("SYSTEM", priority=0, weight=0.05)
PREMIUM = TierSpec("PREMIUM", priority=1, weight=0.20, ttft_slo_s=0.2, tpot_slo_s=0.03, e2e_slo_s=5.0)
STANDARD = TierSpec("STANDARD", priority=2, weight=0.50, ttft_slo_s=0.5, tpot_slo_s=0.08, e2e_slo_s=15.0)
BACKGROUND = TierSpec("BACKGROUND", priority=3, weight=0.25, e2e_slo_s=60.0)

DEFAULT_TIERS: tuple[TierSpec, ...] = (SYSTEM, PREMIUM, STANDARD, BACKGROUND)

UNTIERED = TierSpec("default", priority=0, weight=1.0)
"""The single tier of a workload whose source says nothing about tiers: no SLOs, priority 0."""


def tier_index(tiers: Sequence[TierSpec]) -> dict[str, TierSpec]:
    """Map tier names to specs, rejecting an empty table or duplicate names."""
    if not tiers:
        raise TierError("tiers: the tier table must contain at least one TierSpec")
    by_name: dict[str, TierSpec] = {}
    for spec in tiers:
        if spec.name in by_name:
            raise TierError(f"tiers: duplicate tier name {spec.name!r}")
        by_name[spec.name] = spec
    return by_name


def normalised_weights(tiers: Sequence[TierSpec], weights: Sequence[float] | None = None) -> np.ndarray:
    """Tier probabilities: ``weights`` if given (one per tier), else each tier's ``weight``, summing to 1."""
    raw = np.asarray([t.weight for t in tiers] if weights is None else weights, dtype=np.float64)
    if raw.shape != (len(tiers),):
        raise TierError(f"weights: expected {len(tiers)} values, one per tier (got {raw.size})")
    if not np.all(np.isfinite(raw)) or np.any(raw < 0) or raw.sum() <= 0:
        raise TierError(f"weights: must be finite, >= 0 and not all zero (got {raw.tolist()})")
    return np.asarray(raw / raw.sum(), dtype=np.float64)
