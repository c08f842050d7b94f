"""Tests for semsched/workloads/registry.py."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from semsched.workloads import DEFAULT_TIERS, WORKLOADS, Workload, WorkloadError, build_workload
from semsched.workloads.arrivals import mean_spike_size
from semsched.workloads.registry import GAMMA_CONV_CV, SPIKE_MAX_CONCURRENT

SYNTHETIC = ("azure-conv", "azure-code", "spikes", "gamma-conv")
TRACES = ("azure-conv-trace", "azure-code-trace")


def _same(a: Workload, b: Workload) -> bool:
    arrays = ("arrival_time_s", "prompt_tokens", "output_tokens", "priority")
    return all(np.array_equal(getattr(a, f), getattr(b, f)) for f in arrays) and a.tier == b.tier


def test_registered_names() -> None:
    assert set(WORKLOADS) == set(SYNTHETIC) | set(TRACES)


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
