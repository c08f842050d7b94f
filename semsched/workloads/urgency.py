"""Each request's semantic urgency for a workload (seed 000): levels drawn at random, or given, and optionally
mislabelled by the noisy oracle of :mod:`semsched.predict.oracle`.

Level 0 is the most urgent, ``num_levels - 1`` the least. Urgency is drawn from a generator of its own
(:func:`side_stream`), so adding it to a workload leaves the arrivals, lengths and tiers drawn from the main
generator exactly as they were.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from semsched.predict.oracle import mislabel
from semsched.workloads.workload import Workload, WorkloadError

URGENCY_STREAM = 1
"""The spawn key of the generator urgency is drawn from (see :func:`side_stream`)."""


def side_stream(rng: np.random.Generator, key: int) -> np.random.Generator:
    """A generator derived from ``rng``'s seed and ``key`` alone: the child ``key`` of ``rng``'s seed sequence.

    Creating it or drawing from it never changes ``rng``, and the same seed and key always give the same
    stream. ``rng`` must have been created from a seed (``np.random.default_rng(seed)``)."""
    seed_seq = rng.bit_generator.seed_seq
    if not isinstance(seed_seq, np.random.SeedSequence):
        raise WorkloadError(f"side_stream: the generator has no seed sequence to derive from (got {seed_seq!r})")
    return np.random.default_rng(np.random.SeedSequence(seed_seq.entropy, spawn_key=(*seed_seq.spawn_key, key)))


def draw_urgency(
    n: int, num_levels: int, rng: np.random.Generator, weights: Sequence[float] | None = None
) -> npt.NDArray[np.int64]:
    """``n`` levels 0..num_levels-1 drawn independently: uniformly, or with probability proportional to
    ``weights`` (one per level)."""
    if num_levels < 1:
        raise WorkloadError(f"urgency_levels: must be >= 1 (got {num_levels})")
    if weights is None:
        return rng.integers(0, num_levels, size=n, dtype=np.int64)
    if len(weights) != num_levels:
        raise WorkloadError(f"urgency_weights: {len(weights)} given, one per level needed ({num_levels})")
    probs = np.asarray(weights, dtype=np.float64)
    return rng.choice(num_levels, size=n, p=probs / probs.sum()).astype(np.int64)


def with_believed_urgency(
    workload: Workload, true_levels: npt.ArrayLike, num_levels: int, error: float, rng: np.random.Generator
) -> Workload:
    """``workload`` with urgency ``true_levels`` as the scheduler would believe them: unchanged when ``error``
    is 0; otherwise mislabelled by :func:`~semsched.predict.oracle.mislabel` (a fraction ``error`` wrong) with
    the true levels kept as ``urgency_true``."""
    true = np.asarray(true_levels, dtype=np.int64)
    if error == 0:
        return workload.with_urgency(true)
    if num_levels < 2:
        raise WorkloadError(f"urgency_error: needs at least 2 urgency levels to mislabel (got {num_levels})")
    return workload.with_urgency(mislabel(true, num_levels, error, rng), urgency_true=true)
