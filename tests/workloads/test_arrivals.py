"""Tests for semsched/workloads/arrivals.py."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from semsched.workloads import (
    ArrivalError,
    expected_spike_requests,
    gamma_arrivals,
    gamma_arrivals_until,
    mean_spike_size,
    poisson_arrivals,
    poisson_arrivals_until,
    spike_arrivals,
)


def _check_mean_gap(times_s: np.ndarray, rate_per_s: float) -> None:
    """The sample mean gap lies within 5 standard errors (from the sample's own spread) of 1 / rate."""
    gaps = np.diff(np.concatenate([[0.0], times_s]))
    standard_error = gaps.std(ddof=1) / math.sqrt(gaps.size)
    assert abs(gaps.mean() - 1.0 / rate_per_s) < 5 * standard_error


@pytest.mark.parametrize("rate_per_s", [0.5, 4.0, 200.0])
def test_poisson_mean_rate(rate_per_s: float) -> None:
    times_s = poisson_arrivals(rate_per_s, 20_000, np.random.default_rng(1))
    assert times_s.size == 20_000 and np.all(np.diff(times_s) >= 0) and times_s[0] > 0
    _check_mean_gap(times_s, rate_per_s)


@pytest.mark.parametrize("cv", [0.5, 1.0, 3.0])
def test_gamma_mean_rate_and_burstiness(cv: float) -> None:
    times_s = gamma_arrivals(10.0, cv, 100_000, np.random.default_rng(2))
    _check_mean_gap(times_s, 10.0)
    gaps = np.diff(times_s)
    assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.1)


def test_until_variants_stay_in_window() -> None:
    rng = np.random.default_rng(3)
    poisson = poisson_arrivals_until(50.0, 200.0, rng)
    gamma = gamma_arrivals_until(50.0, 3.0, 200.0, rng)
    for times_s in (poisson, gamma):
        assert np.all(times_s < 200.0) and np.all(np.diff(times_s) >= 0)
    expected = 50.0 * 200.0
    assert abs(poisson.size - expected) < 5 * math.sqrt(expected)


def test_same_generator_state_same_times() -> None:
    first = gamma_arrivals(3.0, 2.0, 100, np.random.default_rng(7))
    again = gamma_arrivals(3.0, 2.0, 100, np.random.default_rng(7))
    other = gamma_arrivals(3.0, 2.0, 100, np.random.default_rng(8))
    assert np.array_equal(first, again) and not np.array_equal(first, other)


@settings(max_examples=50)
@given(
    gap_s=st.sampled_from([0.1, 0.25, 1.0]),
    max_concurrent=st.integers(min_value=1, max_value=100),
    duration_s=st.floats(min_value=0.05, max_value=20.0),
    seed=st.integers(min_value=0, max_value=2**16),
)
def test_spikes_respect_gap_and_max_concurrent(
    gap_s: float, max_concurrent: int, duration_s: float, seed: int
) -> None:
    times_s = spike_arrivals(gap_s, max_concurrent, duration_s, np.random.default_rng(seed))
    instants, counts = np.unique(times_s, return_counts=True)
    assert np.all(times_s < duration_s)
    assert instants.size == math.ceil(duration_s / gap_s) or instants[-1] + gap_s >= duration_s
    assert np.allclose(np.diff(instants), gap_s)
    assert np.all((counts >= 1) & (counts <= max_concurrent))


def test_spike_batch_sizes_are_uniform() -> None:
    times_s = spike_arrivals(0.1, 100, 1000.0, np.random.default_rng(4))
    _, counts = np.unique(times_s, return_counts=True)
    assert counts.min() == 1 and counts.max() == 100
    standard_error = counts.std(ddof=1) / math.sqrt(counts.size)
    assert abs(counts.mean() - mean_spike_size(100)) < 5 * standard_error


def test_spikes_stop_at_num_requests_drawing_only_the_spikes_kept() -> None:
    full = spike_arrivals(0.1, 50, 30.0, np.random.default_rng(7))
    cut = spike_arrivals(0.1, 50, 30.0, np.random.default_rng(7), num_requests=200)
    assert np.array_equal(cut, full[:200])
    alone = spike_arrivals(0.1, 50, None, np.random.default_rng(7), num_requests=200)
    assert np.array_equal(alone, cut)
    few = spike_arrivals(0.1, 50, 0.25, np.random.default_rng(7), num_requests=10**12)  # duration comes first
    assert few.size <= 3 * 50 and np.all(few < 0.25)


def test_expected_spike_requests() -> None:
    assert expected_spike_requests(0.1, 100, 1.0) == pytest.approx(10 * 50.5)
    assert expected_spike_requests(0.3, 5, 1.0) == 4 * 3.0  # spikes at 0, 0.3, 0.6, 0.9
    assert expected_spike_requests(0.1, 100, 1.0, num_requests=7) == 7
    assert expected_spike_requests(1e-300, 1, 1e300) == math.inf


def test_spike_count_beyond_the_limit_is_refused_before_drawing() -> None:
    with pytest.raises(ArrivalError, match="duration_s / gap_s: .* gives more than 1,000,000,000 spikes"):
        spike_arrivals(1e-12, 1, 3600.0, np.random.default_rng(0))


@pytest.mark.parametrize(
    ("call", "argument"),
    [
        (lambda rng: poisson_arrivals(0.0, 10, rng), "rate_per_s"),
        (lambda rng: poisson_arrivals(1.0, -1, rng), "num_requests"),
        (lambda rng: gamma_arrivals(1.0, 0.0, 10, rng), "cv"),
        (lambda rng: gamma_arrivals(math.inf, 1.0, 10, rng), "rate_per_s"),
        (lambda rng: spike_arrivals(-0.1, 5, 10.0, rng), "gap_s"),
        (lambda rng: spike_arrivals(0.1, 0, 10.0, rng), "max_concurrent"),
        (lambda rng: spike_arrivals(0.1, 5, 0.0, rng), "duration_s"),
        (lambda rng: spike_arrivals(0.1, 5, None, rng), "duration_s or num_requests"),
        (lambda rng: spike_arrivals(0.1, 5, 1.0, rng, 0), "num_requests"),
        (lambda rng: poisson_arrivals_until(1.0, -5.0, rng), "duration_s"),
    ],
)
def test_invalid_arguments_are_named(call: object, argument: str) -> None:
    with pytest.raises(ArrivalError, match=argument):
        call(np.random.default_rng(0))  # type: ignore[operator]
