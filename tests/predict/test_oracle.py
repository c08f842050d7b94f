"""Seed 000's noisy oracle: the requested share of wrong labels, at the requested mean distance."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from semsched.predict.oracle import OracleError, mislabel, target_distance


@pytest.mark.parametrize("levels", [5, 10])
@pytest.mark.parametrize("error", [0.1, 0.3, 0.5])
def test_error_share_and_mean_distance(levels: int, error: float) -> None:
    rng = np.random.default_rng(1)
    true = rng.integers(0, levels, 20_000)
    predicted = mislabel(true, levels, error, np.random.default_rng(2))
    wrong = predicted != true
    assert wrong.sum() == round(error * true.size)
    distance = np.abs(predicted - true)[wrong]
    # the mean over ~2,000-10,000 draws: within 4 standard errors of the target
    tolerance = 4 * distance.std() / np.sqrt(distance.size)
    assert abs(distance.mean() - target_distance(error, levels)) <= tolerance + 1e-9


def test_an_unreachable_distance_is_clipped_to_the_farthest_levels() -> None:
    true = np.full(1000, 2)  # the middle of 5 levels: nothing is farther than 2
    predicted = mislabel(true, 5, 0.9, np.random.default_rng(0))
    assert set(np.abs(predicted - true)[predicted != true]) == {2}


@settings(max_examples=50, deadline=None)
@given(st.integers(2, 12), st.floats(0, 1), st.integers(0, 2**32 - 1), st.integers(0, 300))
def test_labels_stay_levels_and_are_deterministic(levels: int, error: float, seed: int, n: int) -> None:
    true = np.random.default_rng(seed).integers(0, levels, n)
    first = mislabel(true, levels, error, np.random.default_rng(seed))
    assert np.array_equal(first, mislabel(true, levels, error, np.random.default_rng(seed)))
    assert first.shape == true.shape and (n == 0 or (first.min() >= 0 and first.max() < levels))
    assert int(np.sum(first != true)) == round(error * n)


@pytest.mark.parametrize(("error", "levels", "field"),
                         [(1.5, 5, "error"), (-0.1, 5, "error"), (0.2, 1, "num_levels")])
def test_bad_settings_name_the_parameter(error: float, levels: int, field: str) -> None:
    with pytest.raises(OracleError, match=field):
        mislabel(np.zeros(3, dtype=int), levels, error, np.random.default_rng(0))


def test_levels_out_of_range_are_refused() -> None:
    with pytest.raises(OracleError, match="true: levels must be 0 to 4"):
        mislabel(np.array([0, 5]), 5, 0.5, np.random.default_rng(0))
