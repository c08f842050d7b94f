"""PROSERVE's online correction of the batch latency estimator (seed 001, §4.1).

The offline model (:class:`~semsched.latency.batch.BatchLatencyModel`, eq. 4-7) is fitted once; the engine it
predicts for drifts (thermal throttling, other tenants, a different software stack). PROSERVE corrects it online
with one multiplicative factor: after each batch, ``β_{i+1} = θ·β_i + (1−θ)·mean(T_real(B)/T_pd(B))`` over the
batches of a sliding window of engine time, then ``T_pd ← β·T_pd`` (it reports a MAPE of about 4.5 %).

:class:`CorrectedEstimator` is that estimator: the base model's terms scaled by ``beta``, fed measured step times
through :meth:`CorrectedEstimator.observe` (a policy does it from :meth:`semsched.core.policy.Policy.on_step`).
:func:`correction_mape` replays a step sequence against a ground truth (noise and drift, e.g.
:class:`semsched.sim.ground_truth.GroundTruth`) and measures the estimator as the paper does.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

import numpy as np

from semsched.latency.base import LatencyModel
from semsched.latency.batch import BatchLatencyModel

CorrectionMode = Literal["total", "paper"]
DEFAULT_REPLAY_STEPS = 5000
"""Steps :func:`correction_mape` replays when it is given no step sequence."""


@dataclass(frozen=True, slots=True)
class CorrectionConfig:
    """How :class:`CorrectedEstimator` corrects its base model.

    * ``momentum`` θ in [0, 1): weight of the previous factor in each update (0: the window's mean alone).
    * ``window_s`` > 0: seconds of engine time whose batches are averaged (by their ``now_s``).
    * ``enabled``: False keeps ``beta`` at 1 (the estimator is the base model; errors are still measured).
    * ``mode``: ``"total"`` (the default) treats β as the whole correction applied to the base model:
      ``β ← θ·β + (1−θ)·mean(T_real/T_base)``, a low-pass filter of the measured ratio, which converges to the
      engine's factor without overshoot. ``"paper"`` is §4.1 read literally: the ratios are taken against the
      corrected prediction in force (``T_real/T_pd``), and each update multiplies the prediction by the new β
      (``T_pd ← β·T_pd``), so the factor compounds. With a window of one step it overshoots and oscillates
      around the engine's factor before it settles; with a window of several steps the ratios in it were taken
      against different predictions, the compounding feeds on old errors, and it diverges (on a constant
      factor of 1.3 with the defaults, past 1e20 within 1,000 steps). It is kept to show why ``"total"`` is the
      default.
    """

    momentum: float = 0.9
    window_s: float = 1.0
    enabled: bool = True
    mode: CorrectionMode = "total"

    def __post_init__(self) -> None:
        momentum, window_s = self.momentum, self.window_s
        if isinstance(momentum, bool) or not isinstance(momentum, int | float) or not 0.0 <= momentum < 1.0:
            raise ValueError(f"momentum: must be in [0, 1) (got {momentum!r})")
        if isinstance(window_s, bool) or not isinstance(window_s, int | float) or not (
            math.isfinite(window_s) and window_s > 0
        ):
            raise ValueError(f"window_s: must be a finite number of seconds > 0 (got {window_s!r})")
        if not isinstance(self.enabled, bool):
            raise ValueError(f"enabled: must be True or False (got {self.enabled!r})")
        if self.mode not in ("total", "paper"):
            raise ValueError(f"mode: must be 'total' or 'paper' (got {self.mode!r})")


@dataclass(frozen=True, slots=True)
class CorrectionStats:
    """What an estimator has seen. ``num_steps`` counts the observed steps (``num_ignored`` the empty ones and
    those with a measurement, or a base prediction, that is not a finite number > 0). The MAPEs are fractions
    (0.045 is 4.5 %), NaN before the first step: ``mape_corrected`` of the prediction made before each step was
    observed (with the ``beta`` then in force), ``mape_uncorrected`` of the base model. ``beta``: the final
    factor."""

    num_steps: int
    num_ignored: int
    mape_corrected: float
    mape_uncorrected: float
    beta: float


class CorrectedEstimator:
    """Step-time estimates of ``model`` (PROSERVE eq. 4-7) times a correction factor ``beta`` learnt online.

    ``beta`` starts at 1 and stays there when ``config.enabled`` is False. Every estimate is ``beta`` times the
    base model's term: ``step_time_s`` (eq. 7), ``chunk_time_s`` (eq. 5, with ``d_p``), ``decode_time_s``
    (one decode's ``a_d·lkv + b_d``) and ``t_c``. :meth:`observe` costs O(1) amortised (a deque of the window's
    ratios with their running sum).
    """

    def __init__(self, model: BatchLatencyModel, config: CorrectionConfig = CorrectionConfig()) -> None:
        if not isinstance(model, BatchLatencyModel):
            raise TypeError(f"model: expected a BatchLatencyModel, got {type(model).__name__}")
        if not isinstance(config, CorrectionConfig):
            raise TypeError(f"config: expected a CorrectionConfig, got {type(config).__name__}")
        self.model = model
        self.config = config
        self._beta = 1.0  # the factor applied to the base model
        self._state = 1.0  # the recursion's β (equal to _beta in "total" mode)
        self._window: deque[tuple[float, float]] = deque()  # (now_s, ratio), oldest first
        self._window_sum = 0.0
        self._evicted = 0  # evictions since the running sum was last recomputed
        self._num_steps = 0
        self._num_ignored = 0
        self._ape_corrected_sum = 0.0
        self._ape_uncorrected_sum = 0.0

    # ---- estimates -------------------------------------------------------------------------------------------
    @property
    def beta(self) -> float:
        """The correction factor applied to the base model now."""
        return self._beta

    @property
    def t_c(self) -> float:
        """The corrected constant overhead of a non-empty step."""
        return self._beta * self.model.config.t_c

    def chunk_time_s(self, query_tokens: int, cached_tokens: int) -> float:
        """Corrected eq. 5 for one prefill chunk of ``query_tokens`` on top of ``cached_tokens`` (with ``d_p``)."""
        return self._beta * self.model.chunk_time_s(query_tokens, cached_tokens)

    def decode_time_s(self, context_tokens: int) -> float:
        """Corrected cost of one decode on ``context_tokens`` cached tokens: ``beta·(a_d·lkv + b_d)``."""
        config = self.model.config
        return self._beta * (config.a_d * context_tokens + config.b_d)

    def decode_times_s(self, context_tokens: np.ndarray) -> np.ndarray:
        """:meth:`decode_time_s` of each of ``context_tokens`` (integers), the same float operations element by
        element."""
        config = self.model.config
        return self._beta * (config.a_d * context_tokens + config.b_d)

    def step_time_s(
        self, prefill: Sequence[tuple[int, int]], num_decode: int, decode_context_tokens: int
    ) -> float:
        """Corrected eq. 7 for a whole step (0 for an empty one)."""
        return self._beta * self.model.step_time_s(prefill, num_decode, decode_context_tokens)

    # ---- online update ---------------------------------------------------------------------------------------
    def observe(
        self,
        prefill: Sequence[tuple[int, int]],
        num_decode: int,
        decode_context_tokens: int,
        real_s: float,
        now_s: float,
    ) -> None:
        """A step of this composition took ``real_s`` seconds and ended at ``now_s`` (engine time, never
        decreasing): its error is recorded, its ratio joins the window, and ``beta`` is updated. Empty steps and
        measurements that are not a finite number > 0 are counted as ignored and change nothing."""
        base_s = self.model.step_time_s(prefill, num_decode, decode_context_tokens)
        if not (base_s > 0 and math.isfinite(base_s) and real_s > 0 and math.isfinite(real_s)
                and math.isfinite(now_s)):
            self._num_ignored += 1
            return
        predicted_s = self._beta * base_s
        self._num_steps += 1
        self._ape_corrected_sum += abs(predicted_s - real_s) / real_s
        self._ape_uncorrected_sum += abs(base_s - real_s) / real_s
        if not self.config.enabled:
            return
        paper = self.config.mode == "paper"
        self._push(now_s, real_s / predicted_s if paper else real_s / base_s)
        theta = self.config.momentum
        self._state = theta * self._state + (1.0 - theta) * (self._window_sum / len(self._window))
        self._beta = self._beta * self._state if paper else self._state

    def _push(self, now_s: float, ratio: float) -> None:
        window = self._window
        window.append((now_s, ratio))
        self._window_sum += ratio
        horizon_s = now_s - self.config.window_s
        while window[0][0] <= horizon_s:  # the step just pushed always stays
            self._window_sum -= window.popleft()[1]
            self._evicted += 1
        if self._evicted > len(window) + 64:  # bound the running sum's rounding drift, O(1) amortised
            self._window_sum = math.fsum(r for _, r in window)
            self._evicted = 0

    def stats(self) -> CorrectionStats:
        """Counts, the MAPEs with and without correction, and the final ``beta``."""
        count = self._num_steps
        return CorrectionStats(
            num_steps=count,
            num_ignored=self._num_ignored,
            mape_corrected=self._ape_corrected_sum / count if count else math.nan,
            mape_uncorrected=self._ape_uncorrected_sum / count if count else math.nan,
            beta=self._beta,
        )


# ---- measuring the estimator -----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class StepShape:
    """One step's composition: ``(lq, lkv)`` per prefill chunk, and the decodes as count and summed context."""

    prefill: tuple[tuple[int, int], ...]
    num_decode: int
    decode_context_tokens: int


class StepTruth(Protocol):
    """The ground truth a replay measures against: how long a step the base model prices at ``model_s`` really
    takes when it starts at ``start_s`` (:class:`semsched.sim.ground_truth.TruthSampler` is one)."""

    def real_time_s(self, model_s: float, start_s: float) -> float: ...


def correction_mape(
    model: LatencyModel,
    steps: Iterable[StepShape] | None = None,
    *,
    truth: StepTruth | None = None,
    noise: float = 0.0,
    drift: float = 0.0,
    seed: int = 0,
    num_steps: int = DEFAULT_REPLAY_STEPS,
    config: CorrectionConfig = CorrectionConfig(),
) -> CorrectionStats:
    """Measure the estimator as PROSERVE does: replay ``steps`` back to back from time 0 on an engine whose real
    step times differ from ``model`` (a :class:`~semsched.latency.batch.BatchLatencyModel`), observing each step
    after predicting it; returns the estimator's :class:`CorrectionStats` (MAPE with and without correction).

    ``steps``: a step sequence, e.g. recorded from a run through :meth:`~semsched.core.policy.Policy.on_step`;
    None: ``num_steps`` synthetic steps drawn from ``seed`` (:func:`synthetic_steps`). The ground truth is
    ``truth`` (e.g. ``semsched.sim.ground_truth.GroundTruth(...).sampler()``, the simulator's own), or else the
    built-in one: each step's model time times U(1 − ``noise``, 1 + ``noise``) (drawn from ``seed``) times a
    drift factor growing linearly from 1 at the first step to 1 + ``drift`` at the last. Empty steps are ignored.
    """
    if not isinstance(model, BatchLatencyModel):
        raise TypeError(f"model: expected a BatchLatencyModel (a batch profile), got {type(model).__name__}")
    if truth is not None and (noise or drift):
        raise ValueError("noise and drift describe the built-in ground truth: give them or truth, not both")
    if not (math.isfinite(noise) and 0.0 <= noise < 1.0):
        raise ValueError(f"noise: must be in [0, 1) (got {noise!r})")
    if not (math.isfinite(drift) and drift > -1.0):
        raise ValueError(f"drift: must be a finite number > -1 (got {drift!r})")
    shapes = list(synthetic_steps(num_steps, seed) if steps is None else steps)
    rng = np.random.default_rng(seed)
    estimator = CorrectedEstimator(model, config)
    now_s = 0.0
    for index, step in enumerate(shapes):
        base_s = model.step_time_s(step.prefill, step.num_decode, step.decode_context_tokens)
        if base_s <= 0:
            estimator.observe(step.prefill, step.num_decode, step.decode_context_tokens, 0.0, now_s)
            continue
        if truth is not None:
            real_s = truth.real_time_s(base_s, now_s)
        else:
            trend = 1.0 + drift * index / max(len(shapes) - 1, 1)
            real_s = base_s * trend * (float(rng.uniform(1.0 - noise, 1.0 + noise)) if noise else 1.0)
        now_s += real_s
        estimator.observe(step.prefill, step.num_decode, step.decode_context_tokens, real_s, now_s)
    return estimator.stats()


def synthetic_steps(num_steps: int, seed: int = 0) -> list[StepShape]:
    """A made-up step sequence: 1-64 decodes of 50-2,000 tokens of context each, and in every fourth step one
    prefill chunk of 16-511 tokens on 0-1,023 cached ones."""
    if num_steps < 0:
        raise ValueError(f"num_steps: must be >= 0 (got {num_steps!r})")
    rng = np.random.default_rng(seed)
    steps = []
    for index in range(num_steps):
        num_decode = int(rng.integers(1, 65))
        context = num_decode * int(rng.integers(50, 2001))
        prefill = ((int(rng.integers(16, 512)), int(rng.integers(0, 1024))),) if index % 4 == 0 else ()
        steps.append(StepShape(prefill, num_decode, context))
    return steps
