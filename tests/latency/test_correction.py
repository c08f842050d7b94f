"""Tests for semsched/latency/correction.py: PROSERVE's online correction of the batch latency estimator."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pytest

from semsched.latency import load_profile
from semsched.latency.batch import BatchConfig, BatchLatencyModel
from semsched.latency.correction import (
    CorrectedEstimator,
    CorrectionConfig,
    StepShape,
    correction_mape,
    synthetic_steps,
)
from semsched.sim.ground_truth import GroundTruth, LinearDrift

MODEL = BatchLatencyModel(BatchConfig(t_c=5e-3, a_p=5e-7, b_p=1e-6, c_p=1.5e-4, a_d=1.5e-8, b_d=8e-5, d_p=2e-3))


class _Scaled:
    """A ground truth that multiplies every step by a fixed factor."""

    def __init__(self, factor: float) -> None:
        self.factor = factor

    def real_time_s(self, model_s: float, start_s: float) -> float:
        return model_s * self.factor


def _steps(count: int, seed: int = 0) -> list[StepShape]:
    return synthetic_steps(count, seed)


def _observe_all(estimator: CorrectedEstimator, steps: Sequence[StepShape], factor: float) -> None:
    now_s = 0.0
    for step in steps:
        real_s = factor * MODEL.step_time_s(step.prefill, step.num_decode, step.decode_context_tokens)
        now_s += real_s
        estimator.observe(step.prefill, step.num_decode, step.decode_context_tokens, real_s, now_s)


def test_estimates_are_the_base_model_times_beta() -> None:
    estimator = CorrectedEstimator(MODEL)
    _observe_all(estimator, _steps(200), 1.5)
    beta, config = estimator.beta, MODEL.config
    assert beta != 1.0
    assert estimator.t_c == beta * config.t_c
    assert estimator.chunk_time_s(100, 30) == beta * MODEL.chunk_time_s(100, 30)
    assert estimator.decode_time_s(700) == beta * (config.a_d * 700 + config.b_d)
    assert estimator.step_time_s([(64, 0)], 3, 900) == beta * MODEL.step_time_s([(64, 0)], 3, 900)
    assert estimator.model is MODEL


def test_decode_times_are_decode_time_of_each_context() -> None:
    estimator = CorrectedEstimator(MODEL)
    _observe_all(estimator, _steps(200), 1.3)
    contexts = [0, 1, 7, 700, 4095, 131_071, 2**40 + 1]
    times = estimator.decode_times_s(np.array(contexts, dtype=np.int64))
    assert times.tolist() == [estimator.decode_time_s(context) for context in contexts]


@pytest.mark.parametrize("factor", [0.7, 1.3])
def test_beta_converges_to_a_constant_engine_factor_without_overshoot(factor: float) -> None:
    estimator = CorrectedEstimator(MODEL, CorrectionConfig(momentum=0.9, window_s=0.05))
    betas = []
    now_s = 0.0
    for step in _steps(2000):
        real_s = factor * MODEL.step_time_s(step.prefill, step.num_decode, step.decode_context_tokens)
        now_s += real_s
        estimator.observe(step.prefill, step.num_decode, step.decode_context_tokens, real_s, now_s)
        betas.append(estimator.beta)
    assert estimator.beta == pytest.approx(factor, rel=1e-6)
    # monotone approach from 1: never past the factor
    assert all(min(1.0, factor) - 1e-12 <= b <= max(1.0, factor) + 1e-12 for b in betas)
    stats = estimator.stats()
    assert stats.num_steps == 2000 and stats.num_ignored == 0
    assert stats.mape_uncorrected == pytest.approx(abs(1 - 1 / factor))
    assert stats.mape_corrected < stats.mape_uncorrected / 10


def test_correction_follows_a_drifted_noisy_ground_truth() -> None:
    drift = LinearDrift(end=1.6, duration_s=20.0)
    truth = GroundTruth(noise=0.10, distribution="uniform", drift=drift, seed=3).sampler()
    steps = _steps(6000, seed=1)
    corrected = correction_mape(MODEL, steps, truth=truth)
    assert corrected.num_steps == len(steps)
    assert corrected.beta == pytest.approx(1.6, rel=0.05)  # the drift's final factor
    assert corrected.mape_uncorrected > 0.2
    assert corrected.mape_corrected < corrected.mape_uncorrected / 3
    replay = GroundTruth(noise=0.10, distribution="uniform", drift=drift, seed=3).sampler()
    disabled = correction_mape(MODEL, steps, truth=replay, config=CorrectionConfig(enabled=False))
    assert disabled.mape_uncorrected == corrected.mape_uncorrected  # same seed, same truth
    assert disabled.mape_corrected == disabled.mape_uncorrected


def test_disabled_correction_keeps_beta_at_one() -> None:
    estimator = CorrectedEstimator(MODEL, CorrectionConfig(enabled=False))
    _observe_all(estimator, _steps(300), 2.0)
    stats = estimator.stats()
    assert estimator.beta == 1.0 and stats.beta == 1.0
    assert stats.num_steps == 300
    assert stats.mape_corrected == stats.mape_uncorrected == pytest.approx(0.5)


def test_empty_and_invalid_measurements_are_ignored_and_counted() -> None:
    estimator = CorrectedEstimator(MODEL)
    estimator.observe([], 0, 0, 0.01, 1.0)  # an empty step
    for bad in (0.0, -0.1, math.nan, math.inf):
        estimator.observe([(8, 0)], 1, 100, bad, 1.0)
    stats = estimator.stats()
    assert (stats.num_steps, stats.num_ignored, estimator.beta) == (0, 5, 1.0)
    assert math.isnan(stats.mape_corrected) and math.isnan(stats.mape_uncorrected)


def test_only_the_window_is_averaged() -> None:
    # theta = 0: beta is the mean ratio of the steps that ended within window_s of the last one
    estimator = CorrectedEstimator(MODEL, CorrectionConfig(momentum=0.0, window_s=1.0))
    base_s = MODEL.step_time_s([], 4, 400)
    for now_s, ratio in ((0.5, 2.0), (1.0, 4.0), (1.4, 3.0), (2.2, 1.0)):
        estimator.observe([], 4, 400, ratio * base_s, now_s)
    assert estimator.beta == pytest.approx((3.0 + 1.0) / 2)  # 0.5 and 1.0 are out of (1.2, 2.2]


def test_paper_mode_compounds_and_overshoots_the_total_mode_does_not() -> None:
    total = CorrectedEstimator(MODEL, CorrectionConfig(window_s=1e-9))
    paper = CorrectedEstimator(MODEL, CorrectionConfig(window_s=1e-9, mode="paper"))
    betas: dict[str, list[float]] = {"total": [], "paper": []}
    for name, estimator in (("total", total), ("paper", paper)):
        now_s = 0.0
        for step in _steps(400):
            real_s = 1.3 * MODEL.step_time_s(step.prefill, step.num_decode, step.decode_context_tokens)
            now_s += real_s
            estimator.observe(step.prefill, step.num_decode, step.decode_context_tokens, real_s, now_s)
            betas[name].append(estimator.beta)
    assert max(betas["total"]) <= 1.3 + 1e-12
    assert max(betas["paper"]) > 1.3 + 0.05  # the compounded factor overshoots
    assert paper.beta == pytest.approx(1.3, rel=1e-3)  # and settles with a one-step window


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"momentum": 1.0}, r"momentum: must be in \[0, 1\)"),
        ({"momentum": -0.1}, r"momentum: must be in \[0, 1\)"),
        ({"window_s": 0.0}, r"window_s: must be a finite number of seconds > 0"),
        ({"window_s": math.inf}, r"window_s: must be a finite number of seconds > 0"),
        ({"enabled": 1}, "enabled: must be True or False"),
        ({"mode": "literal"}, "mode: must be 'total' or 'paper'"),
    ],
)
def test_config_errors_name_the_field_and_the_limit(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        CorrectionConfig(**kwargs)  # type: ignore[arg-type]


def test_defaults() -> None:
    config = CorrectionConfig()
    assert (config.momentum, config.window_s, config.enabled, config.mode) == (0.9, 1.0, True, "total")
    assert CorrectedEstimator(MODEL).beta == 1.0


def test_the_running_window_sum_stays_exact_over_many_evictions() -> None:
    estimator = CorrectedEstimator(MODEL, CorrectionConfig(momentum=0.0, window_s=2.5))
    base_s = MODEL.step_time_s([], 2, 200)
    rng = np.random.default_rng(5)
    ratios = rng.uniform(0.5, 2.0, 20_000)
    for index, ratio in enumerate(ratios):
        estimator.observe([], 2, 200, float(ratio) * base_s, index * 0.25)
    # the last 10 steps are in the window (2.5 s at 0.25 s apart, exact in binary)
    assert estimator.beta == pytest.approx(float(ratios[-10:].mean()), rel=1e-9)


def test_the_built_in_ground_truth_is_reproducible_and_the_correction_removes_its_drift() -> None:
    stats = correction_mape(MODEL, noise=0.10, drift=0.3, seed=2)
    assert stats == correction_mape(MODEL, noise=0.10, drift=0.3, seed=2)
    assert stats.num_steps == 5000
    assert stats.beta == pytest.approx(1.3, rel=0.05)
    assert stats.mape_corrected < stats.mape_uncorrected / 2
    exact = correction_mape(MODEL, synthetic_steps(100), drift=0.0)
    assert exact.mape_uncorrected == 0.0 and exact.beta == 1.0


def test_correction_mape_errors() -> None:
    truth = GroundTruth(noise=0.1).sampler()
    with pytest.raises(ValueError, match="give them or truth, not both"):
        correction_mape(MODEL, truth=truth, noise=0.1)
    with pytest.raises(ValueError, match=r"noise: must be in \[0, 1\)"):
        correction_mape(MODEL, noise=1.5)
    with pytest.raises(TypeError, match="model: expected a BatchLatencyModel"):
        correction_mape(load_profile("a100-qwen1.5-4b"), noise=0.1)
