"""``semsched reproduce semantic`` (seed 000): the --quick report's structure, its curves, claims and sanity
gates recomputed from requests.csv; small pieces on their own."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from semsched.experiments import ExperimentContext
from semsched.experiments.curves import MIN_LOADS, MIN_SEEDS, VERDICTS, Band
from semsched.experiments.semantic import (
    GATE_TOLERANCE,
    HEADLINE_MAX_CONCURRENT,
    NUM_SPIKES,
    PAPER_AT_HEADLINE,
    SPIKE_BASELINES,
    Grid,
    burst,
    burst_duration_s,
    gap_for_load,
    load_of_gap,
    spikes_spec,
)
from tests.experiments.conftest import QuickReports

FIGURES = {"fig2c", "fig2c-burst", "fig4", "fig4-points", "fig3", "fig2a", "fig2b", "tables"}


@pytest.fixture(scope="module")
def report(quick_reports: QuickReports) -> Path:
    """The session's ``--quick`` report (tests/experiments/conftest.py), made with ``--seed 2``."""
    return quick_reports.path("semantic")


def _level(row: dict[str, str]) -> int:
    return int(row["urgency_true"] or row["urgency"])


def _mean_u0(rows: list[dict[str, str]]) -> float:
    values = [float(r["normalized_latency_s_per_token"]) for r in rows if _level(r) == 0]
    return float(np.mean(values))


def _u0_by_policy(rows: list[dict[str, str]]) -> dict[str, float]:
    by_policy: dict[str, list[dict[str, str]]] = defaultdict(list)
    for row in rows:
        by_policy[row["policy"]].append(row)
    assert len({len(v) for v in by_policy.values()}) == 1, "every policy of a point runs on the same requests"
    return {policy: _mean_u0(policy_rows) for policy, policy_rows in by_policy.items()}


