"""UniformMix: Fig. 11's noisy predictions (a predicted distribution mixed with a uniform one)."""

from __future__ import annotations

import numpy as np
import pytest

from semsched.core.request import LengthDistribution
from semsched.predict.noise import NoiseError, UniformMix
from semsched.predict.online import Prompts


class _Fixed:
    """Predicts one distribution for every prompt; records what it observes."""

    name = "fixed"

    def __init__(self, distribution: LengthDistribution) -> None:
        self.distribution = distribution
        self.observed: list[int] = []

    def predict(self, prompts: Prompts) -> list[LengthDistribution]:
        return [self.distribution] * len(prompts)

    def observe(self, prompts: Prompts, output_tokens: np.ndarray) -> None:
        self.observed.extend(int(n) for n in output_tokens)


def _prompts(n: int) -> Prompts:
    return Prompts(tuple(f"p{i}" for i in range(n)), np.full(n, 10, dtype=np.int64),
                   np.eye(n, 4, dtype=np.float32))


def test_the_mixture_keeps_the_weights_of_both_parts() -> None:
    inner = LengthDistribution((10, 300), (0.5, 0.5))
    mixed = UniformMix(_Fixed(inner), 0.2, max_tokens=100, points=100).predict(_prompts(2))
    assert len(mixed) == 2
    probs = dict(zip(mixed[0].lengths, mixed[0].probs, strict=True))
    assert probs[300] == pytest.approx(0.4)  # only the prediction's share
    assert probs[10] == pytest.approx(0.4 + 0.2 / 100)  # on both supports: both shares
    assert probs[55] == pytest.approx(0.2 / 100)
    uniform_mean = (1 + 100) / 2
    assert mixed[0].mean == pytest.approx(0.8 * inner.mean + 0.2 * uniform_mean)


def test_zero_weight_changes_nothing_and_learning_passes_through() -> None:
    inner = _Fixed(LengthDistribution.point(42))
    noisy = UniformMix(inner, 0.0)
    assert noisy.predict(_prompts(1)) == [LengthDistribution.point(42)]
    noisy.observe(_prompts(2), np.array([7, 9], dtype=np.int64))
    assert inner.observed == [7, 9]


@pytest.mark.parametrize("weight", [-0.1, 1.5, float("nan"), True])
def test_a_weight_outside_0_to_1_is_refused_by_name(weight: float) -> None:
    with pytest.raises(NoiseError, match="uniform_mix"):
        UniformMix(_Fixed(LengthDistribution.point(1)), weight)
