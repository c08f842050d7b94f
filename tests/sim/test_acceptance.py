"""Tests for semsched/sim/acceptance.py: the fitted speculative-decoding acceptance model (seed 004)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from semsched.sim.acceptance import (
    AcceptanceError,
    FittedAcceptance,
    fit_acceptance,
    mean_yield,
    yield_statistics,
)
from semsched.workloads.traces import data_dir

EAGLE = "spec_bench/model_answer/vicuna-7b-v1.3-eagle-float16-temperature-0.0.jsonl"
SPS = "spec_bench/model_answer/vicuna-7b-v1.3-sps-68m-float16-temp-0.0.jsonl"


def logged_turns(name: str) -> tuple[list[list[int]], list[int]]:
    """Each turn's accept lengths and output tokens, parsed straight from a Spec-Bench log."""
    path = data_dir() / name
    assert path.is_file(), f"shared data missing: {path}"
    rounds, tokens = [], []
    for line in path.read_text(encoding="utf-8").splitlines():
        choice = json.loads(line)["choices"][0]
        start = 0
        for steps, new_tokens in zip(choice["decoding_steps"], choice["new_tokens"], strict=True):
            rounds.append(choice["accept_lengths"][start:start + steps])
            tokens.append(new_tokens)
            start += steps
    return rounds, tokens


def model(rates: list[float] | np.ndarray, rho: float = 0.0, sigma: float = 0.0, n: int = 5) -> FittedAcceptance:
    return FittedAcceptance(draft_tokens=n, base_rates=np.asarray(rates, dtype=float), rho=rho, sigma=sigma)


def generated(truth: FittedAcceptance, rates: np.ndarray, length: int, seed: int) -> list[tuple[int, ...]]:
    """``length`` rounds of one request per rate, drawn by the model itself."""
    rng = np.random.default_rng(seed)
    enough = length * (truth.draft_tokens + 1)
    return [truth.rounds(rng, enough, float(rate))[:length] for rate in rates]


# ---- statistics and the per-round law ----------------------------------------------------------------------
def test_yield_statistics_by_hand() -> None:
    mean, var, lag1 = yield_statistics([[1, 2, 3], [2, 2]])
    assert mean == pytest.approx(10 / 5)
    assert var == pytest.approx((1.0 + 0.0) / 2)  # sample variances 1 and 0
    assert lag1 == pytest.approx(0.0)  # [1, 2, 3]: d = -1, 0, 1; [2, 2] is too short
    assert yield_statistics([[1, 3, 1, 3]])[2] == pytest.approx(-3 / 4)
    _, var, lag1 = yield_statistics([[4], [1, 1, 1]])
    assert var == 0.0 and math.isnan(lag1)  # no sequence whose yields vary
    assert math.isnan(yield_statistics([[2]])[1])


def test_mean_yield_is_the_truncated_geometric_mean() -> None:
    assert mean_yield(0.5, 2) == pytest.approx(1 + 0.5 + 0.25)
    assert mean_yield(np.array([1e-9, 1 - 1e-12]), 5) == pytest.approx([1.0, 6.0])


def test_without_noise_yields_follow_the_truncated_geometric_law() -> None:
    rng = np.random.default_rng(0)
    yields = np.array(model([0.6], n=3).rounds(rng, 60_000, 0.6))
    frequencies = np.bincount(yields, minlength=5)[1:] / yields.size
    expected = [0.4, 0.6 * 0.4, 0.36 * 0.4, 0.6**3]
    assert frequencies == pytest.approx(expected, abs=0.01)


def test_a_wandering_rate_changes_the_mean_and_expected_yield_knows_it() -> None:
    fitted = model([0.7], rho=0.5, sigma=1.5)
    yields = fitted.rounds(np.random.default_rng(3), 300_000, 0.7)
    assert np.mean(yields) == pytest.approx(fitted.expected_yield(0.7), rel=0.01)
    assert fitted.expected_yield(0.7) > 1.05 * float(mean_yield(0.7, 5))  # E[f(q)] is not f(p)
    assert model([0.7]).expected_yield(0.7) == pytest.approx(float(mean_yield(0.7, 5)))


