"""Tests for semsched/workloads/production.py: the production mix (issue 31) and its half-speculating cluster.

Every build reads the shared data (the Azure trace, the answer files, the KTAS triage file), so these tests are
marked ``data``."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from semsched.core.tiers import DEFAULT_TIERS
from semsched.workloads import DataNotFoundError, WorkloadError, build_workload
from semsched.workloads.ktas_ed import predicted_levels, triage_rows
from semsched.workloads.production import (
    PRODUCTION_LENGTH_PREDICTOR,
    PRODUCTION_ROUTER,
    PRODUCTION_TIER_WEIGHTS,
    TRACE_FILE,
    URGENT_SHARE,
    production_cluster,
    production_mix,
)
from semsched.workloads.traces import DATA_DIR_ENV, find_data_file, load_azure_csv
from semsched.workloads.workload import Workload

pytestmark = pytest.mark.data

N = 3000


def _columns(workload: Workload) -> tuple[object, ...]:
    assert workload.urgency is not None and workload.urgency_true is not None
    return (workload.arrival_time_s.tolist(), workload.prompt_tokens.tolist(), workload.output_tokens.tolist(),
            workload.tier, workload.urgency.tolist(), workload.urgency_true.tolist(), workload.prompt_text)


def test_the_same_seed_gives_the_same_workload_and_another_seed_another() -> None:
    first, again, other = production_mix(8.0, 1, 500), production_mix(8.0, 1, 500), production_mix(8.0, 2, 500)
    assert _columns(first) == _columns(again)
    assert first.arrival_time_s.tolist() != other.arrival_time_s.tolist()
    assert first.prompt_text != other.prompt_text


def test_tier_and_urgency_shares_are_the_documented_ones() -> None:
    workload = production_mix(10.0, 0, N)
    shares = Counter(workload.tier)
    expected = np.asarray(PRODUCTION_TIER_WEIGHTS) / sum(PRODUCTION_TIER_WEIGHTS)
    for tier, share in zip(DEFAULT_TIERS, expected, strict=True):
        sd = np.sqrt(share * (1 - share) / N)
        assert abs(shares[tier.name] / N - share) < 4 * sd, tier.name
        assert set(workload.priority[np.asarray(workload.tier) == tier.name].tolist()) <= {tier.priority}
    assert workload.urgency is not None and workload.urgency_true is not None
    urgent = workload.urgency >= 0
    assert abs(urgent.mean() - URGENT_SHARE) < 4 * np.sqrt(URGENT_SHARE * (1 - URGENT_SHARE) / N)
    assert np.array_equal(urgent, workload.urgency_true >= 0)  # the truth stands beside every prediction only
    requests = workload.to_requests()
    assert sum(r.urgency is None for r in requests) == int((~urgent).sum())


def test_urgency_is_a_triage_patients_predicted_level_beside_the_experts() -> None:
    workload = production_mix(10.0, 3, 1000)
    path = find_data_file("ktas_triage.csv")
    pairs = set(zip((predicted_levels(path, None, 5) - 1).tolist(),
                    (triage_rows(path).records.expert - 1).tolist(), strict=True))
    assert workload.urgency is not None and workload.urgency_true is not None
    urgent = workload.urgency >= 0
    drawn = set(zip(workload.urgency[urgent].tolist(), workload.urgency_true[urgent].tolist(), strict=True))
    assert drawn <= pairs
    assert any(u != t for u, t in drawn)  # predictions, not the expert labels


def test_arrivals_are_a_trace_window_rescaled_to_the_rate() -> None:
    workload = production_mix(7.5, 4, 200)
    times = workload.arrival_time_s
    assert times[0] == 0.0 and workload.mean_rate() == pytest.approx(7.5)
    trace_gaps = np.diff(load_azure_csv(find_data_file(TRACE_FILE)).arrival_time_s)
    gaps = np.diff(times)
    windows = np.lib.stride_tricks.sliding_window_view(trace_gaps, gaps.size)
    sums = windows.sum(axis=1)
    same_shape = np.all(np.isclose(windows / sums[:, None], gaps / gaps.sum(), rtol=1e-9, atol=1e-12), axis=1)
    assert same_shape.any()  # the gaps are one run of the trace's consecutive gaps, all stretched alike
    other = production_mix(7.5, 5, 200)
    assert not np.allclose(np.diff(other.arrival_time_s), gaps)  # another seed, another window


def test_prompts_are_real_with_many_lengths_per_prompt() -> None:
    workload = production_mix(10.0, 0, N)
    assert workload.prompt_text is not None
    lengths: dict[str, set[int]] = {}
    for text, output in zip(workload.prompt_text, workload.output_tokens.tolist(), strict=True):
        lengths.setdefault(text, set()).add(output)
    assert max(len(v) for v in lengths.values()) > 1
    assert workload.prompt_tokens.min() >= 1 and workload.output_tokens.min() >= 1


def test_urgent_share_changes_neither_arrivals_nor_tiers() -> None:
    base = production_mix(10.0, 6, 400)
    none = build_workload("production-mix:urgent_share=0", rate_per_s=10.0, seed=6, num_requests=400)
    assert none.urgency is None
    assert base.arrival_time_s.tolist() == none.arrival_time_s.tolist() and base.tier == none.tier


def test_missing_data_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    missing = tmp_path / "nowhere.csv"
    with pytest.raises(WorkloadError, match=r"trace: arrival trace .*nowhere\.csv not found"):
        build_workload(f"production-mix:trace={missing}", rate_per_s=5.0, seed=0, num_requests=10)
    with pytest.raises(WorkloadError, match=r"triage: triage file .*nowhere\.csv not found"):
        build_workload(f"production-mix:triage={missing}", rate_per_s=5.0, seed=0, num_requests=10)
    with pytest.raises(WorkloadError, match=r"answers: .*no alpaca-eval answer files"):
        build_workload(f"production-mix:answers={tmp_path}", rate_per_s=5.0, seed=0, num_requests=10)
    with pytest.raises(WorkloadError, match="num_requests: the arrival trace has"):
        production_mix(5.0, 0, 10**6)
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path))
    with pytest.raises(DataNotFoundError, match=TRACE_FILE):
        production_mix(5.0, 0, 10)


def test_the_cluster_speculates_on_half_its_engines() -> None:
    cluster = production_cluster(num_instances=4)
    assert [cluster.speculates(i) for i in range(4)] == [True, True, False, False]
    assert cluster.router == PRODUCTION_ROUTER
    assert cluster.length_predictor is not None and cluster.length_predictor.spec == PRODUCTION_LENGTH_PREDICTOR
    assert cluster.speculation is not None and cluster.speculation.fallback is not None
    assert [production_cluster(num_instances=n).speculating_instances for n in (1, 2, 5)] == [0, 1, 2]
