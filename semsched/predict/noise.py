"""Inaccurate predictions on purpose (seed 002, Fig. 11): each predicted distribution mixed with a uniform one.

SageSched tests how its scheduling copes with wrong cost distributions by "merging a uniform distribution to the
original distribution following a weight ratio of 1:4". :class:`UniformMix` wraps any online predictor
(:mod:`semsched.predict.online`) and does that to every distribution it gives: with weight ``w`` (the paper's
1:4 is ``w = 0.2``), ``P'(L = n) = (1 - w) P(L = n) + w / K`` for every length ``n`` of the uniform support, the
``K`` lengths ``1, 1 + step, ...`` up to ``max_tokens`` (``step`` keeps ``K`` at most ``points``; a length on both
supports gets both shares). It learns exactly what the wrapped predictor learns.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from semsched.core.errors import SemschedError
from semsched.core.request import LengthDistribution
from semsched.predict.online import OnlineLengthPredictor, Prompts

DEFAULT_MAX_TOKENS = 2048
DEFAULT_POINTS = 64


class NoiseError(SemschedError):
    """A noise setting is out of range; the message names it and the limit."""


class UniformMix:
    """``predictor``'s distributions mixed with a uniform one over ``1..max_tokens`` with ``weight`` (module
    docstring)."""

    def __init__(self, predictor: OnlineLengthPredictor, weight: float, *, max_tokens: int = DEFAULT_MAX_TOKENS,
                 points: int = DEFAULT_POINTS) -> None:
        if isinstance(weight, bool) or not isinstance(weight, int | float) or not math.isfinite(weight) \
                or not 0.0 <= weight <= 1.0:
            raise NoiseError(f"uniform_mix: must be a number from 0 to 1 (got {weight!r})")
        for name, value in (("max_tokens", max_tokens), ("points", points)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise NoiseError(f"{name}: must be an integer >= 1 (got {value!r})")
        self.predictor, self.weight = predictor, float(weight)
        step = max(1, math.ceil(max_tokens / points))
        self._uniform = np.arange(1, max_tokens + 1, step, dtype=np.int64)

    @property
    def name(self) -> str:
        return f"{self.predictor.name}+uniform({self.weight:g})"

    def predict(self, prompts: Prompts) -> list[LengthDistribution]:
        return [self._mix(d) for d in self.predictor.predict(prompts)]

    def observe(self, prompts: Prompts, output_tokens: npt.NDArray[np.int64]) -> None:
        self.predictor.observe(prompts, output_tokens)

    def _mix(self, distribution: LengthDistribution) -> LengthDistribution:
        if self.weight == 0.0:
            return distribution
        lengths = np.concatenate([np.asarray(distribution.lengths, dtype=np.int64), self._uniform])
        probs = np.concatenate([(1.0 - self.weight) * np.asarray(distribution.probs, dtype=np.float64),
                                np.full(self._uniform.size, self.weight / self._uniform.size)])
        support, owner = np.unique(lengths, return_inverse=True)
        mass = np.asarray(np.bincount(owner, weights=probs, minlength=support.size), dtype=np.float64)
        mass = mass / mass.sum()
        return LengthDistribution(tuple(int(n) for n in support), tuple(float(p) for p in mass))
