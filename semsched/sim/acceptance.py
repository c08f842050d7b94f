"""A fitted stochastic model of speculative decoding's yield per verification round (seed 004).

The model. Each round proposes ``n`` = ``draft_tokens`` drafts. Request ``i`` has a base per-draft acceptance
probability ``p_i``; round ``k`` accepts each draft with probability ``q_k = sigmoid(x_k)``, where ``x_k`` is an
AR(1) process in logit space around ``mu_i = logit(p_i)``::

    x_1 = mu_i + sigma * eps_1                                        (the stationary law: N(mu_i, sigma^2))
    x_k = mu_i + rho * (x_{k-1} - mu_i) + sigma * sqrt(1 - rho^2) * eps_k

The round's yield is 1 (the target model's own token) plus the number of leading drafts accepted, each w.p.
``q_k``, stopping at the first rejection, at most ``n``: a value in ``[1, n + 1]`` whose mean given ``q`` is
``(1 - q^(n+1)) / (1 - q)``. ``rho`` makes good and bad stretches persist within a request (easy boilerplate,
hard reasoning); ``sigma`` is how far a round's acceptance strays from the request's own.

The fit (:func:`fit_acceptance`), from logged accept lengths (one sequence of yields per request):

* ``p_i`` of each sequence solves ``mean yield of sequence i = E[yield | p_i, sigma]``, the expectation over
  the stationary law of ``x`` (Gauss-Hermite quadrature; the increasing function tabulated every 0.01 in logit
  and inverted by interpolation), ``p`` clipped to ``(1e-4, 1 - 1e-4)`` at ``sigma = 0``. At ``sigma = 0``
  this is ``(1 - p^(n+1)) / (1 - p) = mean``; for ``sigma > 0`` it keeps every sequence's mean yield, which
  ``E[f(q)] != f(p)`` would otherwise shift, and ``p_i`` is the median of the request's per-round acceptance
  probability. New requests draw their ``p`` from the fitted set (a bootstrap:
  :meth:`FittedAcceptance.sample_rate`).
* ``rho`` and ``sigma`` so that the model's mean lag-1 autocorrelation of yields within a request, and then
  its mean within-request yield variance, come nearest the logs': for each ``sigma`` of a grid, the ``rho``
  that matches the autocorrelation (bisection over a grid of ``rho``, interpolated), then the ``sigma`` whose
  variance is nearest (a coarse grid, then a fine one around the best). The model is simulated with the fitted
  ``p_i`` and each logged sequence's number of rounds, from one seed (the same random numbers at every grid
  point, so the statistics change smoothly), and both sides' statistics are :func:`yield_statistics`, so the
  small-sample bias of a short sequence's autocorrelation (about ``-1/length``) is the same on both sides.

What it cannot match: a per-round yield spread narrower than the truncated geometric law's. EAGLE's tree
drafts give one (Spec-Bench's EAGLE log: 2.0 tokens^2 within a request, where any truncated geometric of its
mean gives about 3.5 and a wandering rate only more); its mean and autocorrelation are matched all the same.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from semsched.core.errors import SemschedError

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
YieldStatistics = tuple[float, float, float]
"""``(mean, var, lag1)``, see :func:`yield_statistics`."""

RATE_CLIP = 1e-4
"""Per-draft acceptance probabilities of the fit lie in ``(RATE_CLIP, 1 - RATE_CLIP)`` at ``sigma = 0``."""
MAX_LOGIT = 40.0
"""Logits are clipped to ``[-MAX_LOGIT, MAX_LOGIT]`` (probabilities within 4e-18 of 0 or 1)."""
SOLVE_LOGIT = 20.0
"""The fit's base logits lie in ``[-SOLVE_LOGIT, SOLVE_LOGIT]``."""
RHO_GRID = tuple(round(-0.6 + 0.1 * i, 2) for i in range(16))
"""The ``rho`` the fit simulates, -0.6 to 0.9 (between two of them it interpolates). Not nearer 1: there the
AR(1) becomes a second per-request draw competing with ``p_i`` (a sequence keeps its first round's rate, so its
mean no longer follows its fitted ``p_i``), and the lag-1 autocorrelation stops rising with ``rho``."""
SIGMA_GRID = tuple(round(0.25 * i, 2) for i in range(13))
"""The coarse grid of ``sigma``, 0 to 3; a grid of :data:`SIGMA_FINE_STEP` follows around the best."""
SIGMA_FINE_STEP = 0.05
LAG1_SCALE = 0.02
"""The fit weighs an autocorrelation error of this size as much as a 100 % error of the variance."""
MAX_RHO = 0.99
MAX_SIGMA = 5.0
QUADRATURE_NODES = 24
ROUNDS_CHUNK = 256
""":meth:`FittedAcceptance.rounds` draws this many rounds at a time (at most)."""


