"""Tests for semsched/workloads/lengths.py."""

from __future__ import annotations

import numpy as np
import pytest

from semsched.workloads import (
    EmpiricalLengths,
    LengthError,
    QuantileLengths,
    UniformLengths,
    find_data_file,
    fitted_lengths,
    load_azure_csv,
    spearman_correlation,
)
from semsched.workloads.lengths import LengthSampler, load_fit_table

QUANTILE_LEVELS = (0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99)


def _samplers() -> list[LengthSampler]:
    return [
        EmpiricalLengths(np.array([5, 50, 500]), np.array([1, 2, 3])),
        UniformLengths(1, 10, 5, 6),
        QuantileLengths(np.array([0.0, 1.0]), np.array([1.0, 100.0]), np.array([1.0, 10.0]), 0.5),
    ]


@pytest.mark.parametrize("sampler", _samplers())
def test_protocol_shapes_and_determinism(sampler: LengthSampler) -> None:
    prompt, output = sampler.sample(500, np.random.default_rng(0))
    again = sampler.sample(500, np.random.default_rng(0))
    assert prompt.shape == output.shape == (500,)
    assert prompt.dtype == output.dtype == np.int64
    assert prompt.min() >= 1 and output.min() >= 1
    assert np.array_equal(prompt, again[0]) and np.array_equal(output, again[1])


def test_empirical_keeps_pairs_together() -> None:
    sampler = EmpiricalLengths(np.array([5, 50, 500]), np.array([1, 2, 3]))
    prompt, output = sampler.sample(1000, np.random.default_rng(1))
    pairs = set(zip(prompt.tolist(), output.tolist(), strict=True))
    assert pairs == {(5, 1), (50, 2), (500, 3)}


def test_uniform_bounds_inclusive() -> None:
    prompt, output = UniformLengths(3, 5, 7, 7).sample(2000, np.random.default_rng(2))
    assert set(prompt.tolist()) == {3, 4, 5} and set(output.tolist()) == {7}
    with pytest.raises(LengthError, match="prompt_tokens range"):
        UniformLengths(5, 3, 1, 1)


def test_quantile_sampling_matches_its_table() -> None:
    rng = np.random.default_rng(3)
    prompt_data = rng.lognormal(6.0, 1.0, 20_000).astype(np.int64) + 1
    output_data = rng.integers(1, 500, 20_000)
    fit = QuantileLengths.fit(prompt_data, output_data)
    prompt, output = fit.sample(50_000, np.random.default_rng(4))
    for q in QUANTILE_LEVELS:
        assert np.quantile(prompt, q) == pytest.approx(np.quantile(prompt_data, q), rel=0.05, abs=2)
        assert np.quantile(output, q) == pytest.approx(np.quantile(output_data, q), rel=0.05, abs=2)


@pytest.mark.parametrize("rho", [-0.6, 0.0, 0.4, 0.9])
def test_copula_reproduces_rank_correlation(rho: float) -> None:
    table = np.linspace(1.0, 10_000.0, 11)
    sampler = QuantileLengths(np.linspace(0.0, 1.0, 11), table, table, spearman_rho=rho)
    prompt, output = sampler.sample(40_000, np.random.default_rng(5))
    assert spearman_correlation(prompt, output) == pytest.approx(rho, abs=0.03)


def test_fit_round_trips_through_dict() -> None:
    fit = QuantileLengths.fit(np.array([1, 5, 9, 20]), np.array([3, 3, 4, 8]), num_points=5)
    again = QuantileLengths.from_dict(fit.to_dict())
    assert np.allclose(again.prompt_quantiles, fit.prompt_quantiles)
    assert again.spearman_rho == pytest.approx(fit.spearman_rho)
    with pytest.raises(LengthError, match="probabilities"):
        QuantileLengths.from_dict({"prompt_quantiles": [1, 2], "output_quantiles": [1, 2]})


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: QuantileLengths(np.array([0.0, 0.5]), np.ones(2), np.ones(2)), "probabilities"),
        (lambda: QuantileLengths(np.array([0.0, 1.0]), np.array([5.0, 1.0]), np.ones(2)), "prompt_quantiles"),
        (lambda: QuantileLengths(np.array([0.0, 1.0]), np.ones(2), np.ones(2), 1.5), "spearman_rho"),
        (lambda: EmpiricalLengths(np.array([1, 0]), np.array([1, 1])), "prompt_tokens[1]"),
        (lambda: EmpiricalLengths(np.array([1]), np.array([1, 1])), "equally long"),
    ],
)
def test_invalid_parameters_are_named(build: object, field: str) -> None:
    with pytest.raises(LengthError) as info:
        build()  # type: ignore[operator]
    assert field in str(info.value)


def test_spearman_handles_ties_and_constants() -> None:
    assert spearman_correlation([1, 2, 2, 3], [10, 20, 20, 30]) == pytest.approx(1.0)
    assert spearman_correlation([1, 1, 1], [1, 2, 3]) == 0.0


def test_unknown_fit_name_lists_known() -> None:
    with pytest.raises(LengthError, match="azure-code"):
        fitted_lengths("nope")


@pytest.mark.data
@pytest.mark.parametrize(("fit_name", "file_name"), [("azure-conv", "conv"), ("azure-code", "code")])
def test_embedded_fit_matches_real_trace(fit_name: str, file_name: str) -> None:
    trace = load_azure_csv(find_data_file(f"azure_llm_2023_{file_name}.csv"))
    assert load_fit_table()["fits"][fit_name]["num_requests"] == len(trace)
    sampler = fitted_lengths(fit_name)
    prompt, output = sampler.sample(60_000, np.random.default_rng(6))
    for q in QUANTILE_LEVELS:
        assert np.quantile(prompt, q) == pytest.approx(np.quantile(trace.prompt_tokens, q), rel=0.05, abs=3)
        assert np.quantile(output, q) == pytest.approx(np.quantile(trace.output_tokens, q), rel=0.05, abs=3)
    real_rho = spearman_correlation(trace.prompt_tokens, trace.output_tokens)
    assert spearman_correlation(prompt, output) == pytest.approx(real_rho, abs=0.03)
