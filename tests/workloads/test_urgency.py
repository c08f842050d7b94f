"""Tests for semsched/workloads/urgency.py: drawing and mislabelling urgency levels from a stream of their own."""

from __future__ import annotations

import math

import numpy as np
import pytest

from semsched.workloads import Workload, WorkloadError, draw_urgency, side_stream, with_believed_urgency
from tests.workloads.factories import make_workload


def _tolerance(p: float, n: int) -> float:
    """Five standard deviations of a frequency with probability ``p`` over ``n`` draws."""
    return 5 * math.sqrt(p * (1 - p) / n)


def test_side_stream_leaves_the_generator_alone() -> None:
    rng, untouched = np.random.default_rng(7), np.random.default_rng(7)
    side = side_stream(rng, 1)
    side.random(100)
    assert rng.random() == untouched.random()
    again = side_stream(np.random.default_rng(7), 1)
    assert side_stream(np.random.default_rng(7), 1).random() == again.random()
    assert side_stream(np.random.default_rng(7), 2).random() != side_stream(np.random.default_rng(7), 1).random()


def test_side_stream_needs_a_seeded_generator() -> None:
    class NoSeed:
        seed_seq = None

    class Fake:
        bit_generator = NoSeed()

    with pytest.raises(WorkloadError, match="side_stream"):
        side_stream(Fake(), 1)  # type: ignore[arg-type]


def test_draw_urgency_uniform_and_weighted() -> None:
    n, levels = 20_000, 4
    uniform = draw_urgency(n, levels, np.random.default_rng(0))
    frequencies = np.bincount(uniform, minlength=levels) / n
    assert uniform.dtype == np.int64 and set(np.unique(uniform)) == set(range(levels))
    assert np.all(np.abs(frequencies - 1 / levels) < _tolerance(1 / levels, n))
    weights = (1.0, 0.0, 3.0, 4.0)
    weighted = draw_urgency(n, levels, np.random.default_rng(0), weights)
    expected = np.asarray(weights) / sum(weights)
    frequencies = np.bincount(weighted, minlength=levels) / n
    assert frequencies[1] == 0
    assert all(abs(f - p) < _tolerance(p, n) or p == 0 for f, p in zip(frequencies, expected, strict=True))


def test_draw_urgency_checks_its_arguments() -> None:
    with pytest.raises(WorkloadError, match="urgency_weights: 2 given, one per level needed"):
        draw_urgency(5, 3, np.random.default_rng(0), (1.0, 1.0))
    with pytest.raises(WorkloadError, match="urgency_levels: must be >= 1"):
        draw_urgency(5, 0, np.random.default_rng(0))


def _workload(n: int) -> Workload:
    return make_workload(np.arange(n, dtype=np.float64))


def test_exact_urgency_keeps_no_truth_beside_it() -> None:
    labelled = with_believed_urgency(_workload(4), [0, 1, 2, 3], 4, 0.0, np.random.default_rng(0))
    assert labelled.urgency is not None and list(labelled.urgency) == [0, 1, 2, 3]
    assert labelled.urgency_true is None


@pytest.mark.parametrize("error", [0.1, 0.35, 1.0])
def test_urgency_error_is_the_fraction_mislabelled(error: float) -> None:
    n, levels = 1_000, 5
    true = draw_urgency(n, levels, np.random.default_rng(1))
    labelled = with_believed_urgency(_workload(n), true, levels, error, np.random.default_rng(2))
    assert labelled.urgency is not None and labelled.urgency_true is not None
    assert np.array_equal(labelled.urgency_true, true)
    assert np.mean(labelled.urgency != true) == pytest.approx(round(error * n) / n)
    assert labelled.urgency.min() >= 0 and labelled.urgency.max() < levels


def test_urgency_error_needs_two_levels() -> None:
    with pytest.raises(WorkloadError, match="at least 2 urgency levels"):
        with_believed_urgency(_workload(3), [0, 0, 0], 1, 0.5, np.random.default_rng(0))