class AcceptanceError(SemschedError):
    """Bad input to the acceptance model: the message names the argument (and the sequence and round)."""


# ---- the per-round yield ---------------------------------------------------------------------------------
def mean_yield(rate: float | FloatArray, draft_tokens: int) -> FloatArray:
    """Mean tokens per round at a fixed per-draft acceptance probability ``rate`` in (0, 1):
    ``(1 - rate^(n+1)) / (1 - rate)`` with ``n`` = ``draft_tokens``."""
    logits = np.log(rate) - np.log1p(-np.asarray(rate, dtype=np.float64))
    return _mean_yield_at(logits, draft_tokens)


def _mean_yield_at(logits: FloatArray, draft_tokens: int) -> FloatArray:
    """``(1 - q^(n+1)) / (1 - q)`` with ``q = sigmoid(logits)``, computed in log space (exact near q = 1)."""
    x = np.clip(logits, -MAX_LOGIT, MAX_LOGIT)
    log_q = -np.logaddexp(0.0, -x)
    log_one_minus_q = -np.logaddexp(0.0, x)
    result: FloatArray = -np.expm1((draft_tokens + 1) * log_q) / np.exp(log_one_minus_q)
    return result


def _yields(logits: FloatArray, log_uniform: FloatArray, draft_tokens: int) -> FloatArray:
    """Yields of rounds with acceptance logits ``logits``: ``1 + min(n, floor(log U / log q))``, the number of
    leading successes of Bernoulli(q) trials drawn by inverting the geometric law (one uniform per round)."""
    log_q = -np.logaddexp(0.0, -np.clip(logits, -MAX_LOGIT, MAX_LOGIT))
    leading = np.floor(log_uniform / log_q)
    result: FloatArray = 1.0 + np.minimum(float(draft_tokens), leading)
    return result


# ---- statistics ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Layout:
    """Rounds of several sequences laid out round-major: all first rounds (longest sequence first), then all
    second rounds, ...; so one AR(1) step of every sequence is one contiguous slice."""

    lengths: IntArray  # rounds of each sequence, longest first
    order: IntArray  # sequence index (in the caller's order) of each sorted position
    offsets: IntArray  # offsets[k]: where round k's block starts; its size is active[k]
    active: IntArray  # sequences with more than k rounds
    sequence: IntArray  # sorted sequence position of each laid-out round
    previous: IntArray  # for each round past a sequence's first: where the round before it is
    has_previous: npt.NDArray[np.bool_]

    @classmethod
    def of(cls, lengths: IntArray) -> _Layout:
        order = np.argsort(-lengths, kind="stable").astype(np.int64)
        sorted_lengths = lengths[order]
        rounds = np.arange(int(sorted_lengths[0]))
        active = (lengths.size - np.searchsorted(np.sort(lengths), rounds, side="right")).astype(np.int64)
        offsets = np.concatenate([[0], np.cumsum(active)]).astype(np.int64)
        sequence = np.concatenate([np.arange(a) for a in active]).astype(np.int64)
        blocks = np.repeat(np.arange(active.size), active)
        has_previous = blocks > 0
        previous = offsets[np.maximum(blocks - 1, 0)] + sequence
        return cls(sorted_lengths, order, offsets, active, sequence, previous[has_previous], has_previous)

    def place(self, sequences: Sequence[IntArray]) -> FloatArray:
        """The sequences' values in this layout."""
        values = np.empty(int(self.offsets[-1]), dtype=np.float64)
        for row, index in enumerate(self.order):
            values[self.offsets[: self.lengths[row]] + row] = sequences[int(index)]
        return values

    def statistics(self, values: FloatArray) -> YieldStatistics:
        """(pooled mean, mean within-sequence variance, mean lag-1 autocorrelation) of laid-out ``values``."""
        count = self.lengths.size
        means = np.bincount(self.sequence, values, minlength=count) / self.lengths
        deviations = values - means[self.sequence]
        squares = np.bincount(self.sequence, deviations * deviations, minlength=count)
        products = deviations[self.has_previous] * deviations[self.previous]
        lagged = np.bincount(self.sequence[self.has_previous], products, minlength=count)
        two = self.lengths >= 2
        variance = float(np.mean(squares[two] / (self.lengths[two] - 1))) if two.any() else math.nan
        varying = (self.lengths >= 3) & (squares > 1e-12)
        lag1 = float(np.mean(lagged[varying] / squares[varying])) if varying.any() else math.nan
        return float(values.sum() / self.lengths.sum()), variance, lag1


