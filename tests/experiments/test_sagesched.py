"""``semsched reproduce sagesched`` (seed 002): the --quick report's figures, and its numbers recomputed from
requests.csv."""

from __future__ import annotations

import csv
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from semsched.experiments.sagesched import PREDICTION_BASELINES, SAGESCHED, contenders, predictor_spec
from tests.experiments.conftest import QuickReports

FIGURES = {"fig7", "fig8", "fig9", "fig10", "fig11", "fig12", "fig13", "beyond-cold", "beyond-tiers"}

pytestmark = pytest.mark.embeddings  # the online predictors embed every prompt


@pytest.fixture(scope="module")
def report(quick_reports: QuickReports) -> Path:
    """The session's ``--quick`` report (tests/experiments/conftest.py), made with ``--seed 1``."""
    return quick_reports.path("sagesched")


@pytest.fixture(scope="module")
def figures(report: Path) -> dict[str, dict[str, Any]]:
    return {f["id"]: f for f in json.loads((report / "results.json").read_text())["figures"]}


@pytest.fixture(scope="module")
def rows(report: Path) -> list[dict[str, str]]:
    with (report / "requests.csv").open(newline="") as handle:
        return list(csv.DictReader(handle))


def test_every_figure_has_paper_ours_config_and_a_png(report: Path, figures: dict[str, dict[str, Any]]) -> None:
    assert set(figures) == FIGURES
    for figure_id, figure in figures.items():
        assert figure["ours"] and figure["config"], figure_id
        assert figure["paper"] or figure["beyond_paper"], figure_id
        assert (report / f"{figure_id}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert figures["fig7"]["config"]["seeds"] == [1]


def test_fig7_mean_ttlt_is_the_mean_of_its_requests(figures: dict[str, dict[str, Any]],
                                                     rows: list[dict[str, str]]) -> None:
    e2e: dict[tuple[str, str], list[float]] = defaultdict(list)
    for row in rows:
        if row["figure"] == "fig7" and row["e2e_s"]:
            e2e[(row["contender"], str(float(row["rate_per_s"])))].append(float(row["e2e_s"]))
    per_rate = figures["fig7"]["ours"]["per_rate"]
    assert set(per_rate) == {c.label for c in contenders(None)}
    for label, by_rate in per_rate.items():
        for rate, numbers in by_rate.items():
            assert numbers["ttlt_s"] == pytest.approx(np.mean(e2e[(label, str(float(rate)))]), rel=1e-9)


def test_fig7_headline_compares_sagesched_with_the_best_prediction_baseline(
        figures: dict[str, dict[str, Any]]) -> None:
    ours = figures["fig7"]["ours"]
    rate = f"{ours['headline_rate_per_s']:g}"
    per_rate = ours["per_rate"]
    best = min(PREDICTION_BASELINES, key=lambda label: per_rate[label][rate]["ttlt_s"])
    assert ours["best_prediction_baseline"] == best
    expected = 1.0 - per_rate[SAGESCHED][rate]["ttlt_s"] / per_rate[best][rate]["ttlt_s"]
    assert ours["ttlt_reduction_vs_best_prediction_baseline"] == pytest.approx(expected)
    assert ours["target_met"] == (expected >= 0.287)


def test_predicted_contenders_carry_predictions_and_the_others_none(rows: list[dict[str, str]]) -> None:
    fig7 = [row for row in rows if row["figure"] == "fig7"]
    for row in fig7:
        has_prediction = bool(row["predicted_length"])
        assert has_prediction == bool(row["predictor"]), (row["contender"], row["predicted_length"])


def test_predictor_specs_name_their_warmup_only_when_given() -> None:
    assert predictor_spec("semantic-knn", None) == "length=semantic-knn"
    assert predictor_spec("regressor", "a.json", threshold=0.7) == "length=regressor;threshold=0.7;warmup=a.json"


def test_beyond_tiers_attainment_is_recomputed_from_requests_csv(figures: dict[str, dict[str, Any]],
                                                                 rows: list[dict[str, str]]) -> None:
    chosen = [r for r in rows if r["figure"] == "beyond-tiers" and r["ttft_slo_s"]]
    for label, numbers in figures["beyond-tiers"]["ours"].items():
        mine = [r for r in chosen if r["contender"] == label]
        met = [r for r in mine if r["ttft_s"] and float(r["ttft_s"]) <= float(r["ttft_slo_s"])]
        assert numbers["ttft_attainment_all"] == pytest.approx(len(met) / len(mine)), label
