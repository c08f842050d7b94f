"""Readable numbers for tables: a column of durations gets one unit, chosen by its largest value.

Files (JSON, CSV) always keep seconds under ``_s`` names; only what a person reads is converted. Below 10 s a
column is in milliseconds, below 10 minutes in seconds, below 10 hours in minutes, beyond in hours, so a
cell never needs more than four digits before the point.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from dataclasses import dataclass

MISSING = "—"
"""What a table shows where a value does not exist (JSON writes ``null``, CSV an empty cell)."""


@dataclass(frozen=True)
class TimeUnit:
    """A unit of duration for display: its symbol, its length in seconds, the decimals a cell shows."""

    symbol: str
    seconds: float
    decimals: int

    def format(self, value_s: float | None) -> str:
        """``value_s`` (seconds) in this unit, without the symbol; :data:`MISSING` for ``None`` or NaN."""
        if value_s is None or math.isnan(value_s):
            return MISSING
        return f"{value_s / self.seconds:.{self.decimals}f}"


MILLISECONDS = TimeUnit("ms", 1e-3, 1)
SECONDS = TimeUnit("s", 1.0, 2)
MINUTES = TimeUnit("min", 60.0, 1)
HOURS = TimeUnit("h", 3600.0, 1)

# each unit serves values (in seconds) strictly below its limit
_UNIT_LIMITS_S = ((MILLISECONDS, 10.0), (SECONDS, 600.0), (MINUTES, 36_000.0))


def time_unit_for(values_s: Iterable[float | None]) -> TimeUnit:
    """The unit for a column of durations, chosen by its largest finite magnitude (milliseconds when the
    column has no value at all)."""
    largest_s = max((abs(v) for v in values_s if v is not None and math.isfinite(v)), default=0.0)
    for unit, limit_s in _UNIT_LIMITS_S:
        if largest_s < limit_s:
            return unit
    return HOURS


def with_significant_digits(unit: TimeUnit, values_s: Iterable[float | None], digits: int = 3) -> TimeUnit:
    """``unit`` with enough decimals that the largest finite magnitude of ``values_s`` shows ``digits``
    significant digits (at most three decimals more than the unit's own): a column of small values in a table
    whose unit a larger column chose (0.302 s beside 16.48 s) stays readable."""
    finite = [abs(v) for v in values_s if v is not None and math.isfinite(v)]
    largest = max(finite, default=0.0) / unit.seconds
    if largest == 0:
        return unit
    needed = digits - 1 - math.floor(math.log10(largest))
    return dataclasses.replace(unit, decimals=min(max(unit.decimals, needed), unit.decimals + 3))
