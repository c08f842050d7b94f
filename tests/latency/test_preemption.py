"""The preemption cost model (seed 003 §1.3) against values computed by hand from its documented formulas."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import yaml

from semsched.latency import load_profile
from semsched.latency.preemption import (
    KNOWN_SHAPES,
    PCIE4_X16_BYTES_PER_S,
    ModelShape,
    PreemptionCostError,
    PreemptionCostModel,
    PreemptionStrategy,
)

PROFILE = "a100-qwen1.5-4b"


def _coefficients() -> dict[str, float]:
    path = Path(__file__).parents[2] / "semsched" / "latency" / "profiles" / f"{PROFILE}.yaml"
    return {k: float(v) for k, v in yaml.safe_load(path.read_text())["coefficients"].items()}


def test_kv_bytes_per_token_from_the_shape() -> None:
    # K and V x 80 layers x 8 KV heads x 128 dims x 2 bytes (Llama 3 70B, grouped-query attention)
    assert KNOWN_SHAPES["llama-3-70b"].kv_bytes_per_token == 2 * 80 * 8 * 128 * 2 == 327_680
    assert ModelShape(num_layers=2, num_kv_heads=3, head_dim=5, dtype_bytes=4).kv_bytes_per_token == 240


def test_swap_over_the_link_is_the_kv_cache_moved_both_ways() -> None:
    model = PreemptionCostModel(load_profile(PROFILE), KNOWN_SHAPES["llama-3-70b"], PCIE4_X16_BYTES_PER_S)
    # 512 prompt + 10 generated tokens: 522 x 327,680 bytes out and back at 25 GB/s
    assert model.swap_s(522) == pytest.approx(2 * 522 * 327_680 / 25e9, rel=1e-12)
    assert model.swap_s(0) == 0.0


def test_without_a_shape_the_profile_prices_each_direction() -> None:
    beta = _coefficients()["beta"]
    model = PreemptionCostModel(load_profile(PROFILE))
    assert model.swap_s(1000) == pytest.approx(2 * beta * 1000, rel=1e-12)


def test_recompute_and_drop_follow_the_latency_model() -> None:
    c = _coefficients()
    model = PreemptionCostModel(load_profile(PROFILE), drop_penalty_s=2.5)
    prompt, generated = 2048, 50
    context = prompt + generated
    assert model.recompute_s(context) == pytest.approx(c["alpha1"] * context**2 + c["alpha2"] * context, rel=1e-12)
    lost = c["alpha1"] * prompt**2 + c["alpha2"] * prompt + sum(
        c["gamma1"] * (prompt + i) + c["gamma2"] for i in range(generated))
    assert model.drop_s(prompt, generated) == pytest.approx(lost + 2.5, rel=1e-12)
    assert model.recompute_s(0) == 0.0 and model.drop_s(0, 0) == 2.5


def test_cheapest_strategy_and_ties() -> None:
    latency = load_profile(PROFILE)
    fast_link = PreemptionCostModel(latency, KNOWN_SHAPES["qwen1.5-4b"], 1e15)
    slow_link = PreemptionCostModel(latency, KNOWN_SHAPES["qwen1.5-4b"], 1e6)
    assert fast_link.cheapest(1000, 10)[0] is PreemptionStrategy.SWAP
    strategy, costs = slow_link.cheapest(1000, 10)
    assert strategy is PreemptionStrategy.RECOMPUTE and costs.recompute_s < costs.swap_s
    # DROP only when allowed, and then only when it is cheaper than the work it throws away plus its penalty
    allowed = list(PreemptionStrategy)
    assert slow_link.cheapest(1000, 10, allowed)[0] is PreemptionStrategy.RECOMPUTE
    # an empty request: every strategy costs 0, so the first allowed wins
    assert fast_link.cheapest(0, 0, [PreemptionStrategy.RECOMPUTE, PreemptionStrategy.SWAP])[0] is \
        PreemptionStrategy.RECOMPUTE
    assert math.isclose(costs.of(PreemptionStrategy.DROP), slow_link.drop_s(1000, 10))


def test_numpy_integers_are_token_counts() -> None:
    model = PreemptionCostModel(load_profile(PROFILE))
    assert model.swap_s(np.int64(10)) == model.swap_s(10)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: ModelShape(num_layers=0, num_kv_heads=8, head_dim=128), "num_layers must be an integer from 1"),
        (lambda: ModelShape(num_layers=80, num_kv_heads=8.5, head_dim=128), "num_kv_heads"),  # type: ignore[arg-type]
        (lambda: ModelShape(num_layers=80, num_kv_heads=8, head_dim=128, dtype_bytes=True), "dtype_bytes"),
        (lambda: PreemptionCostModel(load_profile(PROFILE), KNOWN_SHAPES["llama-3-70b"]), "give both"),
        (lambda: PreemptionCostModel(load_profile(PROFILE), KNOWN_SHAPES["llama-3-70b"], float("inf")),
         "link_bytes_per_s must be a number from 1e6"),
        (lambda: PreemptionCostModel(load_profile(PROFILE), drop_penalty_s=-1), "drop_penalty_s"),
        (lambda: PreemptionCostModel(load_profile(PROFILE)).swap_s(-1),
         "context_tokens must be an integer from 0"),
        (lambda: PreemptionCostModel(load_profile(PROFILE)).drop_s(10, 2**40), "generated_tokens"),
        (lambda: PreemptionCostModel(load_profile(PROFILE)).costs(1.5, 0), "prompt_tokens"),  # type: ignore[arg-type]
        (lambda: PreemptionCostModel(load_profile(PROFILE)).cheapest(1, 1, []), "allowed"),
    ],
)
def test_bad_input_names_the_field(build: object, message: str) -> None:
    with pytest.raises(PreemptionCostError, match=message):
        build()  # type: ignore[operator]
