"""Scores of predicted length distributions (semsched/predict/scoring.py): CRPS against a brute-force sum and its
expectation form, bucket log-loss with clipping, bucket accuracy, MAE of the mean."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from semsched.core.request import LengthDistribution
from semsched.predict.scoring import MIN_PROB, ScoreBuckets, crps, per_request_scores, score


def brute_crps(distribution: LengthDistribution, truth: int) -> float:
    """sum over integers k of (F(k) - [k >= truth])**2, F summed term by term."""
    top = max(max(distribution.lengths), truth) + 2
    total = 0.0
    for k in range(0, top):
        cdf = sum(p for n, p in zip(distribution.lengths, distribution.probs, strict=True) if n <= k)
        total += (cdf - (1.0 if k >= truth else 0.0)) ** 2
    return total


def expectation_crps(distribution: LengthDistribution, truth: int) -> float:
    """E|X - y| - E|X - X'| / 2, the other closed form of the CRPS."""
    lengths, probs = np.array(distribution.lengths), np.array(distribution.probs)
    spread = float(probs @ np.abs(lengths[:, None] - lengths[None, :]) @ probs)
    return float(probs @ np.abs(lengths - truth)) - spread / 2


@st.composite
def distributions(draw: st.DrawFn) -> LengthDistribution:
    lengths = sorted(draw(st.sets(st.integers(1, 60), min_size=1, max_size=8)))
    weights = draw(st.lists(st.integers(1, 9), min_size=len(lengths), max_size=len(lengths)))
    total = sum(weights)
    return LengthDistribution(tuple(lengths), tuple(w / total for w in weights))


@settings(max_examples=80, deadline=None)
@given(cases=st.lists(st.tuples(distributions(), st.integers(1, 70)), min_size=1, max_size=6))
def test_crps_equals_the_brute_force_sum(cases: list[tuple[LengthDistribution, int]]) -> None:
    dists, truths = [d for d, _ in cases], np.array([y for _, y in cases])
    scores = crps(dists, truths)
    for got, (dist, truth) in zip(scores, cases, strict=True):
        assert got == pytest.approx(brute_crps(dist, truth), abs=1e-9)
        assert got == pytest.approx(expectation_crps(dist, truth), abs=1e-9)


def test_crps_of_a_point_is_the_absolute_error() -> None:
    assert crps([LengthDistribution.point(10)] * 3, np.array([10, 4, 25])).tolist() == [0.0, 6.0, 15.0]


def test_crps_prefers_spread_around_the_truth_to_a_confident_miss() -> None:
    spread = LengthDistribution((90, 100, 110), (1 / 3, 1 / 3, 1 / 3))
    miss = LengthDistribution.point(120)
    assert crps([spread], np.array([100]))[0] < crps([miss], np.array([100]))[0]


def test_buckets_are_a_hundred_tokens_wide_the_last_open_ended() -> None:
    buckets = ScoreBuckets()
    assert buckets.bucket_of(np.array([1, 100, 101, 1900, 1901, 50_000])).tolist() == [0, 0, 1, 18, 19, 19]


def test_log_loss_accuracy_and_mean_error_by_hand() -> None:
    # 0.3 in bucket 0 (lengths 50), 0.7 in bucket 1 (150 and 180); truth 60 in bucket 0
    dist = LengthDistribution((50, 150, 180), (0.3, 0.4, 0.3))
    each = per_request_scores([dist, LengthDistribution.point(500)], np.array([60, 60]))
    assert each["log_loss"][0] == pytest.approx(-math.log(0.3))
    assert each["log_loss"][1] == pytest.approx(-math.log(MIN_PROB))  # a point that misses is clipped
    assert each["bucket_hit"].tolist() == [0.0, 0.0]  # argmax is bucket 1, and bucket 4
    assert each["abs_error_mean"][0] == pytest.approx(abs(0.3 * 50 + 0.4 * 150 + 0.3 * 180 - 60))
    summary = score([dist, LengthDistribution.point(60)], np.array([60, 60]))
    assert summary.n == 2
    assert summary.bucket_accuracy == 0.5
    assert summary.log_loss == pytest.approx(-math.log(0.3) / 2)


def test_scores_need_one_truth_per_distribution() -> None:
    with pytest.raises(ValueError, match="true_lengths"):
        crps([LengthDistribution.point(1)], np.array([1, 2]))
