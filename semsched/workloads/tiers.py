"""Each request's service tier for a workload, drawn or read (the tier table is :mod:`semsched.core.tiers`)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from semsched.core.tiers import TierError, TierSpec, normalised_weights, tier_index
from semsched.workloads.workload import Workload


def assign_tiers(
    workload: Workload,
    tiers: Sequence[TierSpec],
    rng: np.random.Generator,
    weights: Sequence[float] | None = None,
) -> Workload:
    """Give every request a tier drawn independently with probability proportional to its weight.

    ``weights`` overrides the tiers' own ``weight`` fields. Priorities are set from the drawn tier; arrival
    times and lengths are unchanged. The result's tier table is ``tiers``.
    """
    tier_index(tiers)
    probs = normalised_weights(tiers, weights)
    choice = rng.choice(len(tiers), size=len(workload), p=probs)
    names = tuple(tiers[i].name for i in choice)
    priority = np.asarray([tiers[i].priority for i in choice], dtype=np.int64)
    return workload.with_tiers(tuple(tiers), tier=names, priority=priority)


def tiers_from_column(
    workload: Workload,
    column_values: Sequence[str | int],
    tiers: Sequence[TierSpec] | None = None,
) -> Workload:
    """Set each request's tier from a per-request column (e.g. a label read from a dataset).

    A value may be a tier name or an integer priority, which selects the tier with that priority. ``tiers``
    defaults to the workload's own tier table. Unknown values raise :class:`TierError` naming the index.
    """
    table = tuple(workload.tiers if tiers is None else tiers)
    by_name = tier_index(table)
    by_priority = {spec.priority: spec for spec in reversed(table)}
    if len(column_values) != len(workload):
        raise TierError(f"column_values: expected {len(workload)} values (got {len(column_values)})")
    specs = [_lookup_tier(i, value, by_name, by_priority) for i, value in enumerate(column_values)]
    names = tuple(spec.name for spec in specs)
    priority = np.asarray([spec.priority for spec in specs], dtype=np.int64)
    return workload.with_tiers(table, tier=names, priority=priority)


def _lookup_tier(
    index: int, value: str | int, by_name: dict[str, TierSpec], by_priority: dict[int, TierSpec]
) -> TierSpec:
    if isinstance(value, str) and value in by_name:
        return by_name[value]
    if isinstance(value, int | np.integer) and not isinstance(value, bool) and int(value) in by_priority:
        return by_priority[int(value)]
    raise TierError(
        f"column_values[{index}]: {value!r} is neither a tier name {sorted(by_name)} "
        f"nor a tier priority {sorted(by_priority)}"
    )
