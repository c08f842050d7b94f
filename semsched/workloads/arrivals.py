"""Arrival processes: when requests arrive.

Every function takes the :class:`numpy.random.Generator` it draws from, so the same generator state always
gives the same times. Times are seconds from the start of the workload, as a non-decreasing float64 array.

* :func:`poisson_arrivals` -- exponential gaps (memoryless traffic).
* :func:`gamma_arrivals` -- gamma-distributed gaps with a chosen coefficient of variation (``cv``):
  ``cv = 1`` is Poisson, ``cv > 1`` is bursty, ``cv < 1`` is smoother than Poisson.
* :func:`spike_arrivals` -- the request spikes of seed 000 (section 4.1, "Response to Spikes in User
  Requests"): every ``gap_s`` seconds a batch of between 1 and ``max_concurrent`` requests arrives at the
  same instant (the seed uses gaps of 0.1 s and 1.0 s with up to 100 concurrent requests, and at most 5
  concurrent requests per arrival outside the spike experiments).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from semsched.workloads.workload import WorkloadError

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
GapSampler = Callable[[int], FloatArray]


MAX_SPIKES = 10**9
"""Spike instants an arrival sequence may hold; far beyond any workload the request limit lets through."""


class ArrivalError(WorkloadError):
    """An arrival-process argument is out of range; the message names the argument."""


def poisson_arrivals(rate_per_s: float, num_requests: int, rng: np.random.Generator) -> FloatArray:
    """``num_requests`` arrival times of a Poisson process at ``rate_per_s``; the first is a gap after 0."""
    _check_positive("rate_per_s", rate_per_s)
    _check_count("num_requests", num_requests)
    return np.cumsum(_exponential_gaps(rate_per_s, rng)(num_requests))


def gamma_arrivals(rate_per_s: float, cv: float, num_requests: int, rng: np.random.Generator) -> FloatArray:
    """``num_requests`` arrival times whose gaps are gamma-distributed with mean ``1 / rate_per_s``.

    ``cv`` is the coefficient of variation (std / mean) of the gaps: the gamma shape is ``1 / cv**2``, so
    ``cv = 1`` gives exponential gaps (Poisson) and larger ``cv`` gives burstier traffic at the same mean
    rate.
    """
    _check_positive("rate_per_s", rate_per_s)
    _check_positive("cv", cv)
    _check_count("num_requests", num_requests)
    return np.cumsum(_gamma_gaps(rate_per_s, cv, rng)(num_requests))


def poisson_arrivals_until(rate_per_s: float, duration_s: float, rng: np.random.Generator) -> FloatArray:
    """All arrival times of a Poisson process with ``rate_per_s`` that fall in ``[0, duration_s)``."""
    _check_positive("rate_per_s", rate_per_s)
    _check_positive("duration_s", duration_s)
    return _renewal_until(_exponential_gaps(rate_per_s, rng), rate_per_s, duration_s)


def gamma_arrivals_until(rate_per_s: float, cv: float, duration_s: float, rng: np.random.Generator) -> FloatArray:
    """All arrival times of the gamma renewal process of :func:`gamma_arrivals` in ``[0, duration_s)``."""
    _check_positive("rate_per_s", rate_per_s)
    _check_positive("cv", cv)
    _check_positive("duration_s", duration_s)
    return _renewal_until(_gamma_gaps(rate_per_s, cv, rng), rate_per_s, duration_s)


def spike_arrivals(
    gap_s: float,
    max_concurrent: int,
    duration_s: float | None,
    rng: np.random.Generator,
    num_requests: int | None = None,
) -> FloatArray:
    """Seed 000's request spikes: at times 0, ``gap_s``, ``2 gap_s``, ... below ``duration_s``, a batch whose
    size is uniform on ``[1, max_concurrent]`` arrives at one instant.

    The mean rate is therefore ``(1 + max_concurrent) / 2 / gap_s`` requests per second. With ``num_requests``
    the spikes stop once that many requests have arrived (the last batch is cut short); at least one of
    ``duration_s`` and ``num_requests`` is needed. Only the spikes kept are drawn.
    """
    _check_positive("gap_s", gap_s)
    _check_count("max_concurrent", max_concurrent, minimum=1)
    num_spikes = _spike_count(gap_s, duration_s, num_requests)
    instants = np.arange(num_spikes, dtype=np.float64) * gap_s
    if duration_s is not None:
        instants = instants[instants < duration_s]
    batch_sizes = rng.integers(1, max_concurrent, size=instants.size, endpoint=True)
    if num_requests is not None:
        batch_sizes = _cut_to_total(batch_sizes, num_requests)
        instants = instants[: batch_sizes.size]
    return np.repeat(instants, batch_sizes)


def expected_spike_requests(
    gap_s: float, max_concurrent: int, duration_s: float | None, num_requests: int | None = None
) -> float:
    """How many requests :func:`spike_arrivals` gives on average for these arguments, computed without drawing
    anything (``inf`` when the spike count does not fit a float)."""
    _check_positive("gap_s", gap_s)
    _check_count("max_concurrent", max_concurrent, minimum=1)
    spikes = math.inf
    if duration_s is not None:
        _check_positive("duration_s", duration_s)
        ratio = duration_s / gap_s
        spikes = float(math.ceil(ratio)) if math.isfinite(ratio) else math.inf
    expected = spikes * mean_spike_size(max_concurrent)
    if num_requests is not None:
        _check_count("num_requests", num_requests, minimum=1)
        expected = min(expected, float(num_requests))
    return expected


def mean_spike_size(max_concurrent: int) -> float:
    """Expected batch size of :func:`spike_arrivals`: the mean of the uniform distribution on [1, max]."""
    _check_count("max_concurrent", max_concurrent, minimum=1)
    return (1 + max_concurrent) / 2


# ---- helpers -----------------------------------------------------------------------------------------------
def _exponential_gaps(rate_per_s: float, rng: np.random.Generator) -> GapSampler:
    def draw(n: int) -> FloatArray:
        return rng.exponential(1.0 / rate_per_s, size=n)

    return draw


def _gamma_gaps(rate_per_s: float, cv: float, rng: np.random.Generator) -> GapSampler:
    shape = 1.0 / cv**2
    scale = 1.0 / (rate_per_s * shape)  # mean = shape * scale = 1 / rate

    def draw(n: int) -> FloatArray:
        return rng.gamma(shape, scale, size=n)

    return draw


def _renewal_until(draw_gaps: GapSampler, rate_per_s: float, duration_s: float) -> FloatArray:
    """Cumulate gaps in chunks until the process passes ``duration_s``, then drop what lies beyond."""
    expected = rate_per_s * duration_s
    chunk = int(expected + 4.0 * math.sqrt(expected) + 16)
    chunks: list[FloatArray] = []
    last_s = 0.0
    while last_s < duration_s:
        times = last_s + np.cumsum(draw_gaps(chunk))
        chunks.append(times)
        last_s = float(times[-1])
    arrivals = np.concatenate(chunks)
    return np.asarray(arrivals[arrivals < duration_s], dtype=np.float64)


def _spike_count(gap_s: float, duration_s: float | None, num_requests: int | None) -> int:
    """Spikes needed: those below ``duration_s``, and never more than ``num_requests`` (each holds >= 1)."""
    if duration_s is None and num_requests is None:
        raise ArrivalError("duration_s or num_requests: spikes need at least one of them")
    counts = []
    if duration_s is not None:
        _check_positive("duration_s", duration_s)
        ratio = duration_s / gap_s
        if not math.isfinite(ratio) or ratio > MAX_SPIKES:
            raise ArrivalError(
                f"duration_s / gap_s: {duration_s!r} s / {gap_s!r} s gives more than {MAX_SPIKES:,} spikes"
            )
        counts.append(math.ceil(ratio))
    if num_requests is not None:
        _check_count("num_requests", num_requests, minimum=1)
        counts.append(num_requests)
    return min(counts)


def _cut_to_total(batch_sizes: IntArray, total: int) -> IntArray:
    """The batches up to the one where the running total reaches ``total``, that one cut to fit."""
    reached = np.cumsum(batch_sizes)
    last = int(np.searchsorted(reached, total))  # first batch whose running total is >= total
    if last >= batch_sizes.size:
        return batch_sizes
    kept = batch_sizes[: last + 1].copy()
    kept[last] -= int(reached[last]) - total
    return kept


def _check_positive(name: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float | np.number):
        raise ArrivalError(f"{name}: must be a number (got {value!r})")
    if not math.isfinite(value) or value <= 0:
        raise ArrivalError(f"{name}: must be a finite number > 0 (got {value!r})")


def _check_count(name: str, value: int, *, minimum: int = 0) -> None:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise ArrivalError(f"{name}: must be an integer (got {value!r})")
    if value < minimum:
        raise ArrivalError(f"{name}: must be >= {minimum} (got {value})")
