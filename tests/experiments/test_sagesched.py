"""``semsched reproduce sagesched`` (seed 002): the --quick report's figures and claims, its numbers recomputed
from requests.csv, the sanity gate where it must hold, and swap preemption for every policy."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from semsched.experiments.curves import Band
from semsched.experiments.sagesched import (
    BASELINES,
    FIGURE_IDS,
    GATE_SETTINGS,
    GATE_TOLERANCE,
    SAGESCHED,
    contenders,
    predictor_spec,
)
from tests.experiments.conftest import QuickReports

pytestmark = pytest.mark.embeddings  # the online predictors embed every prompt

CURVES = ("fig7", "fig8-long-input", "fig8-long-output", "warm", "swap")


@pytest.fixture(scope="module")
def report(quick_reports: QuickReports) -> Path:
    """The session's ``--quick`` report (tests/experiments/conftest.py), made with ``--seed 1``."""
    return quick_reports.path("sagesched")


def mean_e2e(rows: list[dict[str, str]], **match: str) -> dict[tuple[str, str, str], float | None]:
    """Mean e2e per (contender, load, seed) of the rows matching ``match``; None when a request is unfinished."""
    e2e: dict[tuple[str, str, str], list[float | None]] = defaultdict(list)
    for row in rows:
        if all(row[k] == v for k, v in match.items()):
            e2e[(row["contender"], f"{float(row['load']):g}", row["seed"])].append(
                float(row["e2e_s"]) if row["e2e_s"] else None)
    return {key: None if any(v is None for v in values) else float(np.mean(values))  # type: ignore[arg-type]
            for key, values in e2e.items()}


