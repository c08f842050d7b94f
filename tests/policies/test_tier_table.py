"""A deployment's tier table in YAML (semsched/core/tiers.py): read, checked field by field, written back."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from semsched.core.tiers import DEFAULT_TIERS, TierError
from semsched.policies.tier_table import load_tier_table, tier_table_yaml

TABLE = """
tiers:
  - {name: BULK, priority: 5, weight: 0.7, e2e_slo_ms: 60000, fair_share: 0.2}
  - {name: GOLD, priority: 0, weight: 0.3, ttft_slo_ms: 300, tpot_slo_ms: 40, reserve_fraction: 0.25}
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "tiers.yaml"
    path.write_text(text)
    return path


def test_a_table_is_read_in_priority_order_with_slos_in_seconds(tmp_path: Path) -> None:
    gold, bulk = load_tier_table(_write(tmp_path, TABLE))
    assert (gold.name, gold.priority, gold.weight) == ("GOLD", 0, 0.3)
    assert (gold.ttft_slo_s, gold.tpot_slo_s, gold.e2e_slo_s) == (0.3, 0.04, None)
    assert (gold.fair_share, gold.reserve_fraction) == (0.0, 0.25)
    assert (bulk.name, bulk.e2e_slo_s, bulk.fair_share, bulk.reserve_fraction) == ("BULK", 60.0, 0.2, 0.0)


def test_written_tables_read_back_the_same(tmp_path: Path) -> None:
    assert load_tier_table(_write(tmp_path, tier_table_yaml(DEFAULT_TIERS))) == DEFAULT_TIERS
    table = load_tier_table(_write(tmp_path, TABLE))
    assert load_tier_table(_write(tmp_path, tier_table_yaml(table))) == table


@pytest.mark.parametrize(
    ("tiers", "needle"),
    [
        ([{"name": "A", "priority": 0, "ttft_slo": 200}], "tiers[0].ttft_slo: unknown key"),
        ([{"priority": 0}], "tiers[0].name: required"),
        ([{"name": "A"}], "tiers[0].priority: required"),
        ([{"name": "A", "priority": -1}], "tiers[0].priority"),
        ([{"name": "A", "priority": 0, "ttft_slo_ms": 0}], "tiers[0].ttft_slo_ms: must be > 0"),
        ([{"name": "A", "priority": 0, "e2e_slo_ms": "fast"}], "tiers[0].e2e_slo_ms: must be a number"),
        ([{"name": "A", "priority": 0, "weight": -1}], "tiers[0].weight"),
        ([{"name": "A", "priority": 0, "fair_share": 1.5}], "tiers[0].fair_share"),
        ([{"name": "A", "priority": 0}, {"name": "A", "priority": 1}], "duplicate tier name 'A'"),
        ([{"name": "A", "priority": 0}, {"name": "B", "priority": 0}], "priority 0 is given to more than one"),
        ([{"name": "A", "priority": 0, "fair_share": 0.6}, {"name": "B", "priority": 1, "fair_share": 0.6}],
         "fair_share values sum to 1.2"),
        ([{"name": "A", "priority": 0, "reserve_fraction": 0.5},
          {"name": "B", "priority": 1, "reserve_fraction": 0.5}], "must sum to less than 1"),
        ([], "non-empty list"),
        (["PREMIUM"], "tiers[0]: must be a mapping"),
    ],
)
def test_bad_tables_name_the_field(tmp_path: Path, tiers: object, needle: str) -> None:
    path = _write(tmp_path, yaml.safe_dump({"tiers": tiers}))
    with pytest.raises(TierError) as caught:
        load_tier_table(path)
    assert needle in str(caught.value) and str(path) in str(caught.value)


def test_unreadable_files_say_why(tmp_path: Path) -> None:
    with pytest.raises(TierError, match="cannot read it"):
        load_tier_table(tmp_path / "missing.yaml")
    with pytest.raises(TierError, match="not valid YAML"):
        load_tier_table(_write(tmp_path, "tiers: [unclosed"))
    with pytest.raises(TierError, match="one key, 'tiers'"):
        load_tier_table(_write(tmp_path, "- name: A\n"))
