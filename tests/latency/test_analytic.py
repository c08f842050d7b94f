"""Tests for semsched/latency/analytic.py."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from semsched.latency.analytic import (
    AnalyticConfig,
    AnalyticLatencyModel,
    cache_or_recompute,
    optimal_saved_decode_tokens,
    partial_save_cost_s,
    should_save_prefill_kv,
)

# Appendix B, A100 / Qwen1.5-7B, as printed.
A100_7B = AnalyticConfig(alpha1=5.135e-7, alpha2=1.481e-4, gamma1=1.349e-8, gamma2=1.330e-2, beta=1.0e-4)


def make_model(config: AnalyticConfig = A100_7B) -> AnalyticLatencyModel:
    return AnalyticLatencyModel(config=config, name="test")


def test_empty_step_costs_nothing() -> None:
    assert make_model().step_time_s([], 0, 0) == 0.0


def test_single_prefill_matches_paper_formula() -> None:
    expected_s = 5.135e-7 * 100**2 + 1.481e-4 * 100
    assert make_model().step_time_s([(100, 0)], 0, 0) == pytest.approx(expected_s, rel=1e-12)


def test_chunk_on_cached_prefix_costs_the_increment() -> None:
    # 30 new tokens on 70 cached: alpha1 * (100^2 - 70^2) + alpha2 * 30.
    expected_s = 5.135e-7 * (100**2 - 70**2) + 1.481e-4 * 30
    assert make_model().step_time_s([(30, 70)], 0, 0) == pytest.approx(expected_s, rel=1e-12)


def test_decode_step_pays_gamma2_once() -> None:
    # 3 decodes with contexts 10, 20, 30: gamma1 * 60 + gamma2 (weights read once per step).
    expected_s = 1.349e-8 * 60 + 1.330e-2
    assert make_model().step_time_s([], 3, 60) == pytest.approx(expected_s, rel=1e-12)


def test_mixed_step_is_sum_of_parts() -> None:
    model = make_model()
    prefill_s = 5.135e-7 * 50**2 + 1.481e-4 * 50
    decode_s = 1.349e-8 * 500 + 1.330e-2
    assert model.step_time_s([(50, 0)], 2, 500) == pytest.approx(prefill_s + decode_s, rel=1e-12)


def test_swap_is_beta_per_token() -> None:
    assert make_model().swap_time_s(1000) == pytest.approx(1.0e-4 * 1000, rel=1e-12)


@given(st.lists(st.integers(min_value=1, max_value=600), min_size=1, max_size=8))
def test_chunks_of_one_prompt_add_up_to_whole_prompt(chunk_sizes: list[int]) -> None:
    model = make_model()
    cached = 0
    total_s = 0.0
    for size in chunk_sizes:
        total_s += model.step_time_s([(size, cached)], 0, 0)
        cached += size
    assert total_s == pytest.approx(model.step_time_s([(cached, 0)], 0, 0), rel=1e-12)


@settings(max_examples=300)
@given(
    num_decode=st.integers(min_value=0, max_value=512),
    mean_context=st.integers(min_value=0, max_value=40_000),
    num_steps=st.integers(min_value=0, max_value=64),
    gamma1=st.floats(min_value=0.0, max_value=1e-3),
    gamma2=st.floats(min_value=0.0, max_value=1.0),
)
def test_decode_times_bitwise_equal_to_step_time(
    num_decode: int, mean_context: int, num_steps: int, gamma1: float, gamma2: float
) -> None:
    config = AnalyticConfig(alpha1=1e-9, alpha2=1e-4, gamma1=gamma1, gamma2=gamma2, beta=1e-4)
    model = make_model(config)
    start = num_decode * mean_context
    fast = model.decode_times_s(num_decode, start, num_steps)
    slow = [model.step_time_s([], num_decode, start + i * num_decode) for i in range(num_steps)]
    assert fast.dtype == np.float64
    assert fast.shape == (num_steps,)
    assert fast.tobytes() == np.array(slow, dtype=np.float64).tobytes()


@settings(max_examples=200, deadline=None)
@given(
    num_decode=st.integers(min_value=1, max_value=512),
    context=st.integers(min_value=0, max_value=2**40),
    gamma1=st.floats(min_value=0.0, max_value=1e-3),
    gamma2=st.floats(min_value=0.0, max_value=1.0),
)
def test_decode_time_is_step_time_s_decode_part(
    num_decode: int, context: int, gamma1: float, gamma2: float
) -> None:
    model = make_model(AnalyticConfig(alpha1=1e-9, alpha2=1e-4, gamma1=gamma1, gamma2=gamma2, beta=1e-4))
    assert model.decode_time_s(context).hex() == model.step_time_s([], num_decode, context).hex()


def test_rejects_negative_and_inconsistent_inputs() -> None:
    model = make_model()
    with pytest.raises(ValueError):
        model.step_time_s([(-1, 0)], 0, 0)
    with pytest.raises(ValueError):
        model.step_time_s([], 0, 5)
    with pytest.raises(ValueError):
        model.decode_times_s(2, 10, -1)
    with pytest.raises(ValueError):
        AnalyticConfig(alpha1=-1.0, alpha2=0.0, gamma1=0.0, gamma2=0.0, beta=0.0)


def test_eq3_threshold() -> None:
    # beta * n < alpha1 * n^2 + alpha2 * n  <=>  beta < alpha1 * n + alpha2.
    config = AnalyticConfig(alpha1=1e-6, alpha2=1e-4, gamma1=1e-8, gamma2=1e-2, beta=2e-4)
    # Break-even at n = (beta - alpha2) / alpha1 = 100: saving wins only above it.
    assert not should_save_prefill_kv(config, 50)
    assert should_save_prefill_kv(config, 150)


CONFIGS = st.builds(
    AnalyticConfig,
    alpha1=st.just(1e-9),
    alpha2=st.just(1e-4),
    gamma1=st.one_of(st.just(0.0), st.floats(min_value=1e-9, max_value=1e-3)),
    gamma2=st.floats(min_value=0.0, max_value=5e-2),
    beta=st.floats(min_value=0.0, max_value=5e-2),
)


@settings(max_examples=300)
@given(
    config=CONFIGS,
    prompt_tokens=st.integers(min_value=0, max_value=4000),
    decoded_tokens=st.integers(min_value=0, max_value=300),
)
def test_optimal_saved_tokens_matches_brute_force(
    config: AnalyticConfig, prompt_tokens: int, decoded_tokens: int
) -> None:
    best = optimal_saved_decode_tokens(config, prompt_tokens, decoded_tokens)
    assert 0 <= best <= decoded_tokens
    costs = [partial_save_cost_s(config, prompt_tokens, decoded_tokens, x) for x in range(decoded_tokens + 1)]
    chosen = partial_save_cost_s(config, prompt_tokens, decoded_tokens, best)
    assert chosen <= min(costs) * (1 + 1e-12) + 1e-15


def test_partial_save_cost_hand_computed() -> None:
    config = AnalyticConfig(alpha1=0.0, alpha2=0.0, gamma1=2.0, gamma2=3.0, beta=5.0)
    # n=4, m'=6, x=2 -> y=4: 5*2 + 2*(0.5*16 + 4*4 + 0.5*4) + 3*4 = 10 + 52 + 12 = 74.
    assert partial_save_cost_s(config, 4, 6, 2) == 74.0
    # x* = m' + n + 1/2 - (beta - gamma2)/gamma1 = 6 + 4 + 0.5 - 1 = 9.5 -> clamped to 6: save everything.
    assert optimal_saved_decode_tokens(config, 4, 6) == 6


def test_cache_or_recompute_combines_both_rules() -> None:
    decision = cache_or_recompute(A100_7B, prompt_tokens=1000, decoded_tokens=50)
    assert decision.save_prompt == should_save_prefill_kv(A100_7B, 1000)
    assert decision.saved_decode_tokens == optimal_saved_decode_tokens(A100_7B, 1000, 50)
    assert math.isfinite(partial_save_cost_s(A100_7B, 1000, 50, decision.saved_decode_tokens))


def test_numpy_counts_price_as_python_ints_and_a_float_count_is_refused() -> None:
    """The model is compiled with the core; its public methods still take any integer (NumPy's too) and give the
    floats Python ints give, and the model pickles as it is."""
    import pickle

    model = make_model()
    i64 = np.int64
    assert model.step_time_s([(i64(300), i64(40)), (i64(300), i64(40))], i64(5), i64(900)) \
        == model.step_time_s([(300, 40), (300, 40)], 5, 900)
    assert model.chunk_time_s(np.int32(64), i64(8)) == model.chunk_time_s(64, 8)
    assert model.decode_time_s(i64(900)) == model.decode_time_s(900)
    assert model.decode_times_s(i64(3), i64(90), i64(4)).tolist() == model.decode_times_s(3, 90, 4).tolist()
    assert model.swap_time_s(i64(10)) == model.swap_time_s(10)
    with pytest.raises(TypeError):
        model.step_time_s([], 2.0, 10)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="prefill chunk"):
        model.step_time_s([(i64(-1), 0)], 0, 0)
    assert pickle.loads(pickle.dumps(model)) == model
