from __future__ import annotations

import math

import pytest

from semsched.metrics.units import HOURS, MILLISECONDS, MINUTES, MISSING, SECONDS, TimeUnit, time_unit_for


@pytest.mark.parametrize(
    ("largest_s", "unit"),
    [
        (0.0, MILLISECONDS),
        (9.99, MILLISECONDS),
        (10.0, SECONDS),
        (599.0, SECONDS),
        (600.0, MINUTES),
        (4351.3954, MINUTES),
        (35_999.0, MINUTES),
        (36_000.0, HOURS),
    ],
)
def test_unit_follows_the_largest_value(largest_s: float, unit: TimeUnit) -> None:
    assert time_unit_for([0.001, largest_s, None]) is unit


def test_missing_and_non_finite_values_do_not_choose_the_unit() -> None:
    assert time_unit_for([]) is MILLISECONDS
    assert time_unit_for([None, math.nan, math.inf, 0.5]) is MILLISECONDS
    assert time_unit_for([-20.0]) is SECONDS


def test_format() -> None:
    assert MILLISECONDS.format(0.0123) == "12.3"
    assert SECONDS.format(12.345) == "12.35"
    assert MINUTES.format(4351.3954) == "72.5"
    assert HOURS.format(5 * 3600.0) == "5.0"
    assert SECONDS.format(None) == MISSING
    assert SECONDS.format(math.nan) == MISSING
