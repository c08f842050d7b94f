"""Tests for semsched/workloads/tiers.py."""

from __future__ import annotations

import numpy as np
import pytest

from semsched.workloads import DEFAULT_TIERS, TierError, TierSpec, assign_tiers, tiers_from_column
from tests.workloads.factories import make_workload


def test_default_tiers_follow_seed_003() -> None:
    by_name = {t.name: t for t in DEFAULT_TIERS}
    assert [t.name for t in DEFAULT_TIERS] == ["SYSTEM", "PREMIUM", "STANDARD", "BACKGROUND"]
    assert [t.priority for t in DEFAULT_TIERS] == [0, 1, 2, 3]
    assert sum(t.weight for t in DEFAULT_TIERS) == pytest.approx(1.0)
    premium, standard, background = by_name["PREMIUM"], by_name["STANDARD"], by_name["BACKGROUND"]
    assert (premium.ttft_slo_s, premium.tpot_slo_s, premium.e2e_slo_s) == (0.2, 0.03, 5.0)
    assert (standard.ttft_slo_s, standard.tpot_slo_s, standard.e2e_slo_s) == (0.5, 0.08, 15.0)
    assert (background.ttft_slo_s, background.tpot_slo_s, background.e2e_slo_s) == (None, None, 60.0)


def test_assign_tiers_proportions_and_priorities() -> None:
    n = 40_000
    workload = make_workload(np.arange(n, dtype=np.float64))
    tiered = assign_tiers(workload, DEFAULT_TIERS, np.random.default_rng(0))
    labels = np.asarray(tiered.tier)
    for spec in DEFAULT_TIERS:
        share = float(np.mean(labels == spec.name))
        tolerance = 5 * np.sqrt(spec.weight * (1 - spec.weight) / n)
        assert abs(share - spec.weight) < tolerance
        assert np.all(tiered.priority[labels == spec.name] == spec.priority)
    assert tiered.tiers == DEFAULT_TIERS
    assert np.array_equal(tiered.prompt_tokens, workload.prompt_tokens)


def test_assign_tiers_weights_override() -> None:
    workload = make_workload(np.arange(100, dtype=np.float64))
    tiered = assign_tiers(workload, DEFAULT_TIERS, np.random.default_rng(1), weights=[0, 0, 0, 1])
    assert set(tiered.tier) == {"BACKGROUND"}
    with pytest.raises(TierError, match="weights"):
        assign_tiers(workload, DEFAULT_TIERS, np.random.default_rng(1), weights=[1, 1])


def test_tiers_from_column_by_name_and_priority() -> None:
    workload = make_workload((0.0, 1.0, 2.0)).with_tiers(DEFAULT_TIERS, tier=("STANDARD",) * 3)
    tiered = tiers_from_column(workload, ["PREMIUM", 3, "SYSTEM"])
    assert tiered.tier == ("PREMIUM", "BACKGROUND", "SYSTEM")
    assert list(tiered.priority) == [1, 3, 0]
    with pytest.raises(TierError, match=r"column_values\[1\]"):
        tiers_from_column(workload, ["PREMIUM", "GOLD", "SYSTEM"])
    with pytest.raises(TierError, match="expected 3"):
        tiers_from_column(workload, ["PREMIUM"], DEFAULT_TIERS)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"name": ""}, "name"),
        ({"weight": -1.0}, "weight"),
        ({"ttft_slo_s": 0.0}, "ttft_slo_s"),
        ({"e2e_slo_s": float("nan")}, "e2e_slo_s"),
    ],
)
def test_tierspec_validation(kwargs: dict[str, object], field: str) -> None:
    base: dict[str, object] = {"name": "X", "priority": 0, "weight": 1.0}
    with pytest.raises(TierError, match=field):
        TierSpec(**(base | kwargs))  # type: ignore[arg-type]


def test_duplicate_tier_names_rejected() -> None:
    workload = make_workload()
    with pytest.raises(TierError, match="duplicate"):
        assign_tiers(workload, (DEFAULT_TIERS[0], DEFAULT_TIERS[0]), np.random.default_rng(0))