def yield_statistics(sequences: Sequence[Sequence[int]]) -> YieldStatistics:
    """``(mean, var, lag1)`` of sequences of per-round yields, the statistics the fit matches.

    ``mean``: tokens per round over all rounds (pooled); ``var``: the mean, over sequences of at least 2 rounds,
    of each sequence's sample variance (ddof 1; NaN if none has 2 rounds); ``lag1``: the mean, over sequences of
    at least 3 rounds whose yields are not all equal, of each sequence's lag-1 autocorrelation
    ``sum d_k d_(k+1) / sum d_k^2`` (``d``: yields minus the sequence's mean; NaN if no sequence qualifies).
    """
    arrays = _checked_sequences(sequences, draft_tokens=None)
    layout = _Layout.of(np.array([a.size for a in arrays], dtype=np.int64))
    return layout.statistics(layout.place(arrays))


# ---- the fitted model ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class FittedAcceptance:
    """The acceptance model of the module docstring, fitted to logs: draws each new request's base rate and
    then its rounds.

    Promises: every yield :meth:`rounds` returns is in ``[1, draft_tokens + 1]``; its output is a function of
    the generator's state and the arguments only. ``base_rates`` (read-only) are the fitted ``p_i``, one per
    logged sequence; ``log_*`` are the logs' :func:`yield_statistics`, ``model_*`` the fitted model's (simulated
    with the logs' round counts), kept as diagnostics.
    """

    draft_tokens: int
    base_rates: FloatArray
    rho: float
    sigma: float
    log_mean_yield: float = math.nan
    log_yield_var: float = math.nan
    log_lag1_autocorr: float = math.nan
    model_mean_yield: float = math.nan
    model_yield_var: float = math.nan
    model_lag1_autocorr: float = math.nan

    def __post_init__(self) -> None:
        _check_draft_tokens(self.draft_tokens)
        rates = np.array(self.base_rates, dtype=np.float64, copy=True)
        if rates.ndim != 1 or rates.size == 0:
            raise AcceptanceError(f"base_rates: must be a non-empty 1-D array (got shape {rates.shape})")
        bad = np.flatnonzero(~((rates > 0) & (rates < 1)))
        if bad.size:
            i = int(bad[0])
            raise AcceptanceError(f"base_rates[{i}]: must be a probability in (0, 1) (got {rates[i]!r})")
        if not (math.isfinite(self.rho) and abs(self.rho) <= MAX_RHO):
            raise AcceptanceError(f"rho: must be a number from -{MAX_RHO} to {MAX_RHO} (got {self.rho!r})")
        if not (math.isfinite(self.sigma) and 0 <= self.sigma <= MAX_SIGMA):
            raise AcceptanceError(f"sigma: must be a number from 0 to {MAX_SIGMA} (got {self.sigma!r})")
        rates.setflags(write=False)
        object.__setattr__(self, "base_rates", rates)

    def sample_rate(self, rng: np.random.Generator) -> float:
        """A new request's base per-draft acceptance probability: one of ``base_rates``, uniformly."""
        return float(self.base_rates[int(rng.integers(self.base_rates.size))])

    def expected_yield(self, rate: float) -> float:
        """Expected tokens per round of a request with base rate ``rate`` (over the AR(1)'s stationary law)."""
        _check_rate(rate)
        logit = math.log(rate) - math.log1p(-rate)
        return float(_stationary_mean_yield(np.array([logit]), self.sigma, self.draft_tokens)[0])

    def rounds(self, rng: np.random.Generator, tokens: int, rate: float | None = None) -> tuple[int, ...]:
        """Yields of a request's rounds until they sum to at least ``tokens`` (the last may overshoot).

        ``rate``: the request's base rate (default: :meth:`sample_rate` from ``rng``). Rounds are drawn in
        chunks of at most :data:`ROUNDS_CHUNK`, the AR(1) carried from one chunk to the next."""
        if isinstance(tokens, bool) or not isinstance(tokens, int | np.integer) or tokens < 1:
            raise AcceptanceError(f"tokens: must be an integer >= 1 (got {tokens!r})")
        if rate is None:
            rate = self.sample_rate(rng)
        _check_rate(rate)
        logit = math.log(rate) - math.log1p(-rate)
        size = min(int(tokens), ROUNDS_CHUNK)
        deviation: float | None = None  # of the last round's logit from the request's, once there is one
        emitted = 0
        drawn: list[FloatArray] = []
        while True:
            deviations = self._deviations(rng, size, deviation)
            yields = _yields(logit + deviations, np.log1p(-rng.random(size)), self.draft_tokens)
            totals = emitted + np.cumsum(yields)
            done = int(np.searchsorted(totals, tokens))  # the first round reaching tokens, or size
            if done < size:
                drawn.append(yields[: done + 1])
                return tuple(np.concatenate(drawn).astype(np.int64).tolist())
            drawn.append(yields)
            emitted, deviation = int(totals[-1]), float(deviations[-1])

    def _deviations(self, rng: np.random.Generator, size: int, previous: float | None) -> FloatArray:
        """``x_k - mu`` of the next ``size`` rounds after a round whose deviation was ``previous`` (None: the
        first round, drawn from the stationary law): the AR(1) recursion as one convolution."""
        noise = rng.standard_normal(size)
        innovations = self.sigma * math.sqrt(1.0 - self.rho**2) * noise
        start = 0.0
        if previous is None:
            innovations[0] = self.sigma * noise[0]
        else:
            start = previous
        powers = self.rho ** np.arange(size + 1, dtype=np.float64)
        result: FloatArray = powers[1:] * start + np.convolve(innovations, powers[:size])[:size]
        return result


