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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

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
    #: target share of served output tokens (``tiered``'s fair share; 0: none)
    fair_share: float = 0.0
    #: fraction of the KV blocks kept for this tier and more important ones (``tiered``'s reservation; 0: none)
    reserve_fraction: float = 0.0

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
        for field_name in ("fair_share", "reserve_fraction"):
            value = getattr(self, field_name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
                raise TierError(f"TierSpec.{field_name}: must be a number from 0 to 1 (got {value!r})")


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


# ---- a deployment's tier table (read from YAML by semsched.policies.tier_table) ---------------------------------
#: the keys of one tier in a tier-table file; SLOs in milliseconds, as in a request's ``vllm_xargs``
TIER_TABLE_KEYS: dict[str, str] = {
    "name": "the tier's name (requests name it in vllm_xargs.tier; workloads draw it)",
    "priority": "scheduling priority, an integer; lower is more important; one tier per priority",
    "weight": "share of traffic when a workload draws tiers (default 0)",
    "ttft_slo_ms": "time-to-first-token target in ms (omit: none)",
    "tpot_slo_ms": "time-per-output-token target in ms (omit: none)",
    "e2e_slo_ms": "end-to-end latency target in ms (omit: none)",
    "fair_share": "target share of served output tokens, 0 to 1 (tiered's fair share; default 0)",
    "reserve_fraction": "fraction of KV blocks kept for this tier and more important ones (tiered; default 0)",
}
_MS_KEYS = {"ttft_slo_ms": "ttft_slo_s", "tpot_slo_ms": "tpot_slo_s", "e2e_slo_ms": "e2e_slo_s"}


def tier_table_from_mapping(document: object) -> tuple[TierSpec, ...]:
    """The tiers of a parsed tier-table document: a mapping with ``tiers``, a list of tiers with the keys of
    :data:`TIER_TABLE_KEYS` (``name`` and ``priority`` required), ordered by priority on return.

    Raises :class:`TierError` naming the field (``tiers[2].ttft_slo_ms``) for an unknown key, bad value, repeated
    name or priority, fair shares summing past 1, or reserves reaching 1.
    """
    if not isinstance(document, Mapping) or set(document) != {"tiers"}:
        raise TierError("the document must be a mapping with one key, 'tiers' (a list of tiers)")
    entries = document["tiers"]
    if not isinstance(entries, list) or not entries:
        raise TierError("tiers: must be a non-empty list of tiers")
    tiers = tuple(_tier_from_entry(i, entry) for i, entry in enumerate(entries))
    tier_index(tiers)  # names are unique
    priorities = [t.priority for t in tiers]
    repeated = sorted({p for p in priorities if priorities.count(p) > 1})
    if repeated:
        raise TierError(f"tiers: priority {repeated[0]} is given to more than one tier (one tier per priority)")
    if math.fsum(t.fair_share for t in tiers) > 1.0 + 1e-9:
        raise TierError(f"tiers: fair_share values sum to {math.fsum(t.fair_share for t in tiers):g}, more than 1")
    if math.fsum(t.reserve_fraction for t in tiers) >= 1.0:
        raise TierError("tiers: reserve_fraction values must sum to less than 1 (something must stay unreserved)")
    return tuple(sorted(tiers, key=lambda t: t.priority))


def _tier_from_entry(index: int, entry: object) -> TierSpec:
    where = f"tiers[{index}]"
    if not isinstance(entry, Mapping):
        raise TierError(f"{where}: must be a mapping of {', '.join(TIER_TABLE_KEYS)}")
    unknown = sorted(set(map(str, entry)) - set(TIER_TABLE_KEYS))
    if unknown:
        raise TierError(f"{where}.{unknown[0]}: unknown key; known: {', '.join(TIER_TABLE_KEYS)}")
    for required in ("name", "priority"):
        if required not in entry:
            raise TierError(f"{where}.{required}: required")
    name, priority = entry["name"], entry["priority"]
    if not isinstance(name, str) or not name.strip() or len(name) > 64:
        raise TierError(f"{where}.name: must be a non-empty string of at most 64 characters (got {name!r})")
    if isinstance(priority, bool) or not isinstance(priority, int) or not 0 <= priority <= 2**31 - 1:
        raise TierError(f"{where}.priority: must be an integer from 0 to 2**31-1 (got {priority!r})")
    values: dict[str, Any] = {"name": name, "priority": priority}
    for key in ("weight", "fair_share", "reserve_fraction", *_MS_KEYS):
        if key not in entry:
            continue
        value = entry[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise TierError(f"{where}.{key}: must be a number (got {value!r})")
        if key in _MS_KEYS:
            if not 0 < value <= 86_400_000:
                raise TierError(f"{where}.{key}: must be > 0 and <= 86,400,000 ms (got {value!r})")
            values[_MS_KEYS[key]] = value / 1000.0
        else:
            values[key] = float(value)
    values.setdefault("weight", 0.0)
    try:
        return TierSpec(**values)
    except TierError as error:  # "TierSpec.weight: ..." -> "tiers[1].weight: ..."
        raise TierError(str(error).replace("TierSpec.", f"{where}.", 1)) from error


def tier_table_document(tiers: Sequence[TierSpec]) -> dict[str, Any]:
    """``tiers`` as a tier-table document (the mapping a YAML file holds) that :func:`tier_table_from_mapping`
    reads back to the same specs."""
    entries = []
    for tier in tiers:
        entry: dict[str, Any] = {"name": tier.name, "priority": tier.priority, "weight": tier.weight}
        for key, attribute in _MS_KEYS.items():
            value = getattr(tier, attribute)
            if value is not None:
                entry[key] = round(value * 1000.0, 9)
        for key in ("fair_share", "reserve_fraction"):
            if getattr(tier, key):
                entry[key] = getattr(tier, key)
        entries.append(entry)
    return {"tiers": entries}