def test_every_figure_has_paper_ours_config_and_a_png(report: Path, figures: dict[str, dict[str, Any]]) -> None:
    assert set(figures) == FIGURES
    text = (report / "report.md").read_text()
    for figure_id, figure in figures.items():
        assert figure["ours"] and figure["config"] and figure["title"] in text
        assert figure["paper"] or figure["beyond_paper"], figure_id
        assert (report / f"{figure_id}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert figures["fig2c"]["config"]["seeds"] == [2]


def test_claims_name_a_figure_and_a_computed_verdict(results: dict[str, Any]) -> None:
    claims = results["claims"]
    assert len(claims) >= 10
    for claim in claims:
        assert claim["verdict"] in VERDICTS and claim["why"] and claim["figure"] in FIGURES, claim
    assert {c["paper"] for c in claims} >= {f"{v:g}" for v in PAPER_AT_HEADLINE.values()}


def test_spike_curve_comes_from_requests_csv_and_its_loads_set_the_gaps(
    figures: dict[str, dict[str, Any]], rows: list[dict[str, str]]
) -> None:
    ours = figures["fig2c"]["ours"]
    capacity = ours["capacity_requests_per_s"]
    paper_loads = set(ours["paper_gap_loads"].values())
    assert paper_loads == {load_of_gap(g, capacity) for g in (1.0, 0.1)}
    for load in ours["loads"]:
        mine = [r for r in rows if r["figure"] == "fig2c" and float(r["load"]) == load]
        u0 = _u0_by_policy(mine)
        assert set(u0) == {*SPIKE_BASELINES, "semantic"}
        for policy, value in u0.items():
            assert ours["per_seed"][policy][f"{load:g}"] == [pytest.approx(value, rel=1e-9)]
        gap = float(mine[0]["gap_s"])
        arrivals = np.unique([float(r["arrival_time_s"]) for r in mine])
        assert np.diff(arrivals) == pytest.approx(gap, rel=1e-6)
        if load not in paper_loads:
            assert gap == pytest.approx(gap_for_load(load, capacity), rel=1e-12)


def test_headline_claims_are_the_ratios_at_the_papers_gap(
    figures: dict[str, dict[str, Any]], results: dict[str, Any]
) -> None:
    ours = figures["fig2c"]["ours"]
    top = f"{ours['paper_gap_loads']['0.1']:g}"
    semantic = ours["per_seed"]["semantic"][top]
    claims = {c["claim"]: c for c in results["claims"]}
    for baseline in SPIKE_BASELINES:
        band = Band.of([b / s for b, s in zip(ours["per_seed"][baseline][top], semantic, strict=True)])
        claim = claims[f"{baseline.upper()} / semantic, urgency 0, gap 0.1 s, 100 concurrent"]
        assert claim["ours"] == band.cell()


def test_burst_sweep_caps_outputs_and_runs_every_policy_on_the_same_requests(
    figures: dict[str, dict[str, Any]], rows: list[dict[str, str]]
) -> None:
    mine = [r for r in rows if r["figure"] == "fig2c-burst"]
    settings = {(r["output_cap"], r["num_spikes"]) for r in mine}
    assert len(settings) == len(figures["fig2c-burst"]["ours"]["bands"])
    for cap, spikes in settings:
        point = [r for r in mine if (r["output_cap"], r["num_spikes"]) == (cap, spikes)]
        assert max(int(r["output_tokens"]) for r in point) <= int(cap)
        assert len({r["arrival_time_s"] for r in point}) == int(spikes)
        u0 = _u0_by_policy(point)
        band = figures["fig2c-burst"]["ours"]["bands"][f"cap {cap}, {spikes} spikes"]["fcfs"]
        assert band["median"] == pytest.approx(u0["fcfs"] / u0["semantic"], rel=1e-9)


def test_urgency_oracle_gate_holds_on_urgency_0(
    figures: dict[str, dict[str, Any]], rows: list[dict[str, str]]
) -> None:
    """Exact urgency never does worse on urgency 0 than a noisy predictor (beyond run noise)."""
    mine = [r for r in rows if r["figure"] == "fig2a"]
    errors = sorted({float(r["urgency_error"]) for r in mine})
    assert errors[0] == 0.0
    u0 = {e: _mean_u0([r for r in mine if float(r["urgency_error"]) == e]) for e in errors}
    for error in errors[1:]:
        assert u0[0.0] <= u0[error] * (1 + GATE_TOLERANCE), (error, u0)
    assert all(figures["fig2a"]["ours"]["gate_oracle_le_predicted"].values())


def test_length_oracle_gate_holds_on_all_requests(
    figures: dict[str, dict[str, Any]], rows: list[dict[str, str]]
) -> None:
    """True lengths never do worse on the requests' overall normalized latency (what a length estimate orders)
    than noisy buckets or one global length (beyond run noise), recomputed from requests.csv."""
    mine = [r for r in rows if r["figure"] == "fig2b"]
    overall = {
        setting: float(
            np.mean([float(r["normalized_latency_s_per_token"]) for r in mine if r["length_setting"] == setting])
        )
        for setting in {r["length_setting"] for r in mine}
    }
    oracle = overall.pop("0 (true lengths)")
    assert "one global length" in overall
    for setting, value in overall.items():
        assert oracle <= value * (1 + GATE_TOLERANCE), (setting, oracle, value)
    assert figures["fig2b"]["ours"]["gate_metric"] == "all"


def test_triage_gate_expert_labels_do_at_least_as_well_as_the_classifier(
    figures: dict[str, dict[str, Any]], rows: list[dict[str, str]]
) -> None:
    """On triage data the experts' labels (the oracle) beat the classifier's on urgency 0 wherever the engine is
    loaded (at or past capacity), recomputed from requests.csv."""
    mine = [r for r in rows if r["figure"] == "fig3" and r["policy"] == "semantic"]
    loads = sorted({float(r["load"]) for r in mine})
    for load in loads:
        expert = _mean_u0([r for r in mine if float(r["load"]) == load and r["urgency_source"] == "expert"])
        predicted = _mean_u0([r for r in mine if float(r["load"]) == load and r["urgency_source"] == "predicted"])
        assert figures["fig3"]["ours"]["per_seed"]["semantic"][f"{load:g}"] == [pytest.approx(expert, rel=1e-9)]
        if load >= 1.0:
            assert expert <= predicted * (1 + GATE_TOLERANCE), (load, expert, predicted)


def test_urgency_error_changes_only_the_believed_labels(rows: list[dict[str, str]]) -> None:
    mine = [r for r in rows if r["figure"] == "fig2a" and r["policy"] == "semantic"]
    errors = sorted({r["urgency_error"] for r in mine})
    runs = {e: [r for r in mine if r["urgency_error"] == e] for e in errors}
    same = [(r["arrival_time_s"], r["prompt_tokens"], r["output_tokens"], _level(r)) for r in runs[errors[0]]]
    for error, error_rows in runs.items():
        assert [
            (r["arrival_time_s"], r["prompt_tokens"], r["output_tokens"], _level(r)) for r in error_rows
        ] == same
        wrong = np.mean([r["urgency_true"] != "" and r["urgency"] != r["urgency_true"] for r in error_rows])
        assert wrong == pytest.approx(float(error), abs=0.01)


def test_predictor_tables_record_each_setting(
    figures: dict[str, dict[str, Any]], rows: list[dict[str, str]]
) -> None:
    predictors = {r["predictor"] for r in rows if r["figure"] == "tables"}
    assert predictors == set(figures["tables"]["config"]["predictors"])
    assert len(predictors) == len(figures["tables"]["ours"]) == 10
    assert sum(p.endswith("batch_size=1") for p in predictors) == 2  # immediate, one at a time


def test_a_burst_holds_exactly_its_spikes() -> None:
    for gap_s in (0.1, 1.0):
        workload = burst(spikes_spec(gap_s, 7), gap_s, NUM_SPIKES, seed=0)
        assert np.unique(workload.arrival_time_s).size == NUM_SPIKES
        assert workload.arrival_time_s.max() < burst_duration_s(gap_s, NUM_SPIKES)


def test_a_load_sets_the_gap_and_the_papers_gaps_map_back() -> None:
    capacity = 5.0
    for load in (0.5, 1.3, 20.0):
        gap = gap_for_load(load, capacity)
        assert (1 + HEADLINE_MAX_CONCURRENT) / 2 / gap == pytest.approx(load * capacity)
        assert load_of_gap(gap, capacity) == round(load, 1)


def test_full_grid_is_a_curve_and_quick_is_one_seed() -> None:
    quick = Grid.of(ExperimentContext("semantic", quick=True, seed=4))
    full = Grid.of(ExperimentContext("semantic", quick=False, seed=4))
    assert quick.seeds == (4,) and full.seeds == (4, 5, 6)
    assert len(full.seeds) >= MIN_SEEDS and len(full.loads) >= MIN_LOADS
    assert min(full.loads) == 0.5 and max(full.loads) == 1.5 and max(full.triage_loads) > 1.5
    assert quick.errors[0] == full.errors[0] == 0.0 and quick.errors[-1] == full.errors[-1] == 0.9
    assert 0.1 in quick.errors and 0.1 in full.errors
