"""The roofline latency model against values computed by hand from its documented formulas."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from semsched.latency import LatencyModel
from semsched.latency.preemption import KNOWN_SHAPES, PCIE4_X16_BYTES_PER_S, PreemptionCostModel
from semsched.latency.roofline import (
    A100_80GB,
    LLAMA_3_70B,
    GpuSpec,
    RooflineLatencyModel,
    TransformerSpec,
    gpus_to_hold,
)

P = 70.6e9  # Llama 3 70B parameters
ATTENTION = 4 * 80 * 8192  # FLOPs per (query, key) pair: 4 x layers x query heads x head dim
KV = 327_680  # KV bytes per token: 2 x 80 layers x 8 KV heads x 128 x 2 bytes
W = 2 * P  # weight bytes (16-bit)


def test_weights_need_two_a100s() -> None:
    # 141.2 GB of weights: one 80 GB GPU cannot hold them, two can (in 90 % of 160 GB)
    assert gpus_to_hold(LLAMA_3_70B, A100_80GB, 0.9) == 2
    assert RooflineLatencyModel().gpus == 2
    forty = GpuSpec("a100-40gb", 312e12, 1.555e12, 40e9)
    assert gpus_to_hold(LLAMA_3_70B, forty, 0.9) == 4
    assert gpus_to_hold(LLAMA_3_70B, A100_80GB, 0.5) == 4  # power of two: 3 would do, 4 it is
    assert RooflineLatencyModel(num_gpus=8).gpus == 8


def test_prefill_is_compute_bound_as_computed_by_hand() -> None:
    model = RooflineLatencyModel()  # 2 GPUs, MFU 0.5
    flops = 2 * P * 512 + ATTENTION * (512 * 513 / 2)
    assert model.prefill_time_s(512) == pytest.approx(flops / (2 * 312e12 * 0.5), rel=1e-12)
    assert model.step_time_s([(512, 0)], 0, 0) == model.prefill_time_s(512)
    # about 2,200 prompt tokens/s on two A100s: a quarter of the seed's 10,000 tokens/s
    assert 2000 < 512 / model.prefill_time_s(512) < 2400


def test_decode_is_memory_bound_as_computed_by_hand() -> None:
    model = RooflineLatencyModel()
    # one decode at context 512: weights once plus 513 tokens of KV, over 2 x 2.039 TB/s x MBU 0.8
    moved = W + 513 * KV
    assert model.step_time_s([], 1, 512) == pytest.approx(moved / (2 * 2.039e12 * 0.8), rel=1e-12)
    # a batch of 64 decodes reads the weights once: far less than 64 single steps
    assert model.step_time_s([], 64, 64 * 512) < 2 * model.step_time_s([], 1, 512)


def test_chunk_with_cache_counts_every_causal_pair() -> None:
    model = RooflineLatencyModel(num_gpus=8)
    flops = 2 * P * 100 + ATTENTION * (100 * 1000 + 100 * 101 / 2)
    compute_s = flops / (8 * 312e12 * 0.5)
    memory_s = (W + 1100 * KV) / (8 * 2.039e12 * 0.8)
    assert model.step_time_s([(100, 1000)], 0, 0) == pytest.approx(max(compute_s, memory_s), rel=1e-12)


def test_swap_moves_the_kv_cache_over_the_link() -> None:
    model = RooflineLatencyModel()
    assert model.swap_time_s(522) == pytest.approx(522 * KV / 25e9, rel=1e-12)
    assert model.swap_time_s(0) == 0.0
    with pytest.raises(ValueError, match="num_tokens"):
        model.swap_time_s(-1)


def test_is_a_latency_model_the_cost_model_can_price_with() -> None:
    model = RooflineLatencyModel()
    assert isinstance(model, LatencyModel)
    assert model.name == "roofline-2xa100-80gb-llama-3-70b"
    costs = PreemptionCostModel(model, KNOWN_SHAPES["llama-3-70b"], PCIE4_X16_BYTES_PER_S)
    assert costs.recompute_s(522) == model.prefill_time_s(522)
    assert costs.swap_s(522) == pytest.approx(2 * model.swap_time_s(522), rel=1e-12)


def test_empty_step_costs_nothing_and_bad_inputs_raise() -> None:
    model = RooflineLatencyModel()
    assert model.step_time_s([], 0, 0) == 0.0
    assert model.decode_times_s(0, 0, 3).tolist() == [0.0, 0.0, 0.0]
    with pytest.raises(ValueError):
        model.step_time_s([(-1, 0)], 0, 0)
    with pytest.raises(ValueError):
        model.step_time_s([], 0, 5)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"mfu": 0.0}, "mfu"),
        ({"mbu": 1.5}, "mbu"),
        ({"num_gpus": 0}, "num_gpus"),
        ({"link_bytes_per_s": float("nan")}, "link_bytes_per_s"),
        ({"weight_memory_fraction": 2.0}, "weight_memory_fraction"),
    ],
)
def test_bad_settings_name_the_field(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RooflineLatencyModel(**kwargs)  # type: ignore[arg-type]


def test_bad_specs_name_the_field() -> None:
    with pytest.raises(ValueError, match="peak_flops"):
        GpuSpec("x", 0.0, 1.0, 1.0)
    with pytest.raises(ValueError, match="num_layers"):
        TransformerSpec("x", 1e9, 0, 128, KNOWN_SHAPES["llama-3-8b"])


@given(
    num_decode=st.integers(1, 512),
    context=st.integers(0, 2_000_000),
    steps=st.integers(1, 50),
    gpus=st.sampled_from([1, 2, 8]),
)
def test_decode_times_equal_single_steps_bit_for_bit(num_decode: int, context: int, steps: int, gpus: int) -> None:
    model = RooflineLatencyModel(num_gpus=gpus)
    context = max(context, num_decode)
    times = model.decode_times_s(num_decode, context, steps)
    single = np.array([model.step_time_s([], num_decode, context + i * num_decode) for i in range(steps)])
    assert np.array_equal(times, single)
