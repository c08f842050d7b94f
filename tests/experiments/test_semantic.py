"""``semsched reproduce semantic`` (seed 000): the --quick report's structure, and its numbers recomputed from
requests.csv; small pieces on their own."""

from __future__ import annotations

import csv
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from semsched.experiments import ExperimentContext
from semsched.experiments.semantic import (
    NUM_SPIKES,
    SPIKE_BASELINES,
    Grid,
    burst,
    burst_duration_s,
    spikes_spec,
)
from tests.experiments.conftest import QuickReports

FIGURES = {
    "fig2a",
    "fig2b",
    "fig2c",
    "fig2d",
    "fig3a",
    "fig3b",
    "table1",
    "table2",
    "fig4a",
    "fig4b",
    "fig4c",
    "fig4d",
    "beyond-mistakes",
    "beyond-tiers",
    "beyond-cache",
    "beyond-stage",
}


@pytest.fixture(scope="module")
def report(quick_reports: QuickReports) -> Path:
    """The session's ``--quick`` report (tests/experiments/conftest.py), made with ``--seed 2``."""
    return quick_reports.path("semantic")


@pytest.fixture(scope="module")
def figures(report: Path) -> dict[str, dict[str, Any]]:
    return {f["id"]: f for f in json.loads((report / "results.json").read_text())["figures"]}


@pytest.fixture(scope="module")
def rows(report: Path) -> list[dict[str, str]]:
    with (report / "requests.csv").open(newline="") as handle:
        return list(csv.DictReader(handle))


def _level(row: dict[str, str]) -> int:
    return int(row["urgency_true"] or row["urgency"])


def _mean_u0(rows: list[dict[str, str]]) -> float:
    values = [float(r["normalized_latency_s_per_token"]) for r in rows if _level(r) == 0]
    return float(np.mean(values))


def test_every_figure_has_paper_ours_config_and_a_png(report: Path, figures: dict[str, dict[str, Any]]) -> None:
    assert set(figures) == FIGURES
    text = (report / "report.md").read_text()
    for figure_id, figure in figures.items():
        assert figure["ours"] and figure["config"] and figure["title"] in text
        assert figure["paper"] or figure["beyond_paper"], figure_id
        assert (report / f"{figure_id}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert figures["fig2c"]["config"]["seeds"] == [2]


def test_spike_numbers_and_ratios_come_from_requests_csv(
    figures: dict[str, dict[str, Any]], rows: list[dict[str, str]]
) -> None:
    fig2c = figures["fig2c"]
    top = str(max(Grid.of(ExperimentContext("semantic", quick=True, seed=2)).max_concurrent))
    mine = [r for r in rows if r["figure"] == "fig2c" and r["max_concurrent"] == top]
    by_policy: dict[str, list[dict[str, str]]] = defaultdict(list)
    for row in mine:
        by_policy[row["policy"]].append(row)
    assert set(by_policy) == {*SPIKE_BASELINES, "semantic"}
    assert len({len(v) for v in by_policy.values()}) == 1, "every policy of a point runs on the same requests"
    u0 = {policy: _mean_u0(policy_rows) for policy, policy_rows in by_policy.items()}
    for policy, value in u0.items():
        assert fig2c["ours"]["medians"][policy][top]["urgency_0"] == pytest.approx(value, rel=1e-9)
    for baseline in SPIKE_BASELINES:
        ratio = fig2c["ratios"][f"{baseline} / semantic at {top} concurrent"]
        assert ratio == pytest.approx(u0[baseline] / u0["semantic"], rel=1e-9)
    assert fig2c["ratios"]["fcfs / semantic at 100 concurrent (paper)"] == 8.7


def test_urgency_error_changes_only_the_believed_labels(
    figures: dict[str, dict[str, Any]], rows: list[dict[str, str]]
) -> None:
    mine = [r for r in rows if r["figure"] == "fig2a" and r["policy"] == "semantic"]
    errors = sorted({r["urgency_error"] for r in mine})
    runs = {e: [r for r in mine if r["urgency_error"] == e] for e in errors}
    same = [(r["arrival_time_s"], r["prompt_tokens"], r["output_tokens"], _level(r)) for r in runs[errors[0]]]
    for error, error_rows in runs.items():
        assert [
            (r["arrival_time_s"], r["prompt_tokens"], r["output_tokens"], _level(r)) for r in error_rows
        ] == same
        wrong = np.mean([r["urgency"] != r["urgency_true"] for r in error_rows])
        assert wrong == pytest.approx(float(error), abs=0.01)
        medians = figures["fig2a"]["ours"]["semantic_medians"][f"{float(error):g}"]
        assert medians["urgency_0"] == pytest.approx(_mean_u0(error_rows), rel=1e-9)


def test_predictor_tables_record_each_setting(
    figures: dict[str, dict[str, Any]], rows: list[dict[str, str]]
) -> None:
    predictors = {r["predictor"] for r in rows if r["figure"] == "table1"}
    assert predictors == set(figures["table1"]["config"]["predictors"])
    assert len(predictors) == 8 and all(p.endswith("batch_size=64") for p in predictors)
    assert set(figures["table2"]["ours"]["medians"]) == {"full", "immediate"}


def test_overtaken_share_is_recomputed_from_requests_csv(
    figures: dict[str, dict[str, Any]], rows: list[dict[str, str]]
) -> None:
    ours = figures["beyond-mistakes"]["ours"]["medians"]
    for source, numbers in ours.items():
        mine = [r for r in rows if r["figure"] == "beyond-mistakes" and r["urgency_source"] == source]
        level = np.array([_level(r) for r in mine])
        arrival = np.array([float(r["arrival_time_s"]) for r in mine])
        scheduled = arrival + np.array([float(r["queueing_delay_s"]) for r in mine])
        urgent = np.flatnonzero(level == 0)
        overtaken = [np.any((level > 0) & (arrival > arrival[i]) & (scheduled < scheduled[i])) for i in urgent]
        assert numbers["overtaken_urgency_0"] == pytest.approx(float(np.mean(overtaken)), abs=1e-12)
    assert ours["expert"]["overtaken_urgency_0"] == 0.0  # exact labels: an urgent patient is never overtaken


def test_a_burst_holds_exactly_its_spikes() -> None:
    for gap_s in (0.1, 1.0):
        workload = burst(spikes_spec(gap_s, 7), gap_s, NUM_SPIKES, seed=0)
        assert np.unique(workload.arrival_time_s).size == NUM_SPIKES
        assert workload.arrival_time_s.max() < burst_duration_s(gap_s, NUM_SPIKES)


def test_quick_grid_is_one_seed_and_full_is_three() -> None:
    quick = Grid.of(ExperimentContext("semantic", quick=True, seed=4))
    full = Grid.of(ExperimentContext("semantic", quick=False, seed=4))
    assert quick.seeds == (4,) and full.seeds == (4, 5, 6)
    assert quick.errors[0] == full.errors[0] == 0.1 and quick.errors[-1] == full.errors[-1] == 0.9
    assert max(quick.max_concurrent) == max(full.max_concurrent) == 100
