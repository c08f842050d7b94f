"""Tests for semsched/latency/batch.py."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from semsched.latency.base import BatchSample
from semsched.latency.batch import BatchConfig, BatchLatencyModel, batch_features, evaluate, fit

TRUE_CONFIG = BatchConfig(t_c=4e-3, a_p=2e-9, b_p=1e-9, c_p=8e-5, a_d=2e-8, b_d=3e-4, kv_transfer_s_per_token=5e-5)


def make_model(config: BatchConfig = TRUE_CONFIG) -> BatchLatencyModel:
    return BatchLatencyModel(config=config, name="test")


def grid_samples(model: BatchLatencyModel) -> list[BatchSample]:
    """Noiseless samples timed by ``model`` over a small grid that varies every feature."""
    samples = []
    for lq, lkv, num_decode, mean_context in itertools.product(
        (0, 32, 256, 1024), (0, 300, 2000), (0, 2, 16, 64), (100, 900)
    ):
        prefill = ((lq, lkv),) if lq else ()
        if not prefill and num_decode == 0:
            continue
        context = num_decode * mean_context
        samples.append(BatchSample(prefill, num_decode, context, model.step_time_s(prefill, num_decode, context)))
    return samples


def test_empty_step_costs_nothing() -> None:
    assert make_model().step_time_s([], 0, 0) == 0.0


def test_step_time_hand_computed() -> None:
    # Chunks (100, 50) and (20, 0); 3 decodes with summed context 600.
    prefill_s = (2e-9 * 100**2 + 1e-9 * 100 * 50 + 8e-5 * 100) + (2e-9 * 20**2 + 1e-9 * 20 * 0 + 8e-5 * 20)
    decode_s = 2e-8 * 600 + 3e-4 * 3
    expected_s = 4e-3 + prefill_s + decode_s
    assert make_model().step_time_s([(100, 50), (20, 0)], 3, 600) == pytest.approx(expected_s, rel=1e-12)


def test_decode_only_step_hand_computed() -> None:
    assert make_model().step_time_s([], 2, 300) == pytest.approx(4e-3 + 2e-8 * 300 + 3e-4 * 2, rel=1e-12)


def test_swap_time() -> None:
    assert make_model().swap_time_s(200) == pytest.approx(5e-5 * 200, rel=1e-12)
    free = BatchConfig(t_c=0.0, a_p=0.0, b_p=0.0, c_p=0.0, a_d=0.0, b_d=0.0)
    assert make_model(free).swap_time_s(200) == 0.0


@settings(max_examples=300)
@given(
    num_decode=st.integers(min_value=0, max_value=512),
    mean_context=st.integers(min_value=0, max_value=40_000),
    num_steps=st.integers(min_value=0, max_value=64),
    coefficients=st.tuples(*[st.floats(min_value=-1e-2, max_value=1e-2)] * 3),
)
def test_decode_times_bitwise_equal_to_step_time(
    num_decode: int, mean_context: int, num_steps: int, coefficients: tuple[float, float, float]
) -> None:
    t_c, a_d, b_d = coefficients
    model = make_model(BatchConfig(t_c=t_c, a_p=1e-9, b_p=1e-9, c_p=1e-4, a_d=a_d, b_d=b_d))
    start = num_decode * mean_context
    fast = model.decode_times_s(num_decode, start, num_steps)
    slow = [model.step_time_s([], num_decode, start + i * num_decode) for i in range(num_steps)]
    assert fast.tobytes() == np.array(slow, dtype=np.float64).tobytes()


def test_fit_recovers_coefficients_from_noiseless_samples() -> None:
    fitted, report = fit(grid_samples(make_model()))
    for name in ("t_c", "a_p", "b_p", "c_p", "a_d", "b_d"):
        assert getattr(fitted.config, name) == pytest.approx(getattr(TRUE_CONFIG, name), rel=1e-6), name
    assert report.mape < 1e-9
    assert report.num_samples == len(grid_samples(make_model()))


def test_chunk_constant_is_charged_once_per_prefill_chunk() -> None:
    plain, with_d_p = make_model(), make_model(dataclasses.replace(TRUE_CONFIG, d_p=7e-4))
    assert with_d_p.step_time_s([(100, 50), (20, 0)], 3, 600) - plain.step_time_s([(100, 50), (20, 0)], 3, 600) \
        == pytest.approx(2 * 7e-4, rel=1e-9)
    assert with_d_p.step_time_s([], 3, 600) == plain.step_time_s([], 3, 600)


@pytest.mark.parametrize("nonnegative", [False, True])
def test_fit_with_chunk_constant_recovers_it_and_eq7_alone_cannot(nonnegative: bool) -> None:
    truth = make_model(dataclasses.replace(TRUE_CONFIG, d_p=1.5e-3))
    samples = grid_samples(truth)
    fitted, report = fit(samples, per_chunk_constant=True, nonnegative=nonnegative)
    for name in ("t_c", "a_p", "b_p", "c_p", "a_d", "b_d", "d_p"):
        assert getattr(fitted.config, name) == pytest.approx(getattr(truth.config, name), rel=1e-6), name
    assert report.mape < 1e-9
    _, without = fit(samples, nonnegative=nonnegative)
    assert without.mape > 0.01  # eq. 4-7 has no term for a fixed per-chunk cost


def test_fit_with_chunk_constant_needs_steps_without_prefill() -> None:
    prefill_only = [s for s in grid_samples(make_model()) if s.prefill]
    with pytest.raises(ValueError, match="num_prefill_chunks"):
        fit(prefill_only, per_chunk_constant=True)


@pytest.mark.parametrize("relative_error", [False, True])
def test_fit_with_noise_has_small_mape(relative_error: bool) -> None:
    rng = np.random.default_rng(7)
    noisy = [
        BatchSample(s.prefill, s.num_decode, s.decode_context_tokens, s.time_s * (1 + rng.normal(0, 0.02)))
        for s in grid_samples(make_model())
    ]
    _, report = fit(noisy, relative_error=relative_error)
    assert report.mape < 0.04
    assert report.max_ape < 0.2
    assert report.residual_sum_squares_s2 > 0


def test_fit_needs_enough_samples() -> None:
    with pytest.raises(ValueError, match="at least 6 samples"):
        fit(grid_samples(make_model())[:5])


def test_fit_names_feature_that_never_varies() -> None:
    samples = [s for s in grid_samples(make_model()) if s.num_decode == 16]
    with pytest.raises(ValueError, match="'num_decode' never varies"):
        fit(samples)


def test_fit_rejects_non_positive_time() -> None:
    samples = grid_samples(make_model())
    samples[3] = BatchSample(samples[3].prefill, samples[3].num_decode, samples[3].decode_context_tokens, 0.0)
    with pytest.raises(ValueError, match="sample 3"):
        fit(samples)


def test_fit_report_percentiles_hand_computed() -> None:
    model = make_model(BatchConfig(t_c=1.0, a_p=0.0, b_p=0.0, c_p=0.0, a_d=0.0, b_d=0.0))
    # a decode-only step costs exactly t_c = 1 s; measured times give APEs 0, 0.5, 1.0 (|1 - t| / t)
    measured = [1.0, 2.0 / 3.0, 0.5]
    report = evaluate(model, [BatchSample((), 1, 10, t) for t in measured])
    assert report.median_ape == pytest.approx(0.5)
    assert report.p90_ape == pytest.approx(0.9)  # linear interpolation between 0.5 and 1.0
    assert report.max_ape == pytest.approx(1.0)
    assert report.mape == pytest.approx(0.5)


def test_nonnegative_fit_recovers_nonnegative_truth() -> None:
    fitted, report = fit(grid_samples(make_model()), nonnegative=True, relative_error=True)
    for name in ("t_c", "a_p", "b_p", "c_p", "a_d", "b_d"):
        assert getattr(fitted.config, name) == pytest.approx(getattr(TRUE_CONFIG, name), rel=1e-6), name
    assert report.mape < 1e-9


@pytest.mark.parametrize("relative_error", [False, True])
def test_nonnegative_fit_is_the_constrained_optimum(relative_error: bool) -> None:
    # Truth with a negative prefill term: the unconstrained fit finds it, the constrained one must not go below
    # zero and must satisfy the KKT conditions of min ||w(Xc - y)||^2 s.t. c >= 0.
    truth = BatchConfig(t_c=4e-3, a_p=-1e-9, b_p=1e-9, c_p=8e-5, a_d=2e-8, b_d=3e-4)
    samples = grid_samples(make_model(truth))
    unconstrained, _ = fit(samples, relative_error=relative_error)
    assert unconstrained.config.a_p < 0
    constrained, _ = fit(samples, relative_error=relative_error, nonnegative=True)
    coefficients = np.array([getattr(constrained.config, n) for n in ("t_c", "a_p", "b_p", "c_p", "a_d", "b_d")])
    assert np.all(coefficients >= 0)
    design = np.array([batch_features(s.prefill, s.num_decode, s.decode_context_tokens) for s in samples])
    times = np.array([s.time_s for s in samples])
    weights = 1.0 / times if relative_error else np.ones_like(times)
    scale = np.abs(design).max(axis=0)  # compare gradients in the solver's (column-scaled) units
    gradient = ((design / scale) * weights[:, None]).T @ (weights * (design @ coefficients - times))
    positive = coefficients > 0
    tolerance = 1e-9 * np.abs(((design / scale) * weights[:, None]).T @ (weights * times)).max()
    assert np.all(np.abs(gradient[positive]) <= tolerance)
    assert np.all(gradient[~positive] >= -tolerance)