def _check_rate(rate: float) -> None:
    if not (isinstance(rate, float | int | np.floating) and 0 < rate < 1):
        raise AcceptanceError(f"rate: must be a probability in (0, 1) (got {rate!r})")


def _check_draft_tokens(draft_tokens: int) -> None:
    if isinstance(draft_tokens, bool) or not isinstance(draft_tokens, int | np.integer) or draft_tokens < 1:
        raise AcceptanceError(f"draft_tokens: must be an integer >= 1 (got {draft_tokens!r})")


def _checked_sequences(sequences: Sequence[Sequence[int]], draft_tokens: int | None) -> list[IntArray]:
    """Each sequence as an int64 array: non-empty, integers >= 1 (and <= draft_tokens + 1 when given)."""
    if isinstance(sequences, str | bytes) or len(sequences) == 0:
        raise AcceptanceError("sequences: need at least one sequence of yields (got none)")
    arrays = []
    for i, values in enumerate(sequences):
        array = np.asarray(values)
        if array.ndim != 1 or array.size == 0:
            raise AcceptanceError(f"sequences[{i}]: must be a non-empty sequence of integers")
        if array.dtype == np.bool_ or not np.issubdtype(array.dtype, np.integer):
            raise AcceptanceError(f"sequences[{i}]: must hold integers (got {array.dtype})")
        low = np.flatnonzero(array < 1)
        if low.size:
            k = int(low[0])
            raise AcceptanceError(f"sequences[{i}][{k}]: a yield must be >= 1 (got {int(array[k])})")
        high = np.flatnonzero(array > draft_tokens + 1) if draft_tokens is not None else np.array([], dtype=int)
        if high.size:
            assert draft_tokens is not None
            k = int(high[0])
            raise AcceptanceError(f"sequences[{i}][{k}]: a yield of {int(array[k])} is more than "
                                  f"draft_tokens + 1 = {draft_tokens + 1}")
        arrays.append(array.astype(np.int64))
    return arrays


# ---- fitting ---------------------------------------------------------------------------------------------
_NODES, _WEIGHTS = np.polynomial.hermite_e.hermegauss(QUADRATURE_NODES)
_WEIGHTS = _WEIGHTS / math.sqrt(2 * math.pi)  # E[g(Z)], Z standard normal, is g(_NODES) @ _WEIGHTS
_LOGIT_GRID = np.linspace(-SOLVE_LOGIT, SOLVE_LOGIT, 4001)


