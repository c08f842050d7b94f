"""A simulated engine whose real step times differ from the profile its scheduler estimates with.

A latency profile is what the scheduler (and its policy's estimator) believes; a real engine's steps vary from
one to the next (noise) and slowly over time (drift: throttling, co-tenants). :class:`GroundTruth` describes
both, and :meth:`GroundTruth.sampler` gives the per-instance :class:`TruthSampler` that a
:class:`~semsched.sim.executor.ModelExecutor` multiplies each step's engine time by. The sampler owns its
seeded generator, so a run is reproducible and two instances draw independent noise.

Noise, with ``noise = n``:

* ``"uniform"`` (the default): the factor is drawn from U(1 − n, 1 + n): bounded, mean 1, mean absolute
  deviation n/2. With n = 0.10 even a perfect estimator has a MAPE of about 5.0 %.
* ``"lognormal"``: the factor is exp(n·Z − n²/2), Z standard normal: mean 1, standard deviation about n, mean
  absolute deviation about 0.8·n. With n = 0.10 a perfect estimator's MAPE is about 8 %.

Drift is any object with ``factor_at(time_s)``: :class:`LinearDrift`, :class:`SineDrift`, or a measured
:class:`~semsched.sim.speed.SpeedTrace`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, Protocol

import numpy as np

NoiseDistribution = Literal["uniform", "lognormal"]


class Drift(Protocol):
    """A slow multiplicative change of the engine's speed: the factor in force at ``time_s``."""

    def factor_at(self, time_s: float) -> float: ...


def _check_positive(name: str, value: float) -> None:
    if isinstance(value, bool) or not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name}: must be a finite number > 0 (got {value!r})")


@dataclass(frozen=True)
class LinearDrift:
    """The factor moves linearly from ``start`` at time 0 to ``end`` at ``duration_s``, and stays there."""

    end: float
    duration_s: float
    start: float = 1.0

    def __post_init__(self) -> None:
        for name in ("end", "duration_s", "start"):
            _check_positive(name, getattr(self, name))

    def factor_at(self, time_s: float) -> float:
        progress = min(max(time_s / self.duration_s, 0.0), 1.0)
        return self.start + (self.end - self.start) * progress


@dataclass(frozen=True)
class SineDrift:
    """The factor ``1 + amplitude·sin(2π·t/period_s)``; ``amplitude`` in [0, 1)."""

    amplitude: float
    period_s: float

    def __post_init__(self) -> None:
        if isinstance(self.amplitude, bool) or not 0.0 <= self.amplitude < 1.0:
            raise ValueError(f"amplitude: must be in [0, 1) (got {self.amplitude!r})")
        _check_positive("period_s", self.period_s)

    def factor_at(self, time_s: float) -> float:
        return 1.0 + self.amplitude * math.sin(2.0 * math.pi * time_s / self.period_s)


@dataclass(frozen=True)
class GroundTruth:
    """How real step times differ from the profile: ``noise`` (relative; see the module docstring for what it
    means under each ``distribution``), ``drift`` (None: none) and the ``seed`` of the noise."""

    noise: float = 0.0
    distribution: NoiseDistribution = "uniform"
    drift: Drift | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.noise, bool) or not (math.isfinite(self.noise) and 0.0 <= self.noise < 1.0):
            raise ValueError(f"noise: must be in [0, 1) (got {self.noise!r})")
        if self.distribution not in ("uniform", "lognormal"):
            raise ValueError(f"distribution: must be 'uniform' or 'lognormal' (got {self.distribution!r})")
        if self.drift is not None and not callable(getattr(self.drift, "factor_at", None)):
            raise TypeError(f"drift: expected an object with factor_at(time_s), got {type(self.drift).__name__}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"seed: must be an integer >= 0 (got {self.seed!r})")

    def sampler(self, stream: int = 0) -> TruthSampler:
        """A fresh sampler for one instance; ``stream`` (its index) gives each instance its own noise."""
        return TruthSampler(self, stream)


class TruthSampler:
    """Draws the real step times of one engine: its own generator, seeded from ``(truth.seed, stream)``."""

    def __init__(self, truth: GroundTruth, stream: int = 0) -> None:
        if stream < 0:
            raise ValueError(f"stream: must be >= 0 (got {stream!r})")
        self.truth = truth
        self._rng = np.random.default_rng([truth.seed, stream])

    def factor(self, start_s: float) -> float:
        """The multiplier of a step that starts at ``start_s``: the drift then, times one noise draw."""
        truth = self.truth
        factor = 1.0 if truth.drift is None else float(truth.drift.factor_at(start_s))
        if truth.noise:
            if truth.distribution == "uniform":
                factor *= float(self._rng.uniform(1.0 - truth.noise, 1.0 + truth.noise))
            else:
                factor *= math.exp(truth.noise * float(self._rng.standard_normal()) - truth.noise**2 / 2.0)
        return factor

    def real_time_s(self, model_s: float, start_s: float) -> float:
        """How long a step priced at ``model_s`` really takes when it starts at ``start_s``."""
        return model_s * self.factor(start_s)
