"""Scores of predicted output-length distributions against the real lengths (issue 16). All vectorised over a
batch: distributions are flattened once (:class:`FlatDistributions`) and scored with numpy.

* **CRPS** (continuous ranked probability score, in tokens, lower is better): for a predicted CDF ``F`` and the
  true length ``y``, ``sum over integers k of (F(k) - [k >= y])**2``; exact (lengths are integers, so ``F`` is a
  step function and the integral over the reals is this sum). For a point prediction it is ``|x - y|``; it
  rewards putting mass near the truth, and spreading it when the truth is uncertain.
* **log-loss over buckets** (nats): ``-log P(true bucket)``, the probability clipped below at :data:`MIN_PROB`
  (a point prediction that misses its bucket costs ``-log 1e-6`` = 13.8). Default buckets: the paper's Fig. 2a,
  100 tokens wide (1-100, 101-200, ...), 20 of them, the last open-ended (1,901 and above).
* **bucket accuracy**: the most probable bucket is the true one (ties: the shorter bucket).
* **MAE of the mean**: ``|E[L] - y|`` in tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from semsched.core.request import LengthDistribution

MIN_PROB = 1e-6
DEFAULT_BUCKET_WIDTH_TOKENS = 100
DEFAULT_NUM_BUCKETS = 20


@dataclass(frozen=True)
class ScoreBuckets:
    """``count`` buckets of ``width_tokens``: bucket ``b`` holds lengths ``b*width+1 .. (b+1)*width``, the last
    everything above."""

    width_tokens: int = DEFAULT_BUCKET_WIDTH_TOKENS
    count: int = DEFAULT_NUM_BUCKETS

    def __post_init__(self) -> None:
        if self.width_tokens < 1 or self.count < 1:
            raise ValueError(f"ScoreBuckets: width_tokens and count must be >= 1 (got {self.width_tokens}, "
                             f"{self.count})")

    def bucket_of(self, lengths: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        return np.minimum((np.asarray(lengths, dtype=np.int64) - 1) // self.width_tokens, self.count - 1)


@dataclass(frozen=True)
class FlatDistributions:
    """Many distributions in flat arrays: distribution ``owner[j]`` gives ``lengths[j]`` probability ``probs[j]``;
    each distribution's entries are contiguous and ascending, ``starts[i]`` is the first entry of distribution
    ``i`` (``starts[-1]`` = total)."""

    lengths: npt.NDArray[np.int64]
    probs: npt.NDArray[np.float64]
    owner: npt.NDArray[np.int64]
    starts: npt.NDArray[np.int64]

    @classmethod
    def of(cls, distributions: Sequence[LengthDistribution]) -> FlatDistributions:
        sizes = np.fromiter((len(d.lengths) for d in distributions), dtype=np.int64, count=len(distributions))
        total = int(sizes.sum())
        lengths = np.fromiter((n for d in distributions for n in d.lengths), dtype=np.int64, count=total)
        probs = np.fromiter((p for d in distributions for p in d.probs), dtype=np.float64, count=total)
        owner = np.repeat(np.arange(len(distributions), dtype=np.int64), sizes)
        return cls(lengths, probs, owner, np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64))

    def __len__(self) -> int:
        return len(self.starts) - 1

    def cumulative(self) -> npt.NDArray[np.float64]:
        """F at each entry (cumulative probability within its distribution)."""
        total = np.cumsum(self.probs)
        before = np.concatenate([[0.0], total])[self.starts[:-1]]
        return np.asarray(total - before[self.owner])

    def means(self) -> npt.NDArray[np.float64]:
        return np.bincount(self.owner, weights=self.lengths * self.probs, minlength=len(self)).astype(np.float64)


def _check(flat: FlatDistributions, true_lengths: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    truth = np.asarray(true_lengths, dtype=np.int64)
    if truth.shape != (len(flat),):
        raise ValueError(f"true_lengths: need one per distribution ({len(flat)}), got shape {truth.shape}")
    return truth


def crps(distributions: Sequence[LengthDistribution] | FlatDistributions,
         true_lengths: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
    """Exact CRPS of each distribution against its true length (module docstring), in tokens.

    With support ``l_1 < ... < l_m`` and ``C_j = F(l_j)``: below ``l_1`` F is 0, so the integers in
    ``[y, l_1)`` cost 1 each; on ``[l_j, l_{j+1})`` F is ``C_j``, so each integer there costs ``C_j**2`` below
    ``y`` and ``(1 - C_j)**2`` from ``y`` on; from ``l_m`` on F is 1, so the integers in ``[l_m, y)`` cost 1."""
    flat = distributions if isinstance(distributions, FlatDistributions) else FlatDistributions.of(distributions)
    truth = _check(flat, true_lengths)
    y = truth[flat.owner]
    cumulative = flat.cumulative()
    last = np.zeros(flat.lengths.size, dtype=bool)
    last[flat.starts[1:] - 1] = True
    segment_end = np.where(last, flat.lengths, np.roll(flat.lengths, -1))  # the last entry has no segment
    width = segment_end - flat.lengths
    below = np.clip(y - flat.lengths, 0, width)  # integers of the segment below y
    inside = below * cumulative**2 + (width - below) * (1.0 - cumulative) ** 2
    first_length = flat.lengths[flat.starts[:-1]]
    last_length = flat.lengths[flat.starts[1:] - 1]
    outside = np.maximum(first_length - truth, 0) + np.maximum(truth - last_length, 0)
    return np.asarray(np.bincount(flat.owner, weights=inside, minlength=len(flat)) + outside, dtype=np.float64)


def bucket_probs(flat: FlatDistributions, buckets: ScoreBuckets) -> npt.NDArray[np.float64]:
    """(n, buckets.count) probability of each bucket under each distribution."""
    table = np.zeros((len(flat), buckets.count))
    np.add.at(table, (flat.owner, buckets.bucket_of(flat.lengths)), flat.probs)
    return table


@dataclass(frozen=True)
class Scores:
    """Mean scores over a set of predictions (module docstring)."""

    n: int
    crps: float
    log_loss: float
    bucket_accuracy: float
    mae_mean: float


def per_request_scores(distributions: Sequence[LengthDistribution], true_lengths: npt.NDArray[np.int64],
                       buckets: ScoreBuckets | None = None) -> dict[str, npt.NDArray[np.float64]]:
    """Each request's CRPS, bucket log-loss, bucket hit (0/1) and |mean - truth|."""
    buckets = buckets or ScoreBuckets()
    flat = FlatDistributions.of(distributions)
    truth = _check(flat, true_lengths)
    probs = bucket_probs(flat, buckets)
    true_bucket = buckets.bucket_of(truth)
    rows = np.arange(len(flat))
    return {
        "crps": crps(flat, truth),
        "log_loss": -np.log(np.maximum(probs[rows, true_bucket], MIN_PROB)),
        "bucket_hit": (np.argmax(probs, axis=1) == true_bucket).astype(np.float64),
        "abs_error_mean": np.abs(flat.means() - truth),
    }


def score(distributions: Sequence[LengthDistribution], true_lengths: npt.NDArray[np.int64],
          buckets: ScoreBuckets | None = None) -> Scores:
    each = per_request_scores(distributions, true_lengths, buckets)
    return Scores(n=len(distributions), crps=float(each["crps"].mean()), log_loss=float(each["log_loss"].mean()),
                  bucket_accuracy=float(each["bucket_hit"].mean()), mae_mean=float(each["abs_error_mean"].mean()))