def test_every_figure_has_paper_ours_config_and_a_png(report: Path, figures: dict[str, dict[str, Any]]) -> None:
    assert set(figures) == set(FIGURE_IDS)
    for figure_id, figure in figures.items():
        assert figure["ours"] and figure["config"], figure_id
        assert figure["paper"] or figure["beyond_paper"], figure_id
        assert (report / f"{figure_id}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert figures["fig7"]["config"]["seeds"] == [1]


def test_the_report_opens_with_a_claim_table_of_computed_verdicts(report: Path, results: dict[str, Any]) -> None:
    text = (report / "report.md").read_text()
    assert text.index("## Claims") < text.index("## Figures")
    claims = results["claims"]
    assert {c["figure"] for c in claims} >= {"fig7", "fig8-long-input", "ablations", "fig12",
                                              "gate", "warm", "swap"}
    assert all(c["verdict"] in ("reproduced", "partly", "not") and c["why"] for c in claims)


@pytest.mark.parametrize("figure_id", CURVES)
def test_curve_values_are_the_means_of_their_requests(figure_id: str, figures: dict[str, dict[str, Any]],
                                                      rows: list[dict[str, str]]) -> None:
    ours = figures[figure_id]["ours"]
    means = mean_e2e(rows, figure=figure_id)
    seeds = [str(s) for s in ours["seeds"]]
    reused = ("fcfs", "fastserve") if figure_id == "warm" else ()  # warm shows fig7's runs of these
    fig7 = mean_e2e(rows, figure="fig7")
    for policy, per_load in ours["per_seed"].items():
        for load, values in per_load.items():
            source = fig7 if policy in reused else means
            expected = [source[(policy, load, seed)] for seed in seeds]
            assert values == pytest.approx(expected, rel=1e-9), (figure_id, policy, load)


@pytest.mark.parametrize("figure_id", CURVES)
def test_curve_gain_is_the_best_baselines_median_over_ours(figure_id: str,
                                                           figures: dict[str, dict[str, Any]]) -> None:
    ours = figures[figure_id]["ours"]
    per_seed = ours["per_seed"]
    for load in ours["gain"]:
        medians = {p: Band.of(per_seed[p][load]).median for p in BASELINES}
        best = min((p for p in BASELINES if medians[p] is not None), key=lambda p: medians[p])  # type: ignore
        assert ours["best_baseline"][load] == best
        ratios = [None if o is None or b is None else b / o
                  for o, b in zip(per_seed[SAGESCHED][load], per_seed[best][load], strict=True)]
        assert ours["gain"][load]["median"] == pytest.approx(Band.of(ratios).median)


def test_fig7_claim_reads_the_gain_at_the_largest_gain_load(figures: dict[str, dict[str, Any]],
                                                            results: dict[str, Any]) -> None:
    ours = figures["fig7"]["ours"]
    where = ours["largest_gain_load"]
    gains = {float(k): v["median"] for k, v in ours["gain"].items() if v["median"] is not None}
    assert where == max(gains, key=gains.__getitem__)
    claim = next(c for c in results["claims"] if c["figure"] == "fig7")
    g = ours["gain"][f"{where:g}"]
    assert claim["ours"] == Band(g["median"], g["min"], g["max"]).cell()


def test_predicted_contenders_carry_predictions_and_the_others_none(rows: list[dict[str, str]]) -> None:
    fig7 = [row for row in rows if row["figure"] == "fig7"]
    assert fig7
    for row in fig7:
        has_prediction = bool(row["predicted_length"])
        assert has_prediction == bool(row["predictor"]), (row["contender"], row["predicted_length"])


def test_the_gate_holds_where_it_must(figures: dict[str, dict[str, Any]], rows: list[dict[str, str]]) -> None:
    """Gittins with true lengths does at least as well as with predicted ones where its cost model prices the
    engine's bottleneck (slot-bound engine, cost=output), per seed and load; the ratios are recomputed from
    requests.csv."""
    settings = figures["gate"]["ours"]["settings"]
    for setting in GATE_SETTINGS:
        means = mean_e2e(rows, figure="gate", setting=setting.name)
        result = settings[setting.name]
        for load, ratios in result["oracle_over_predicted"].items():
            seeds = sorted({key[2] for key in means})
            expected = [means[("oracle", load, s)] / means[("predicted", load, s)] for s in seeds]  # type: ignore
            assert ratios == pytest.approx(expected, rel=1e-9)
        holds = all(m <= 1 + GATE_TOLERANCE for m in result["median"].values())
        assert result["holds"] == holds
        if setting.must_hold:
            assert holds, (setting.name, result["oracle_over_predicted"])
            assert all(r <= 1 + GATE_TOLERANCE for v in result["oracle_over_predicted"].values() for r in v)


def test_swap_figure_swapped_every_policys_victims(figures: dict[str, dict[str, Any]]) -> None:
    shares = figures["swap"]["ours"]["swapped_share"]
    assert set(shares) == {c.label for c in contenders(None)}
    seen = [share for per_load in shares.values() for values in per_load.values() for share in values
            if share is not None]
    assert seen and all(share > 0.5 for share in seen)  # swap space holds (nearly) every victim


def test_predictor_specs_name_their_warmup_only_when_given() -> None:
    assert predictor_spec("semantic-knn", None) == "length=semantic-knn"
    assert predictor_spec("regressor", "a.json", threshold=0.7) == "length=regressor;threshold=0.7;warmup=a.json"


def test_ablation_ratios_are_per_seed_ttlt_over_the_groups_default(figures: dict[str, dict[str, Any]],
                                                                    rows: list[dict[str, str]]) -> None:
    """Each variant's TTLT over its group's default, per seed, recomputed from requests.csv."""
    for group, part in figures["ablations"]["ours"].items():
        means = mean_e2e(rows, figure="ablations", group=group)
        default = part["default"]
        for label, numbers in part["per_variant"].items():
            seeds = sorted({key[2] for key in means if key[0] == label})
            assert numbers["ttlt_s"] == pytest.approx([means[(label, _load(means), s)] for s in seeds])
            ratios = [means[(label, _load(means), s)] / means[(default, _load(means), s)]  # type: ignore[operator]
                      for s in seeds]
            assert numbers["ttlt_over_default"] == pytest.approx(Band.of(ratios).median), (group, label)


def _load(means: dict[tuple[str, str, str], float | None]) -> str:
    (load,) = {key[1] for key in means}
    return load
