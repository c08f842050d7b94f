"""``semsched reproduce proserve`` (seed 001): the --quick report's figures, and its numbers recomputed from
requests.csv."""

from __future__ import annotations

import csv
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from semsched.cli import main
from semsched.experiments import ExperimentContext
from semsched.experiments.proserve import ATTAINMENT_FLOOR, BASELINES, OURS, Grid, Proserve, _Base, _trace_figure
from semsched.experiments.report import write_report
from tests.experiments.conftest import QuickReports

FIGURES = {"fig10", "fig13", "fig14", "fig15", "fig18", "estimator", "fig11", "fig12", "beyond-tiers",
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
        assert figure["paper"] or figure["beyond_paper"] or figure_id in {"fig13", "fig14", "fig18", "fig11",
                                                                           "fig12"}, figure_id
        assert (report / f"{figure_id}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert figures["fig10"]["config"]["settings"][0]["seeds"] == [1]


def test_fig10_attainment_is_the_share_of_requests_meeting_ttft_and_tpot(
        figures: dict[str, dict[str, Any]], rows: list[dict[str, str]]) -> None:
    met: dict[tuple[str, str, str], list[bool]] = defaultdict(list)
    for row in rows:
        if row["figure"] == "fig10":
            key = (row["setting"], row["contender"], f"{float(row['load']):g}")
            met[key].append(row["ttft_tpot_slo_met"] == "True")
    per_setting = figures["fig10"]["ours"]["per_setting"]
    for setting, per_contender in per_setting.items():
        assert set(per_contender) == {*BASELINES, OURS}
        for label, per_load in per_contender.items():
            for load, numbers in per_load.items():
                values = met[(setting, label, load)]
                assert values, (setting, label, load)
                assert numbers["attainment"] == pytest.approx(sum(values) / len(values))


def test_fig10_headline_is_ours_over_the_best_baseline_at_the_highest_load_it_holds(
        figures: dict[str, dict[str, Any]]) -> None:
    ours = figures["fig10"]["ours"]
    for setting, per_contender in ours["per_setting"].items():
        loads = sorted(per_contender[OURS], key=float)
        held = [ld for ld in loads if max(per_contender[b][ld]["attainment"] or 0 for b in BASELINES)
                >= ATTAINMENT_FLOOR]
        expected_load = float(held[-1] if held else loads[0])
        assert ours["headline_load"][setting] == expected_load
        key = f"{expected_load:g}"
        best = max(BASELINES, key=lambda b: per_contender[b][key]["tdg_ratio"] or -1)
        gain = ours["gains_per_setting"][setting]["tdg"]
        assert gain["best"] == best
        expected = per_contender[OURS][key]["tdg_ratio"] / per_contender[best][key]["tdg_ratio"]
        assert gain["gain"] == pytest.approx(expected)


def test_cluster_figures_compare_go_routing_with_min_load_on_the_same_local_scheduler(
        figures: dict[str, dict[str, Any]], rows: list[dict[str, str]]) -> None:
    for figure_id, metric in (("fig11", "first_token_tdg_ratio"), ("fig12", "tdg_ratio")):
        ours = figures[figure_id]["ours"]
        per = ours["per_combination"]
        for name, value in ours["go_routing_over_min_load"].items():
            local, load = name.split(" @ ")
            assert value == pytest.approx(per[f"{local} + go-routing"][load][metric] /
                                          per[f"{local} + min-load"][load][metric])
        routers = {row["router"] for row in rows if row["figure"] == figure_id}
        assert routers == {"go-routing", "min-load"}


def test_the_ablation_normalises_each_variant_to_slide_batching(figures: dict[str, dict[str, Any]]) -> None:
    ours = figures["fig15"]["ours"]
    for label, per_load in ours["normalized"].items():
        for load, value in per_load.items():
            assert value == pytest.approx(ours["miss_tdg"][label][load] / ours["miss_tdg"][OURS][load])


def test_a_trace_of_the_users_runs_every_contender(figures: dict[str, dict[str, Any]], trace: Path,
                                                   rows: list[dict[str, str]]) -> None:
    figure = figures["beyond-trace"]
    assert figure["config"]["workload"] == str(trace)
    assert set(figure["ours"]["per_contender"]) == {*BASELINES, OURS}
    ids = {row["request_id"] for row in rows if row["figure"] == "beyond-trace"}
    assert len(ids) == 120  # the quick grid's requests, from the trace's 150


def test_an_experiment_that_takes_no_workload_refuses_one(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["reproduce", "demo", "--quick", "--out", str(tmp_path / "d"), "--workload", "azure-conv"]) == 2
    assert "takes no workload" in capsys.readouterr().err


def test_without_a_trace_beyond_trace_is_reported_as_not_run(tmp_path: Path) -> None:
    """The shared report above is made with a trace; without one, beyond-trace is a figure that says why it was
    not run (with its PNG and its section), and nothing is run for it."""
    ctx = ExperimentContext("proserve", quick=True, seed=1)
    figure = _trace_figure(_Base(ctx, Grid.of(ctx)))
    assert figure.id == "beyond-trace" and not ctx.runs
    assert figure.headline.startswith("not run: no trace given") and not figure.ours
    ctx.add_figure(figure)
    out = tmp_path / "proserve"
    out.mkdir()
    write_report(ctx, Proserve(), out, command="semsched reproduce proserve --quick")
    report = (out / "report.md").read_text()
    assert f"{figure.id}: {figure.title}" in report and "Not run: no trace given" in report
    assert (out / f"{figure.id}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