def test_the_ar1_in_logit_space_is_the_recursion_it_claims() -> None:
    fitted = model([0.7], rho=0.8, sigma=1.3)
    first = fitted._deviations(np.random.default_rng(4), 300, None)
    noise = np.random.default_rng(4).standard_normal(300)
    expected = [1.3 * noise[0]]
    for e in noise[1:]:
        expected.append(0.8 * expected[-1] + 1.3 * math.sqrt(1 - 0.8**2) * e)
    assert first == pytest.approx(expected)
    after = fitted._deviations(np.random.default_rng(5), 10, 2.0)
    noise = np.random.default_rng(5).standard_normal(10)
    assert after[0] == pytest.approx(0.8 * 2.0 + 1.3 * 0.6 * noise[0])


# ---- rounds ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("rho", "sigma", "n", "tokens"), [
    (0.0, 0.0, 5, 1), (0.5, 1.0, 5, 37), (0.9, 2.0, 20, 3_000), (-0.5, 0.5, 1, 700),
])
def test_rounds_cover_the_tokens_with_yields_in_range(rho: float, sigma: float, n: int, tokens: int) -> None:
    fitted = model([0.05, 0.5, 0.95], rho, sigma, n)
    rng = np.random.default_rng(1)
    for _ in range(20):
        rounds = fitted.rounds(rng, tokens)
        assert sum(rounds) >= tokens > sum(rounds[:-1])  # the last round reaches the tokens, none before it
        assert all(isinstance(y, int) and 1 <= y <= n + 1 for y in rounds)


def test_rounds_are_a_function_of_the_seed() -> None:
    fitted = model([0.3, 0.8], rho=0.7, sigma=1.0)
    draws = [[fitted.rounds(np.random.default_rng(9), 900) for _ in range(2)] for _ in range(2)]
    assert draws[0] == draws[1]
    assert fitted.rounds(np.random.default_rng(9), 900) != fitted.rounds(np.random.default_rng(10), 900)


def test_new_requests_draw_their_rate_from_the_fitted_rates() -> None:
    fitted = model([0.2, 0.4, 0.9])
    rng = np.random.default_rng(0)
    drawn = {fitted.sample_rate(rng) for _ in range(200)}
    assert drawn == {0.2, 0.4, 0.9}


# ---- fitting -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("rho", "sigma"), [(0.6, 0.8), (-0.3, 1.0)])
def test_the_fit_recovers_a_model_that_generated_the_data(rho: float, sigma: float) -> None:
    rates = np.random.default_rng(5).uniform(0.4, 0.85, 400)
    sequences = generated(model(rates, rho, sigma), rates, 60, seed=6)
    fitted = fit_acceptance(sequences, 5)
    # each sequence's fitted rate gives it its own mean yield, whatever sigma is
    expected = [fitted.expected_yield(float(p)) for p in fitted.base_rates]
    assert expected == pytest.approx([np.mean(s) for s in sequences], rel=1e-3)
    assert fitted.base_rates.mean() == pytest.approx(rates.mean(), abs=0.02)
    assert np.corrcoef(rates, fitted.base_rates)[0, 1] > 0.85  # each sequence's own rate, not just the mean
    assert fitted.rho == pytest.approx(rho, abs=0.2)
    assert fitted.sigma == pytest.approx(sigma, abs=0.3)
    assert fitted.model_lag1_autocorr == pytest.approx(fitted.log_lag1_autocorr, abs=0.01)


def test_the_fit_is_deterministic() -> None:
    rates = np.random.default_rng(1).uniform(0.3, 0.9, 50)
    sequences = generated(model(rates, 0.5, 0.5), rates, 30, seed=2)
    first, second = fit_acceptance(sequences, 5), fit_acceptance(sequences, 5)
    assert (first.rho, first.sigma) == (second.rho, second.sigma)
    assert first.base_rates.tolist() == second.base_rates.tolist()
    assert not first.base_rates.flags.writeable


def test_logs_without_drafts_fit_a_model_that_never_accepts() -> None:
    fitted = fit_acceptance([[1] * 30, [1, 1, 1]], 1)
    assert fitted.base_rates.max() < 1e-3 and fitted.sigma == 0.0
    assert math.isnan(fitted.log_lag1_autocorr)


