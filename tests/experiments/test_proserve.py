"""``semsched reproduce proserve`` (seed 001): the --quick report's figures, and its numbers recomputed from
requests.csv."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from semsched.cli import main
from semsched.experiments import ExperimentContext
from semsched.experiments.proserve import (
    ALPACA,
    ATTAINMENT_FLOOR,
    BASELINES,
    FCFS,
    MAIN,
    OURS,
    PRINTED,
    ROUTERS,
    Grid,
    _Base,
    _trace_figure,
    slos,
)
from semsched.experiments.report import record_problems
from semsched.workloads import build_workload
from tests.experiments.conftest import QuickReports

FIGURES = {"fig10", "fig10-slo", "fig10-settings", "fig13", "fig15", "fig18", "fig11", "fig12", "slip",
           "beyond-trace"}

pytestmark = pytest.mark.data


@pytest.fixture(scope="module")
def trace(quick_reports: QuickReports) -> Path:
    """A Mooncake-format trace (timestamp in ms, input and output lengths), as a user would bring one
    (tests/experiments/conftest.py's :func:`mooncake_trace`)."""
    return quick_reports.trace


@pytest.fixture(scope="module")
def report(quick_reports: QuickReports, trace: Path) -> Path:
    """The session's ``--quick`` report (tests/experiments/conftest.py): ``--seed 1 --workload TRACE``."""
    assert quick_reports.options("proserve") == ["--seed", "1", "--workload", str(trace)]
    return quick_reports.path("proserve")


@pytest.fixture(scope="module")
def document(report: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((report / "results.json").read_text())
    return loaded


@pytest.fixture(scope="module")
def figures(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f["id"]: f for f in document["figures"]}


def _gain(per_seed: dict[str, dict[str, list[float]]], ours: str, baselines: list[str], load: str) -> float:
    """Ours / the best baseline (by median over seeds) at ``load``, median over seeds (higher is better)."""
    best = max(baselines, key=lambda b: float(np.median(per_seed[b][load])))
    return float(np.median([o / b for o, b in zip(per_seed[ours][load], per_seed[best][load], strict=True)]))


def test_every_figure_has_paper_ours_config_and_a_png(report: Path, figures: dict[str, dict[str, Any]]) -> None:
    assert set(figures) == FIGURES
    for figure_id, figure in figures.items():
        assert figure["ours"] and figure["config"], figure_id
        assert figure["paper"] or figure["beyond_paper"] or figure_id in {"fig13", "fig18", "fig11", "fig12"}, \
            figure_id
        assert (report / f"{figure_id}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert figures["fig10"]["config"]["seeds"] == [1]
    assert figures["fig10"]["ours"]["seeds"] == [1]


def test_the_report_is_a_record_with_a_claim_per_paper_claim(report: Path, document: dict[str, Any]) -> None:
    """A record's shape (record() refuses one over 20k characters or with a cell of more than three numbers;
    the quick grid has fewer settings and loads than the full one, so it must fit with room)."""
    assert not record_problems((report / "report.md").read_text())
    figures = {f["id"] for f in document["figures"]}
    claims = document["claims"]
    assert len(claims) >= 12 and all(c["figure"] in figures or c["figure"] == "" for c in claims)
    assert {c["figure"] for c in claims} >= {"fig10", "fig10-slo", "fig10-settings", "fig13", "fig15", "fig18",
                                              "fig11", "fig12"}


def test_fig10_attainment_is_the_share_of_requests_meeting_ttft_and_tpot(
        figures: dict[str, dict[str, Any]], rows: list[dict[str, str]]) -> None:
    met: dict[tuple[str, str, str], list[bool]] = defaultdict(list)
    for row in rows:
        if row["figure"] == "fig10" and row["setting"] == MAIN.label:
            key = (row["contender"], f"{float(row['load']):g}", row["seed"])
            met[key].append(row["ttft_tpot_slo_met"] == "True")
    curve = figures["fig10-slo"]["ours"]
    assert set(curve["per_seed"]) == {*BASELINES, OURS}
    for label, per_load in curve["per_seed"].items():
        for load, values in per_load.items():
            for seed, value in zip(curve["seeds"], values, strict=True):
                shares = met[(label, load, str(seed))]
                assert shares, (label, load, seed)
                assert value == pytest.approx(sum(shares) / len(shares))


def test_fig10_gains_are_ours_over_the_best_baseline_per_load_and_the_claims_quote_them(
        figures: dict[str, dict[str, Any]], document: dict[str, Any]) -> None:
    claims = {c["figure"]: c for c in document["claims"] if c["figure"] in {"fig10-slo"}}
    for figure_id in ("fig10", "fig10-slo"):
        curve = figures[figure_id]["ours"]
        for load, gain in curve["gain"].items():
            assert gain["median"] == pytest.approx(_gain(curve["per_seed"], OURS, list(BASELINES), load))
        largest = max(curve["gain"], key=lambda load: curve["gain"][load]["median"])
        assert curve["largest_gain_load"] == float(largest)
    slo = figures["fig10-slo"]["ours"]
    largest = f"{slo['largest_gain_load']:g}"
    assert claims["fig10-slo"]["ours"].startswith(f"{slo['gain'][largest]['median']:.3g}")
    settings = figures["fig10-settings"]["ours"]
    assert settings[MAIN.label]["tdg"]["gain"] == figures["fig10"]["ours"]["gain"]


def test_fig13_and_fig14_read_the_runs_of_fig10(figures: dict[str, dict[str, Any]]) -> None:
    per_priority = figures["fig13"]["ours"]["per_contender"]
    tdg = figures["fig10"]["ours"]["per_seed"]
    slo = figures["fig10-slo"]["ours"]["median"]
    for label, per_load in per_priority.items():
        assert set(per_load) == set(tdg[label])
    load = figures["fig13"]["ours"]["fig14_quantiles"]["load"]
    best = {ld: max(slo[b][ld] for b in BASELINES) for ld in slo[OURS]}
    held = [float(ld) for ld, value in best.items() if value >= ATTAINMENT_FLOOR]
    assert load == (max(held) if held else min(float(ld) for ld in best))


def test_cluster_figures_compare_go_routing_with_every_other_router_on_the_same_local_scheduler(
        figures: dict[str, dict[str, Any]], rows: list[dict[str, str]]) -> None:
    for figure_id in ("fig11", "fig12"):
        ours = figures[figure_id]["ours"]
        for local, curve in ours["go_routing_per_local"].items():
            others = [f"{local} + {router}" for router in ROUTERS[1:]]
            for load, gain in curve["gain"].items():
                assert gain["median"] == pytest.approx(_gain(curve["per_seed"], f"{local} + go-routing", others,
                                                             load))
        routers = {row["router"] for row in rows if row["figure"] == figure_id}
        assert routers == set(ROUTERS)
    exceeds = figures["fig11"]["ours"]["slide_batching_vs_go_routing"]
    per = figures["fig11"]["ours"]["go_routing_per_local"][FCFS]["per_seed"]
    for load, value in exceeds["go_routing_over_min_load"].items():
        expected = np.median(per[f"{FCFS} + go-routing"][load]) / np.median(per[f"{FCFS} + min-load"][load])
        assert value == pytest.approx(expected)


def test_the_ablation_normalises_each_variant_to_slide_batching_seed_by_seed(
        figures: dict[str, dict[str, Any]]) -> None:
    ours = figures["fig15"]["ours"]
    for label, per_load in ours["normalized"].items():
        for load, values in per_load.items():
            expected = [m / o for m, o in zip(ours["miss_tdg"][label][load], ours["miss_tdg"][OURS][load],
                                              strict=True)]
            assert values == pytest.approx(expected)


def test_the_slip_figure_runs_every_contender_on_the_printed_profile_at_its_own_capacity(
        figures: dict[str, dict[str, Any]], rows: list[dict[str, str]]) -> None:
    figure = figures["slip"]
    assert figure["config"]["engine_profile"] == PRINTED.profile
    printed, corrected = figure["ours"]["as_printed"], figure["ours"]["corrected"]
    assert corrected == figures["fig10"]["ours"]
    for load, gain in printed["gain"].items():
        assert gain["median"] == pytest.approx(_gain(printed["per_seed"], OURS, list(BASELINES), load))
    capacity = figure["ours"]["capacity_requests_per_s"]
    assert capacity[PRINTED.profile] < capacity[MAIN.profile]  # the printed prefill is 100x dearer
    prefill = figure["ours"]["p90_prompt_prefill_s"]
    assert prefill[PRINTED.profile] > prefill[MAIN.profile]
    run_rates = {(row["contender"], f"{float(row['load']):g}"): float(row["rate_per_s"]) for row in rows
                 if row["figure"] == "slip"}
    assert run_rates and all(rate == pytest.approx(float(load) * capacity[PRINTED.profile], rel=1e-6)
                             for (_, load), rate in run_rates.items())


def test_the_ttft_slo_is_floored_at_the_tpot_slo_which_only_alpaca_needs() -> None:
    """On AlpacaEval's short prompts 5x the median prefill is below the TPOT SLO (the earlier record's SLO
    collapse of every scheduler but vLLM-FCFS); the floor lifts it there and leaves the Azure traces alone."""
    ctx = ExperimentContext("proserve", quick=True, seed=1)
    base = _Base(ctx, Grid.of(ctx))
    for setting in (MAIN, ALPACA):
        workload = build_workload(base.spec(setting), rate_per_s=1.0, num_requests=120, seed=1)
        (floored, tpot), (unfloored, _) = slos(workload, setting.profile), slos(workload, setting.profile,
                                                                               floor=False)
        assert floored == max(unfloored, tpot)
        assert (unfloored < tpot) == (setting is ALPACA)


def test_a_trace_of_the_users_runs_every_contender(figures: dict[str, dict[str, Any]], trace: Path,
                                                   rows: list[dict[str, str]]) -> None:
    figure = figures["beyond-trace"]
    assert figure["config"]["workload"] == str(trace)
    assert set(figure["ours"]["per_seed"]) == {*BASELINES, OURS}
    ids = {row["request_id"] for row in rows if row["figure"] == "beyond-trace"}
    assert len(ids) == 120  # the quick grid's requests, from the trace's 150


def test_an_experiment_that_takes_no_workload_refuses_one(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["reproduce", "demo", "--quick", "--out", str(tmp_path / "d"), "--workload", "azure-conv"]) == 2
    assert "takes no workload" in capsys.readouterr().err


def test_without_a_trace_beyond_trace_is_left_out() -> None:
    """The shared report above is made with a trace; without one there is no beyond-trace figure and nothing is
    run for it."""
    ctx = ExperimentContext("proserve", quick=True, seed=1)
    assert _trace_figure(_Base(ctx, Grid.of(ctx))) is None and not ctx.runs
