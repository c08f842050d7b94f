"""How experiments reduce and print numbers: medians over seeds, ratios, and table cells (one definition for
every experiment, so a missing value reads the same everywhere)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np

from semsched.metrics import MISSING

Numbers = dict[str, float | None]


def median(values: Iterable[float | None]) -> float | None:
    """Median of the finite values (None when there are none)."""
    present = [v for v in values if v is not None and math.isfinite(v)]
    return float(np.median(present)) if present else None


def medians(values: Sequence[Numbers]) -> Numbers:
    """Per key, the median over several runs' numbers (the keys of the first)."""
    keys = values[0].keys() if values else ()
    return {key: median(v.get(key) for v in values) for key in keys}


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or denominator is None or denominator == 0:
        return None
    return numerator / denominator


def num(value: float | None, digits: int = 3) -> str:
    """``digits`` significant digits (0: a whole number); missing or not finite: the report's dash."""
    if value is None or not math.isfinite(value):
        return MISSING
    return f"{value:.{digits}g}" if digits else f"{value:.0f}"


def pct(value: float | None) -> str:
    return MISSING if value is None else f"{value:.1%}"