@pytest.mark.data
@pytest.mark.parametrize(("log", "n"), [(EAGLE, 5), (SPS, 20)])
def test_the_fit_to_real_logs_keeps_their_mean_and_autocorrelation(log: str, n: int) -> None:
    sequences, tokens = logged_turns(log)
    assert max(max(s) for s in sequences) == n + 1
    fitted = fit_acceptance(sequences, n)
    log_mean, _, log_lag1 = yield_statistics(sequences)
    assert (fitted.log_mean_yield, fitted.log_lag1_autocorr) == (log_mean, log_lag1)
    assert fitted.model_mean_yield == pytest.approx(log_mean, rel=0.03)
    assert fitted.model_lag1_autocorr == pytest.approx(log_lag1, abs=0.05)
    # each logged request again, from its own fitted rate, until its logged output tokens
    rng = np.random.default_rng(0)
    replayed = [fitted.rounds(rng, t, float(p)) for t, p in zip(tokens, fitted.base_rates, strict=True)]
    mean, _, lag1 = yield_statistics(replayed)
    assert mean == pytest.approx(log_mean, rel=0.03)
    assert lag1 == pytest.approx(log_lag1, abs=0.05)
    assert sum(map(len, replayed)) == pytest.approx(sum(map(len, sequences)), rel=0.03)
    # new requests (rates drawn from the fit): their mean yield per request is the logs' mean per request
    drawn = [fitted.rounds(rng, t) for t in tokens]
    per_request = np.mean([sum(r) / len(r) for r in drawn])
    assert per_request == pytest.approx(np.mean([sum(s) / len(s) for s in sequences]), rel=0.03)


@pytest.mark.data
def test_the_fit_matches_the_variance_of_the_sps_log() -> None:
    """SPS's yields spread like a geometric law whose rate wanders (sigma > 0). EAGLE's tree drafts do not:
    its per-round spread is 2.0 tokens^2 while any truncated geometric of its mean spreads about 3.5, so only
    its mean and autocorrelation are matched (the fit weighs the autocorrelation first)."""
    sequences, _ = logged_turns(SPS)
    fitted = fit_acceptance(sequences, 20)
    assert fitted.model_yield_var == pytest.approx(fitted.log_yield_var, rel=0.05)
    assert fitted.sigma > 0


# ---- bad arguments -----------------------------------------------------------------------------------------
@pytest.mark.parametrize(("sequences", "n", "message"), [
    ([], 5, r"sequences: need at least one"),
    ([[1, 2]], 0, r"draft_tokens: must be an integer >= 1 \(got 0\)"),
    ([[1, 2]], True, r"draft_tokens"),
    ([[1, 2], []], 5, r"sequences\[1\]: must be a non-empty"),
    ([[1, 2], [2, 3, 6, 7]], 5, r"sequences\[1\]\[3\]: a yield of 7 is more than draft_tokens \+ 1 = 6"),
    ([[0, 2]], 5, r"sequences\[0\]\[0\]: a yield must be >= 1 \(got 0\)"),
    ([[1.5, 2]], 5, r"sequences\[0\]: must hold integers"),
])
def test_bad_fit_input_is_refused_naming_it(sequences: list[list[int]], n: int, message: str) -> None:
    with pytest.raises(AcceptanceError, match=message):
        fit_acceptance(sequences, n)


def test_bad_model_arguments_are_refused_naming_them() -> None:
    fitted = model([0.5])
    rng = np.random.default_rng(0)
    for tokens in (0, -3, 2.5, True):
        with pytest.raises(AcceptanceError, match="tokens: must be an integer >= 1"):
            fitted.rounds(rng, tokens)  # type: ignore[arg-type]
    for rate in (0.0, 1.0, 1.5, float("nan")):
        with pytest.raises(AcceptanceError, match="rate: must be a probability in"):
            fitted.rounds(rng, 10, rate)
    with pytest.raises(AcceptanceError, match=r"base_rates\[1\]: must be a probability"):
        model([0.5, 1.0])
    with pytest.raises(AcceptanceError, match="base_rates: must be a non-empty"):
        model([])
    with pytest.raises(AcceptanceError, match="rho: must be a number from"):
        model([0.5], rho=1.0)
    with pytest.raises(AcceptanceError, match="sigma: must be a number from"):
        model([0.5], sigma=-0.1)


def test_acceptance_errors_are_user_facing() -> None:
    from semsched.core.errors import SemschedError

    assert issubclass(AcceptanceError, SemschedError)


def test_the_module_imports_only_numpy_and_the_core() -> None:
    source = Path(__file__).resolve().parents[2] / "semsched" / "sim" / "acceptance.py"
    lines = source.read_text().splitlines()
    imports = [line.split()[1] for line in lines if line.startswith(("import ", "from "))]
    assert all(name.split(".")[0] in {"__future__", "math", "collections", "dataclasses", "numpy"}
               or name.startswith("semsched.core") for name in imports)