def _stationary_mean_yield(logits: FloatArray, sigma: float, draft_tokens: int) -> FloatArray:
    """``E[yield]`` when the round's logit is ``N(logits, sigma^2)``, by Gauss-Hermite quadrature."""
    if sigma == 0:
        return _mean_yield_at(logits, draft_tokens)
    values = _mean_yield_at(logits[:, None] + sigma * _NODES[None, :], draft_tokens)
    result: FloatArray = values @ _WEIGHTS
    return result


def _solve_logits(targets: FloatArray, sigma: float, draft_tokens: int, bound: float = SOLVE_LOGIT) -> FloatArray:
    """The logits ``mu`` in ``[-bound, bound]`` with ``E[yield | mu, sigma] = targets`` (a target out of reach
    gives the bound): the increasing function tabulated every 0.01 in logit and inverted by interpolation."""
    grid = _LOGIT_GRID[np.abs(_LOGIT_GRID) <= bound]
    means = np.maximum.accumulate(_stationary_mean_yield(grid, sigma, draft_tokens))
    result: FloatArray = np.interp(targets, means, grid)
    return result


@dataclass
class _Fit:
    """The grid search's state: the layout, the target means, the common random numbers (the same at every
    grid point, so the statistics change smoothly with the parameters), the logs' statistics, and caches of
    the base logits per ``sigma``, the unit AR(1) paths per ``rho`` and the statistics per grid point."""

    layout: _Layout
    draft_tokens: int
    targets: FloatArray  # each sorted sequence's mean yield, as reachable with p in the clip range
    noise: FloatArray  # one standard normal per laid-out round
    log_uniform: FloatArray  # log of one uniform in (0, 1] per laid-out round
    log_var: float
    log_lag1: float
    _logits: dict[float, FloatArray] = field(default_factory=dict)
    _paths: dict[float, FloatArray] = field(default_factory=dict)
    _statistics: dict[tuple[float, float], YieldStatistics] = field(default_factory=dict)

    def logits(self, sigma: float) -> FloatArray:
        if sigma not in self._logits:
            self._logits[sigma] = _solve_logits(self.targets, sigma, self.draft_tokens)
        return self._logits[sigma]

    def paths(self, rho: float) -> FloatArray:
        """A unit-variance AR(1) of every sequence, from the common noise."""
        if rho in self._paths:
            return self._paths[rho]
        paths = np.empty_like(self.noise)
        scale = math.sqrt(1.0 - rho**2)
        offsets, active = self.layout.offsets, self.layout.active
        paths[: active[0]] = self.noise[: active[0]]
        for k in range(1, active.size):
            block = slice(int(offsets[k]), int(offsets[k + 1]))
            before = slice(int(offsets[k - 1]), int(offsets[k - 1] + active[k]))
            paths[block] = rho * paths[before] + scale * self.noise[block]
        if rho in RHO_GRID:
            self._paths[rho] = paths
        return paths

    def statistics(self, rho: float, sigma: float) -> YieldStatistics:
        """The model's :func:`yield_statistics` at ``(rho, sigma)`` with the logs' round counts."""
        if (rho, sigma) not in self._statistics:
            x = self.logits(sigma)[self.layout.sequence] + sigma * self.paths(rho)
            self._statistics[rho, sigma] = self.layout.statistics(_yields(x, self.log_uniform, self.draft_tokens))
        return self._statistics[rho, sigma]

    def loss(self, var: float, lag1: float) -> float:
        """Squared relative error of the variance plus squared error of the autocorrelation in units of
        :data:`LAG1_SCALE` (each only when the logs have it)."""
        loss = 0.0
        if math.isfinite(self.log_var):
            loss += ((var - self.log_var) / max(self.log_var, 1e-9)) ** 2
        if math.isfinite(self.log_lag1) and math.isfinite(lag1):
            loss += ((lag1 - self.log_lag1) / LAG1_SCALE) ** 2
        return loss

    def matched_rho(self, sigma: float) -> tuple[float, float, float]:
        """``(rho, var, lag1)`` at ``sigma`` with the ``rho`` whose lag-1 autocorrelation is the logs' (the lag-1
        autocorrelation rises with ``rho``: bisection over :data:`RHO_GRID`, then linear interpolation between
        the two grid points around it); the grid's end nearest it if it is out of reach. ``rho`` is 0 where it
        does not matter (``sigma = 0``) or the logs have no autocorrelation."""
        if sigma == 0 or not math.isfinite(self.log_lag1):
            _, var, lag1 = self.statistics(0.0, sigma)
            return 0.0, var, lag1
        low, high = 0, len(RHO_GRID) - 1
        for end in (low, high):
            _, var, lag1 = self.statistics(RHO_GRID[end], sigma)
            if (end == low and lag1 >= self.log_lag1) or (end == high and lag1 <= self.log_lag1):
                return RHO_GRID[end], var, lag1
        while high - low > 1:
            middle = (low + high) // 2
            if self.statistics(RHO_GRID[middle], sigma)[2] < self.log_lag1:
                low = middle
            else:
                high = middle
        (_, var_low, lag_low), (_, var_high, lag_high) = (self.statistics(RHO_GRID[i], sigma) for i in (low, high))
        weight = (self.log_lag1 - lag_low) / (lag_high - lag_low) if lag_high > lag_low else 0.0
        rho = RHO_GRID[low] + weight * (RHO_GRID[high] - RHO_GRID[low])
        return rho, var_low + weight * (var_high - var_low), self.log_lag1


