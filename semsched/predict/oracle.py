"""Noisy oracles: seed 000's error model for predictor sweeps (Fig. 2a/2b).

A fraction ``error`` of the requests is mislabelled, and the mislabelled ones are off by ``error x levels`` levels
on average (at least 1: a wrong label is at least one level away). Each mislabelled request draws its wrong
label ``l`` with probability proportional to ``exp(-lam * |l - true|)`` over every other level; one ``lam`` for the
whole batch is solved so that the *expected* mean distance equals the target (clipped to what the true labels
allow: nothing is farther than the farthest level). The same model serves urgency levels and length buckets.
"""

from __future__ import annotations

import math

import numpy as np

from semsched.core.errors import SemschedError


class OracleError(SemschedError):
    """Bad oracle settings: the message names the parameter and its limits."""


def _check(error: float, num_levels: int) -> None:
    if isinstance(num_levels, bool) or not isinstance(num_levels, int) or num_levels < 2:
        raise OracleError(f"num_levels: must be an integer >= 2 (got {num_levels!r})")
    if not (isinstance(error, int | float) and math.isfinite(error) and 0.0 <= error <= 1.0):
        raise OracleError(f"error: must be a number from 0 to 1 (got {error!r})")


def target_distance(error: float, num_levels: int) -> float:
    """Mean distance of a mislabelled request: ``error x num_levels``, at least 1."""
    _check(error, num_levels)
    return max(1.0, error * num_levels)


def _choice_weights(true: np.ndarray, num_levels: int, lam: float) -> np.ndarray:
    """(n, L) probabilities of each wrong label, 0 on the true one."""
    distance = np.abs(np.arange(num_levels)[None, :] - true[:, None]).astype(np.float64)
    logits = np.where(distance > 0, -lam * distance, -np.inf)
    logits -= logits.max(axis=1, keepdims=True)
    weights = np.exp(logits)
    return np.asarray(weights / weights.sum(axis=1, keepdims=True))


def _mean_distance(true: np.ndarray, num_levels: int, lam: float) -> float:
    distance = np.abs(np.arange(num_levels)[None, :] - true[:, None])
    return float(np.mean(np.sum(_choice_weights(true, num_levels, lam) * distance, axis=1)))


def _solve_lambda(true: np.ndarray, num_levels: int, target: float) -> float:
    low, high = -50.0, 50.0  # mean distance decreases in lam: farthest level at -50, nearest at +50
    if _mean_distance(true, num_levels, high) >= target:
        return high
    if _mean_distance(true, num_levels, low) <= target:
        return low
    for _ in range(80):
        mid = (low + high) / 2
        if _mean_distance(true, num_levels, mid) > target:
            low = mid
        else:
            high = mid
    return (low + high) / 2


def mislabel(true: np.ndarray, num_levels: int, error: float, rng: np.random.Generator) -> np.ndarray:
    """Labels 0..num_levels-1 with exactly ``round(error x n)`` of them wrong, at the mean distance above.

    ``true`` holds levels 0..num_levels-1 (0-based). Deterministic for a given ``rng`` state."""
    _check(error, num_levels)
    labels = np.asarray(true, dtype=np.int64)
    if labels.size and (labels.min() < 0 or labels.max() >= num_levels):
        raise OracleError(f"true: levels must be 0 to {num_levels - 1} (got {labels.min()}..{labels.max()})")
    out = labels.copy()
    wrong = rng.permutation(labels.size)[: int(round(error * labels.size))]
    if wrong.size == 0:
        return out
    lam = _solve_lambda(labels[wrong], num_levels, target_distance(error, num_levels))
    weights = _choice_weights(labels[wrong], num_levels, lam)
    draws = rng.random(wrong.size)[:, None]
    out[wrong] = np.minimum(np.argmax(np.cumsum(weights, axis=1) >= draws, axis=1), num_levels - 1)
    return out
