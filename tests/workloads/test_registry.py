"""Tests for semsched/workloads/registry.py: named workloads, their specs and parameters, the size limit."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from semsched.workloads import (
    DEFAULT_MAX_REQUESTS,
    DEFAULT_TIERS,
    WORKLOADS,
    Workload,
    WorkloadError,
    build_workload,
    describe_workloads,
    parse_workload_spec,
)
from semsched.workloads.arrivals import mean_spike_size, spike_arrivals
from semsched.workloads.lengths import fitted_lengths
from semsched.workloads.registry import (
    GAMMA_CONV_CV,
    SPIKE_MAX_CONCURRENT,
    SPIKE_MAX_OUTPUT_TOKENS,
    SpikesConfig,
    TraceFileConfig,
)
from semsched.workloads.tiers import assign_tiers

SYNTHETIC = ("azure-conv", "azure-code", "spikes", "gamma-conv")
TRACES = ("azure-conv-trace", "azure-code-trace")
HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"


def _same(a: Workload, b: Workload) -> bool:
    arrays = ("arrival_time_s", "prompt_tokens", "output_tokens", "priority")
    return all(np.array_equal(getattr(a, f), getattr(b, f)) for f in arrays) and a.tier == b.tier


def test_registered_names() -> None:
    answers = {"alpaca-eval", "mt-bench", "mixed", "spec-bench", "mbpp-spec"}
    assert set(WORKLOADS) == set(SYNTHETIC) | set(TRACES) | {"trace", "ktas-ed", "production-mix",
                                                                     "mt-bench-turns"} | answers


@pytest.mark.parametrize("name", SYNTHETIC)
def test_synthetic_workloads_are_deterministic_and_tiered(name: str) -> None:
    first = build_workload(name, rate_per_s=20.0, duration_s=60.0, seed=3)
    again = build_workload(name, rate_per_s=20.0, duration_s=60.0, seed=3)
    other = build_workload(name, rate_per_s=20.0, duration_s=60.0, seed=4)
    assert _same(first, again) and not _same(first, other)
    assert first.name == name and first.tiers == DEFAULT_TIERS
    assert set(first.tier) <= {t.name for t in DEFAULT_TIERS}
    assert np.all(first.arrival_time_s < 60.0)


@pytest.mark.parametrize("name", ["azure-conv", "gamma-conv", "spikes"])
def test_synthetic_rate_within_tolerance(name: str) -> None:
    rate_per_s, duration_s = 50.0, 400.0
    workload = build_workload(name, rate_per_s=rate_per_s, duration_s=duration_s, seed=0)
    expected = rate_per_s * duration_s
    # count variance: Poisson = mean; gamma renewal ~ mean * cv^2; spikes ~ spikes * var(batch size)
    spread = {
        "azure-conv": math.sqrt(expected),
        "gamma-conv": GAMMA_CONV_CV * math.sqrt(expected),
        "spikes": math.sqrt(expected / mean_spike_size(SPIKE_MAX_CONCURRENT) * (SPIKE_MAX_CONCURRENT**2 - 1) / 12),
    }[name]
    assert abs(len(workload) - expected) < 5 * spread


def test_spikes_gap_follows_rate() -> None:
    workload = build_workload("spikes", rate_per_s=505.0, duration_s=5.0, seed=1)
    instants, counts = np.unique(workload.arrival_time_s, return_counts=True)
    assert np.allclose(np.diff(instants), 0.1)  # seed 000's 0.1 s gap
    assert counts.max() <= SPIKE_MAX_CONCURRENT


def test_num_requests_limits_and_suffices() -> None:
    for name in SYNTHETIC:
        assert len(build_workload(name, rate_per_s=5.0, seed=0, num_requests=123)) == 123
        assert len(build_workload(name, rate_per_s=5.0, duration_s=1e4, seed=0, num_requests=7)) == 7
    with pytest.raises(WorkloadError, match="duration_s or num_requests"):
        build_workload("azure-conv", rate_per_s=5.0, seed=0)


def test_unknown_name_lists_known_names() -> None:
    with pytest.raises(WorkloadError) as info:
        build_workload("azure-chat", rate_per_s=1.0, duration_s=1.0, seed=0)
    for name in (*SYNTHETIC, *TRACES):
        assert name in str(info.value)


def test_bad_parameters_are_named() -> None:
    with pytest.raises(WorkloadError, match="rate_per_s"):
        build_workload("azure-conv", rate_per_s=-1.0, duration_s=1.0, seed=0)
    with pytest.raises(WorkloadError, match="duration_s"):
        build_workload("azure-conv", rate_per_s=1.0, duration_s=0.0, seed=0)


@pytest.mark.data
@pytest.mark.parametrize("name", TRACES)
def test_real_trace_workloads_rescaled_and_cut(name: str) -> None:
    full = build_workload(name, rate_per_s=10.0, seed=0)
    assert full.mean_rate() == pytest.approx(10.0)
    cut = build_workload(name, rate_per_s=10.0, duration_s=100.0, seed=0)
    assert np.all(cut.arrival_time_s < 100.0) and 0 < len(cut) < len(full)
    assert _same(cut, build_workload(name, rate_per_s=10.0, duration_s=100.0, seed=0))


def test_file_paths_as_names(tmp_path: Path) -> None:
    csv_path = tmp_path / "mine.csv"
    csv_path.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:00:00,5,6\n2023-11-16 18:00:02,7,8\n2023-11-16 18:00:03,9,10\n",
        encoding="utf-8",
    )
    from_csv = build_workload(str(csv_path), rate_per_s=2.0, seed=0)
    assert list(from_csv.arrival_time_s) == [0.0, 2 / 3, 1.0]
    assert from_csv.tiers == DEFAULT_TIERS
    jsonl_path = tmp_path / "mine.jsonl"
    records = [{"timestamp": 1000 * i, "input_length": 3, "output_length": 4, "tier": "SYSTEM"} for i in range(3)]
    jsonl_path.write_text("\n".join(json.dumps(r) for r in records), encoding="utf-8")
    from_jsonl = build_workload(str(jsonl_path), rate_per_s=1.0, seed=0)
    assert from_jsonl.tier == ("SYSTEM",) * 3  # tiers from the file are kept


# ---- specs and parameters --------------------------------------------------------------------------------
def test_spikes_gap_and_max_concurrent_from_the_spec() -> None:
    workload = build_workload("spikes:gap_s=0.5;max_concurrent=5", rate_per_s=1000.0, duration_s=20.0, seed=2)
    instants, counts = np.unique(workload.arrival_time_s, return_counts=True)
    assert np.allclose(instants, np.arange(40) * 0.5)  # every gap_s, whatever rate_per_s says
    assert counts.min() == 1 and counts.max() == 5


def test_spikes_default_gap_unchanged_by_parsing() -> None:
    default = build_workload("spikes", rate_per_s=505.0, duration_s=3.0, seed=5)
    explicit = build_workload("spikes:gap_s=0.1;max_concurrent=100", rate_per_s=1.0, duration_s=3.0, seed=5)
    assert _same(default, explicit)


def test_spikes_with_num_requests_cut_the_last_spike() -> None:
    workload = build_workload("spikes:gap_s=1;max_concurrent=1000000", rate_per_s=1.0, seed=0, num_requests=17)
    assert len(workload) == 17 and np.all(workload.arrival_time_s == 0.0)


# ---- spikes: urgency and the output cap ------------------------------------------------------------------
def _spikes_drawn_as_before(seed: int, duration_s: float) -> Workload:
    """Spikes every 0.1 s drawn as ``spikes`` drew them before it had urgency: arrivals, lengths, then tiers from
    one generator, lengths uncapped."""
    rng = np.random.default_rng(seed)
    times_s = spike_arrivals(0.1, SPIKE_MAX_CONCURRENT, duration_s, rng)
    prompt_tokens, output_tokens = fitted_lengths("azure-conv").sample(times_s.size, rng)
    return assign_tiers(Workload.untiered("spikes", times_s, prompt_tokens, output_tokens), DEFAULT_TIERS, rng)


@pytest.mark.parametrize(
    "spec",
    [
        "spikes:gap_s=0.1",
        "spikes:gap_s=0.1;urgency_levels=3;urgency_weights=1/2/3;urgency_error=0.4",
        "spikes:gap_s=0.1;urgency_levels=1",
        "spikes:gap_s=0.1;max_output_tokens=2147483647",
    ],
)
def test_spikes_urgency_leaves_arrivals_lengths_and_tiers_as_they_were(spec: str) -> None:
    before = _spikes_drawn_as_before(seed=4, duration_s=5.0)
    assert before.output_tokens.max() > SPIKE_MAX_OUTPUT_TOKENS  # the default cap changes something
    built = build_workload(spec, rate_per_s=1.0, duration_s=5.0, seed=4)
    assert np.array_equal(built.arrival_time_s, before.arrival_time_s)
    assert np.array_equal(built.prompt_tokens, before.prompt_tokens)
    assert built.tier == before.tier and np.array_equal(built.priority, before.priority)
    cap = SpikesConfig().max_output_tokens if "max_output_tokens" not in spec else None
    expected_output = before.output_tokens if cap is None else np.minimum(before.output_tokens, cap)
    assert np.array_equal(built.output_tokens, expected_output)


def test_spikes_cap_outputs_at_500_by_default() -> None:
    assert SpikesConfig().max_output_tokens == SPIKE_MAX_OUTPUT_TOKENS == 500
    workload = build_workload("spikes", rate_per_s=505.0, duration_s=5.0, seed=4)
    assert workload.output_tokens.max() == SPIKE_MAX_OUTPUT_TOKENS
    lower = build_workload("spikes:max_output_tokens=100", rate_per_s=505.0, duration_s=5.0, seed=4)
    assert np.array_equal(lower.output_tokens, np.minimum(workload.output_tokens, 100))
    assert build_workload("azure-conv", rate_per_s=50.0, duration_s=100.0, seed=4).output_tokens.max() > 500


def _within(frequencies: np.ndarray, probs: np.ndarray, n: int) -> bool:
    """Every frequency within five standard deviations of its probability over ``n`` draws."""
    return bool(np.all(np.abs(frequencies - probs) <= 5 * np.sqrt(probs * (1 - probs) / n)))


@pytest.mark.parametrize(
    ("spec", "weights"),
    [
        ("spikes", (1, 1, 1, 1, 1)),
        ("spikes:urgency_levels=3", (1, 1, 1)),
        ("spikes:urgency_levels=4;urgency_weights=1/0/2/5", (1, 0, 2, 5)),
    ],
)
def test_spikes_urgency_levels_follow_their_weights(spec: str, weights: tuple[int, ...]) -> None:
    workload = build_workload(spec, rate_per_s=505.0, seed=8, num_requests=20_000)
    assert workload.urgency is not None and workload.urgency_true is None
    levels = len(weights)
    probs = np.asarray(weights, dtype=np.float64) / sum(weights)
    frequencies = np.bincount(workload.urgency, minlength=levels) / len(workload)
    assert frequencies.size == levels  # nothing outside 0..levels-1
    assert set(np.flatnonzero(frequencies)) == set(np.flatnonzero(probs))
    assert _within(frequencies, probs, len(workload))


@pytest.mark.parametrize("error", [0.05, 0.3, 1.0])
def test_spikes_urgency_error_is_the_fraction_believed_wrong(error: float) -> None:
    exact = build_workload("spikes", rate_per_s=505.0, seed=3, num_requests=2_000)
    noisy = build_workload(f"spikes:urgency_error={error}", rate_per_s=505.0, seed=3, num_requests=2_000)
    assert noisy.urgency is not None and noisy.urgency_true is not None and exact.urgency is not None
    assert np.array_equal(noisy.urgency_true, exact.urgency)  # the same true levels, now kept beside the belief
    assert np.mean(noisy.urgency != noisy.urgency_true) == pytest.approx(round(error * 2_000) / 2_000)
    assert noisy.urgency.min() >= 0 and noisy.urgency.max() <= 4


def test_spikes_urgency_reaches_the_requests() -> None:
    workload = build_workload("spikes:urgency_error=0.5", rate_per_s=505.0, seed=3, num_requests=50)
    requests = workload.to_requests()
    assert workload.urgency is not None and workload.urgency_true is not None
    assert [r.urgency for r in requests] == list(workload.urgency)
    assert [r.urgency_true for r in requests] == list(workload.urgency_true)


def test_gamma_cv_parameter() -> None:
    smooth = build_workload("gamma-conv:cv=0.1", rate_per_s=10.0, duration_s=200.0, seed=0)
    gaps = np.diff(smooth.arrival_time_s)
    assert gaps.std() / gaps.mean() == pytest.approx(0.1, rel=0.2)


@pytest.mark.parametrize("name", SYNTHETIC)
def test_length_caps_cut_long_requests_only(name: str) -> None:
    plain = build_workload(name, rate_per_s=20.0, duration_s=60.0, seed=1)
    capped = build_workload(
        f"{name}:max_prompt_tokens=300;max_output_tokens=50", rate_per_s=20.0, duration_s=60.0, seed=1
    )
    assert np.array_equal(capped.prompt_tokens, np.minimum(plain.prompt_tokens, 300))
    assert np.array_equal(capped.output_tokens, np.minimum(plain.output_tokens, 50))
    assert capped.prompt_tokens.max() == 300 and capped.output_tokens.max() == 50  # the caps did bite
    assert np.array_equal(capped.arrival_time_s, plain.arrival_time_s) and capped.tier == plain.tier


def test_tier_weights_choose_the_mix() -> None:
    only_standard = build_workload("azure-conv:tier_weights=0/0/1/0", rate_per_s=20.0, duration_s=10.0, seed=0)
    assert set(only_standard.tier) == {"STANDARD"}
    mixed = build_workload("azure-conv:tier_weights=1/1/0/0", rate_per_s=50.0, duration_s=20.0, seed=0)
    assert set(mixed.tier) == {"SYSTEM", "PREMIUM"}


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ("spikes:gap=1", "workload 'spikes': unknown parameter 'gap' (known: "),
        ("spikes:gap_s=1;gap_s=2", "workload 'spikes': parameter 'gap_s' given twice"),
        ("spikes:gap_s=soon", "workload 'spikes': parameter 'gap_s' must be float, got 'soon'"),
        ("spikes:gap_s=0", "workload 'spikes': gap_s: must be a finite number > 0"),
        ("spikes:gap_s=inf", "workload 'spikes': gap_s: must be a finite number > 0"),
        ("spikes:gap_s=nan", "workload 'spikes': gap_s: must be a finite number > 0"),
        ("spikes:max_concurrent=0", "max_concurrent: must be an integer from 1 to 1,000,000"),
        ("spikes:max_concurrent=99999999999999999999", "max_concurrent: must be an integer from 1 to 1,000,000"),
        ("spikes:max_concurrent=2.5", "parameter 'max_concurrent' must be int, got '2.5'"),
        ("spikes:urgency_levels=0", "workload 'spikes': urgency_levels: must be an integer from 1 to 1,000"),
        ("spikes:urgency_weights=1/1", "urgency_weights: 2 given, one per urgency level needed (5)"),
        ("spikes:urgency_weights=0/0/0/0/0", "urgency_weights: must be finite numbers >= 0, not all zero"),
        ("spikes:urgency_error=1.5", "workload 'spikes': urgency_error: must be a number from 0 to 1"),
        ("spikes:urgency_error=nan", "urgency_error: must be a number from 0 to 1"),
        ("spikes:urgency_levels=1;urgency_error=0.1", "urgency_error: a wrong label needs at least 2 urgency"),
        ("spikes:max_output_tokens=0", "workload 'spikes': max_output_tokens: must be an integer from 1"),
        ("gamma-conv:cv=0", "workload 'gamma-conv': cv: must be a number from 0.01 to 100"),
        ("gamma-conv:cv=1e999", "workload 'gamma-conv': cv: must be a number from 0.01 to 100"),
        ("azure-conv:max_prompt_tokens=0", "max_prompt_tokens: must be an integer from 1 to 2147483647"),
        ("azure-conv:max_output_tokens=99999999999999999999", "max_output_tokens: must be an integer from 1"),
        ("azure-conv:tier_weights=1/x/1/1", "parameter 'tier_weights' must be a '/'-separated list of float"),
        ("azure-conv:tier_weights=0/0/0/0", "tier_weights: must be finite numbers >= 0, not all zero"),
        ("azure-conv:tier_weights=1/-1/1/1", "tier_weights: must be finite numbers >= 0"),
        ("azure-conv:tier_weights=1/2", "workload 'azure-conv': tier_weights: 2 given, one per tier needed (4: "),
        ("azure-conv:max_output_tokens=5,tier_weights=1/1/1/1", "separate parameters with ';'"),
        ("azure-conv-trace:rescale=maybe", "parameter 'rescale' must be bool, got 'maybe'"),
        ("trace", "workload 'trace': path: required"),
        ("trace:path=notes.txt", "path: must end in .csv or .jsonl"),
        (":gap_s=1", "the workload name is empty"),
    ],
)
def test_bad_specs_are_one_line_naming_the_parameter(spec: str, needle: str) -> None:
    with pytest.raises(WorkloadError) as info:
        build_workload(spec, rate_per_s=10.0, duration_s=10.0, seed=0)
    assert needle in str(info.value)
    assert "\n" not in str(info.value)


def test_parse_workload_spec_validates_without_building() -> None:
    info, config = parse_workload_spec("spikes:gap_s=0.1;max_concurrent=100")
    assert info.name == "spikes" and config == SpikesConfig(gap_s=0.1, max_concurrent=100)
    info, config = parse_workload_spec("some/dir/mine.jsonl")
    assert info.name == "trace" and config == TraceFileConfig(path="some/dir/mine.jsonl")


@pytest.mark.parametrize(
    ("spec", "uses_rate"),
    [
        ("azure-conv", True),
        ("gamma-conv:cv=2", True),
        ("spikes", True),
        ("spikes:gap_s=0.1", False),
        ("ktas-ed", False),
        ("azure-conv-trace", True),
        ("trace:path=x.csv;rescale=false", False),
    ],
)
def test_uses_rate_says_when_the_rate_is_ignored(spec: str, uses_rate: bool) -> None:
    assert parse_workload_spec(spec)[1].uses_rate is uses_rate


def test_describe_workloads_lists_parameters_with_defaults_and_types() -> None:
    infos = describe_workloads()
    assert [info.name for info in infos] == sorted(WORKLOADS)
    assert all(info.summary and "\n" not in info.summary for info in infos)
    spikes = {p.name: p for p in WORKLOADS["spikes"].parameters}
    assert list(spikes)[:2] == ["gap_s", "max_concurrent"]  # the workload's own parameters first
    assert (spikes["gap_s"].default, spikes["gap_s"].type_name) == (None, "float (optional)")
    assert (spikes["max_concurrent"].default, spikes["max_concurrent"].type_name) == (SPIKE_MAX_CONCURRENT, "int")
    assert spikes["tier_weights"].type_name == "float/float/... (optional)"
    assert spikes["max_output_tokens"].default == SPIKE_MAX_OUTPUT_TOKENS
    assert (spikes["urgency_levels"].default, spikes["urgency_error"].default) == (5, 0.0)
    assert spikes["urgency_weights"].type_name == "float/float/... (optional)"
    assert {p.name for p in WORKLOADS["gamma-conv"].parameters} >= {"cv", "max_prompt_tokens"}
    assert all(p.doc for info in infos for p in info.parameters)


def test_trace_spec_with_parameters(tmp_path: Path) -> None:
    csv_path = tmp_path / "mine.csv"
    rows = "2023-11-16 18:00:00,5,600\n2023-11-16 18:00:02,7000,8\n2023-11-16 18:00:03,9,10\n"
    csv_path.write_text(HEADER + rows, encoding="utf-8")
    kept = build_workload(f"trace:path={csv_path};rescale=false;max_prompt_tokens=4096", rate_per_s=99.0, seed=0)
    assert list(kept.arrival_time_s) == [0.0, 2.0, 3.0]  # its own timing, rate_per_s not used
    assert list(kept.prompt_tokens) == [5, 4096, 9] and kept.name == "mine"
    assert _same(
        build_workload(str(csv_path), rate_per_s=2.0, seed=0),
        build_workload(f"trace:path={csv_path}", rate_per_s=2.0, seed=0),
    )


def test_tier_weights_refused_for_a_trace_that_names_tiers(tmp_path: Path) -> None:
    path = tmp_path / "tiered.jsonl"
    records = [{"timestamp": 1000 * i, "input_length": 3, "output_length": 4, "tier": "SYSTEM"} for i in range(3)]
    path.write_text("\n".join(json.dumps(r) for r in records), encoding="utf-8")
    with pytest.raises(WorkloadError, match="tier_weights: 'tiered' names each request's tier itself"):
        build_workload(f"trace:path={path};tier_weights=1/1/1/1", rate_per_s=1.0, seed=0)


def test_trace_path_that_is_a_directory(tmp_path: Path) -> None:
    folder = tmp_path / "folder.csv"
    folder.mkdir()
    with pytest.raises(WorkloadError, match="is a directory"):
        build_workload(str(folder), rate_per_s=1.0, seed=0)
    with pytest.raises(WorkloadError, match="no such file"):
        build_workload(str(tmp_path / "absent.jsonl"), rate_per_s=1.0, seed=0)


# ---- size limit ------------------------------------------------------------------------------------------
class _Tripwire:
    """Stands in for the random generator: any draw means the workload was generated before being refused."""

    def __getattr__(self, name: str) -> object:
        raise AssertionError(f"the generator's {name} was used before the size check")


@pytest.fixture
def no_generation(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(np.random, "default_rng", lambda seed=None: _Tripwire())


@pytest.mark.parametrize(
    ("spec", "kwargs", "count"),
    [
        ("azure-conv", {"rate_per_s": 1e9, "duration_s": 1.0}, "1,000,000,000"),
        ("gamma-conv", {"rate_per_s": 1e6, "duration_s": 600.0}, "600,000,000"),
        ("spikes", {"rate_per_s": 1e9, "duration_s": 1.0}, "1,000,000,040"),  # whole spikes
        (
            "spikes:gap_s=1e-12;max_concurrent=1",
            {"rate_per_s": 1.0, "duration_s": 3600.0},
            "3,600,000,000,000,000",
        ),
        ("azure-code", {"rate_per_s": 1.0, "num_requests": 10**12}, "1,000,000,000,000"),
        ("azure-conv", {"rate_per_s": 1e308, "duration_s": 1e10}, "more than 10^308"),
    ],
)
def test_too_many_requests_refused_before_anything_is_drawn(
    no_generation: None, spec: str, kwargs: dict[str, float], count: str
) -> None:
    with pytest.raises(WorkloadError) as info:
        build_workload(spec, seed=0, **kwargs)  # type: ignore[arg-type]
    message = str(info.value)
    assert f"would give about {count} requests, more than the limit of 1,000,000" in message
    assert "max_requests" in message and "--max-requests" in message


def test_max_requests_raises_or_lowers_the_limit() -> None:
    with pytest.raises(WorkloadError, match="about 10,000 requests, more than the limit of 9,999"):
        build_workload("azure-conv", rate_per_s=100.0, duration_s=100.0, seed=0, max_requests=9_999)
    assert (
        len(build_workload("azure-conv", rate_per_s=100.0, duration_s=100.0, seed=0, max_requests=10_000)) > 9_000
    )
    assert DEFAULT_MAX_REQUESTS == 1_000_000
    with pytest.raises(WorkloadError, match="max_requests: must be an integer >= 1"):
        build_workload("azure-conv", rate_per_s=1.0, duration_s=1.0, seed=0, max_requests=0)


def test_the_smaller_limit_sizes_the_draw() -> None:
    # a huge duration (or count) beside a small count (or duration) must not size any array
    assert len(build_workload("azure-conv", rate_per_s=1e12, duration_s=1e6, seed=0, num_requests=10)) == 10
    few = build_workload("gamma-conv", rate_per_s=1.0, duration_s=10.0, seed=0, num_requests=10**12)
    assert len(few) < 100 and np.all(few.arrival_time_s < 10.0)


def test_trace_over_the_limit_refused_with_its_count(tmp_path: Path) -> None:
    path = tmp_path / "three.csv"
    path.write_text(HEADER + "2023-11-16 18:00:00,5,6\n2023-11-16 18:00:02,7,8\n2023-11-16 18:00:03,9,10\n")
    with pytest.raises(WorkloadError, match="gives 3 requests, more than the limit of 2"):
        build_workload(str(path), rate_per_s=1.0, seed=0, max_requests=2)


def test_build_arguments_that_overflow_are_named() -> None:
    with pytest.raises(WorkloadError, match="rate_per_s: must be a finite number > 0"):
        build_workload("azure-conv", rate_per_s=10**400, duration_s=1.0, seed=0)
    with pytest.raises(WorkloadError, match="duration_s: must be a finite number > 0"):
        build_workload("azure-conv", rate_per_s=1.0, duration_s=math.inf, seed=0)
    with pytest.raises(WorkloadError, match="num_requests: must be an integer >= 1"):
        build_workload("azure-conv", rate_per_s=1.0, seed=0, num_requests=True)


def test_clients_parameter_draws_clients_from_a_side_stream() -> None:
    plain = build_workload("azure-conv", rate_per_s=5.0, num_requests=200, seed=3)
    drawn = build_workload("azure-conv:clients=3", rate_per_s=5.0, num_requests=200, seed=3)
    assert plain.client is None and drawn.client is not None
    assert set(drawn.client) == {"client-0", "client-1", "client-2"}
    # the arrivals, lengths and tiers of the seed are those of the workload without clients
    assert np.array_equal(plain.arrival_time_s, drawn.arrival_time_s) and plain.tier == drawn.tier
    again = build_workload("azure-conv:clients=3", rate_per_s=5.0, num_requests=200, seed=3)
    assert again.client == drawn.client
    with pytest.raises(WorkloadError, match="clients: must be an integer from 1"):
        build_workload("azure-conv:clients=0", rate_per_s=5.0, num_requests=10, seed=3)


# ---- messages that name what the user typed (issue 28, point 6) ----------------------------------------------
def test_a_directory_is_named_as_one_not_an_unknown_workload(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError, match="is a directory") as error:
        parse_workload_spec(str(tmp_path))
    assert str(tmp_path) in str(error.value) and "unknown workload" not in str(error.value)


def test_a_trace_at_one_instant_names_its_file_and_rescale_false(tmp_path: Path) -> None:
    trace = tmp_path / "one.csv"
    trace.write_text(HEADER + "2023-11-16 18:15:46.6805900,374,44\n")
    with pytest.raises(WorkloadError, match="rescale=false") as error:
        build_workload(str(trace), rate_per_s=4, duration_s=60, seed=0)
    assert str(trace) in str(error.value)
    kept = build_workload(f"trace:path={trace};rescale=false", rate_per_s=4, duration_s=60, seed=0)
    assert len(kept) == 1


def test_an_astronomical_request_count_is_shown_in_g_format() -> None:
    with pytest.raises(WorkloadError) as error:
        build_workload("spikes:gap_s=1e-300", rate_per_s=4, duration_s=5, seed=0)
    count = str(error.value).split("would give about ")[1].split(" requests")[0]
    assert "e+" in count and len(count) < 12, error.value