def fit_acceptance(sequences: Sequence[Sequence[int]], draft_tokens: int, *, seed: int = 0) -> FittedAcceptance:
    """Fit the module's model to logged yields (one sequence per request, each yield in ``[1, n + 1]``).

    ``draft_tokens``: ``n``, the drafts a round proposes (a yield of ``n + 1`` accepted every one). ``seed``
    fixes the simulation the search compares with the logs. Raises :class:`AcceptanceError` naming the
    argument (and the sequence and round) for empty input, ``n < 1`` or a yield out of range."""
    _check_draft_tokens(draft_tokens)
    n = int(draft_tokens)
    arrays = _checked_sequences(sequences, n)
    layout = _Layout.of(np.array([a.size for a in arrays], dtype=np.int64))
    log_values = layout.place(arrays)
    log_mean, log_var, log_lag1 = layout.statistics(log_values)
    means = np.bincount(layout.sequence, log_values) / layout.lengths
    clip = math.log1p(-RATE_CLIP) - math.log(RATE_CLIP)
    reachable = _mean_yield_at(_solve_logits(means, 0.0, n, clip), n)
    rng = np.random.default_rng(seed)
    size = log_values.size
    fit = _Fit(layout, n, reachable, rng.standard_normal(size), np.log1p(-rng.random(size)), log_var, log_lag1)
    rho, sigma = _search(fit)
    logits = fit.logits(sigma)
    rates = np.empty_like(logits)
    rates[layout.order] = 1.0 / (1.0 + np.exp(-logits))  # back to the caller's sequence order
    model_mean, model_var, model_lag1 = fit.statistics(rho, sigma)
    return FittedAcceptance(
        draft_tokens=n, base_rates=np.clip(rates, 1e-12, 1 - 1e-12), rho=rho, sigma=sigma,
        log_mean_yield=log_mean, log_yield_var=log_var, log_lag1_autocorr=log_lag1,
        model_mean_yield=model_mean, model_yield_var=model_var, model_lag1_autocorr=model_lag1,
    )


def _search(fit: _Fit) -> tuple[float, float]:
    """``(rho, sigma)``: for each ``sigma`` the ``rho`` that matches the logs' autocorrelation, and the
    ``sigma`` whose variance then comes nearest (the smallest loss; ties: the smaller ``sigma``), first on
    :data:`SIGMA_GRID`, then every :data:`SIGMA_FINE_STEP` around the best."""
    best = _best_sigma(fit, SIGMA_GRID)
    step = SIGMA_GRID[1] - SIGMA_GRID[0]
    count = round(step / SIGMA_FINE_STEP)
    fine = [round(best[1] + SIGMA_FINE_STEP * i, 6) for i in range(-count + 1, count)]
    best = _best_sigma(fit, [s for s in fine if SIGMA_GRID[0] <= s <= SIGMA_GRID[-1]])
    return best[2], best[1]


def _best_sigma(fit: _Fit, sigmas: Sequence[float]) -> tuple[float, float, float]:
    """``(loss, sigma, rho)`` of the best of ``sigmas``, each with its matched ``rho``."""
    best: tuple[float, float, float] | None = None
    for sigma in sigmas:
        rho, var, lag1 = fit.matched_rho(float(sigma))
        loss = fit.loss(var, lag1)
        if best is None or loss < best[0] - 1e-12:
            best = (loss, float(sigma), rho)
    assert best is not None
    return best
