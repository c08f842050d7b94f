"""``semsched reproduce laps-sd`` (seed 004): the --quick report's figures, claims and sanity gate, its numbers
recomputed from requests.csv."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from semsched.experiments.curves import VERDICTS, LoadCurve, ratio_verdict
from semsched.experiments.laps_sd import (
    BASELINES,
    BURST_SIZE,
    K_TOLERANCE,
    LENGTH_ERROR,
    METHODS,
    PAPER_GAIN,
    PAPER_LAPS,
    PLOTTED,
    PLOTTED_METHOD,
    PROFILE,
    SWITCH_TOKENS,
    UNTRIED_METHOD,
    WORKLOADS,
)
from semsched.experiments.report import record_problems
from semsched.latency.profiles import load_profile
from tests.experiments.conftest import QuickReports

FIGURES = {"fig5-poisson", "fig5-burst", "fig5-cases", "gate", "fig5-once", "fig6", "fig2-fig7",
           "untried-heavy-tail", "untried-error"}
Rows = list[dict[str, str]]


@pytest.fixture(scope="module")
def report(quick_reports: QuickReports) -> Path:
    """The session's ``--quick`` report (tests/experiments/conftest.py), made with ``--seed 2``."""
    return quick_reports.path("laps-sd")


def mean_e2e(rows: Rows, figure: str, *keys: str) -> dict[tuple[str, ...], float]:
    """Each run's mean latency from requests.csv, by the given columns (every request must have finished)."""
    e2e: dict[tuple[str, ...], list[float]] = defaultdict(list)
    for row in rows:
        if row["figure"] == figure:
            assert row["state"] == "finished", row
            e2e[tuple(row[k] for k in keys)].append(float(row["e2e_s"]))
    return {key: float(np.mean(values)) for key, values in e2e.items()}


def curve_of(document: dict[str, Any], ours: str = PAPER_LAPS,
             baselines: tuple[str, ...] = BASELINES) -> LoadCurve:
    """A figure's LoadCurve rebuilt from its per-seed values in results.json."""
    loads = document["loads"]
    values = {policy: {load: per_load[f"{load:g}"] for load in loads} for policy, per_load in
              document["per_seed"].items()}
    return LoadCurve(document["metric"], loads, document["seeds"], values, ours=ours, baselines=baselines,
                     higher_is_better=False, strict=False)


def test_every_figure_has_paper_ours_config_and_a_png(report: Path, figures: dict[str, dict[str, Any]]) -> None:
    assert set(figures) == FIGURES
    for figure_id, figure in figures.items():
        assert figure["ours"] and figure["config"], figure_id
        assert figure["paper"] or figure_id == "gate", figure_id
        assert (report / f"{figure_id}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert figures["fig5-poisson"]["config"]["seeds"] == [2]
    assert figures["fig5-poisson"]["config"]["profile"] == PROFILE
    text = (report / "report.md").read_text()
    assert "Spec-Bench qa and math_reasoning stand in" in text  # the data substitute is said


def test_the_report_opens_with_one_claim_per_paper_claim_and_fits_a_record(
        report: Path, results: dict[str, Any]) -> None:
    text = (report / "report.md").read_text()
    assert text.index("## Claims") < text.index("## fig5-poisson")
    assert record_problems(text) == []
    assert record_problems(text.replace("](", "](img/laps-sd_")) == []  # as recorded, the PNGs under img/
    claims = results["claims"]
    for claim in claims:
        assert claim["verdict"] in VERDICTS and claim["why"] and claim["figure"] in FIGURES, claim
    said = " ".join(c["paper"] for c in claims)
    for number in ("39 %", "1.47x", "31 %", "6, 4, 4", "14.21 %", "6.84 %", "shorter"):
        assert number in said, number  # every claim of the paper has its row
    arrivals = {c["claim"].split("(")[-1].rstrip(")") for c in claims if c["claim"].startswith("39 %")}
    assert {"poisson", "burst"} <= arrivals


def test_load_curves_are_the_mean_of_their_requests(figures: dict[str, dict[str, Any]], rows: Rows) -> None:
    means = mean_e2e(rows, "fig5-cases", "method", "workload", "arrivals", "contender", "load", "seed")
    cases = figures["fig5-cases"]["ours"]
    assert len(cases) == len(METHODS) * len(WORKLOADS) * 2
    checked = 0
    for key, document in cases.items():
        method, workload, arrivals = key.split(" / ")
        for contender, per_load in document["per_seed"].items():
            for load, values in per_load.items():
                for seed, value in zip(document["seeds"], values, strict=True):
                    expected = means[(method, workload, arrivals, contender, str(float(load)), str(seed))]
                    assert value == pytest.approx(expected, rel=1e-9)
                    checked += 1
        curve = curve_of(document)
        for load in document["loads"]:  # the gain is the best baseline's median over ours, per seed
            best = curve.best_baseline(load)
            assert best == min(BASELINES, key=lambda b: curve.band(b, load).median or np.inf)
            pairs = zip(curve.values[best][load], curve.values[PAPER_LAPS][load], strict=True)
            ratios = [b / o for b, o in pairs if b is not None and o is not None]
            assert document["gain"][f"{load:g}"]["median"] == pytest.approx(float(np.median(ratios)))
    assert checked == len(means)
    plotted = cases[f"{PLOTTED_METHOD} / {PLOTTED} / poisson"]
    shown = figures["fig5-poisson"]["ours"]["per_seed"]
    assert shown == {policy: plotted["per_seed"][policy] for policy in (PAPER_LAPS, *BASELINES)}


def test_loads_are_fractions_of_the_measured_capacity_and_bursts_arrive_together(
        figures: dict[str, dict[str, Any]], rows: Rows) -> None:
    capacity: dict[tuple[str, str, str], set[float]] = defaultdict(set)
    arrivals: dict[tuple[str, ...], list[float]] = defaultdict(list)
    for row in rows:
        if row["figure"] == "fig5-cases":
            capacity[(row["method"], row["workload"], row["seed"])].add(
                round(float(row["rate_per_s"]) / float(row["load"]), 9))
            if row["contender"] == "fcfs":
                run = (row["method"], row["workload"], row["arrivals"], row["load"], row["seed"])
                arrivals[run].append(float(row["arrival_time_s"]))
    assert capacity and all(len(c) == 1 for c in capacity.values())  # one capacity per case and seed
    config = figures["fig5-poisson"]["config"]["capacity_requests_per_s"]
    for seed, value in config.items():
        assert capacity[(PLOTTED_METHOD, PLOTTED, seed)] == {round(value, 9)}
    for key, times in arrivals.items():
        distinct = np.unique(times)
        if key[2] == "burst":
            assert all(times.count(t) == BURST_SIZE for t in distinct[:-1])
        else:
            assert distinct.size == len(times)


def test_the_gate_holds_where_it_must(figures: dict[str, dict[str, Any]], rows: Rows) -> None:
    """Without speculation, every request at once, SJF by true length is shortest processing time first: the
    oracle must do at least as well as U(1 ± e) predictions, on every seed."""
    gate = figures["gate"]["ours"]
    means = mean_e2e(rows, "gate", "arrivals", "contender", "seed")
    seeds = gate["seeds"]
    control = {name: [means[("once", f"lp-sjf {name}", str(s))] for s in seeds]
               for name in ("oracle", "predicted")}
    for name, values in control.items():
        assert gate["control"][name] == pytest.approx(values)
    assert all(o <= p for o, p in zip(control["oracle"], control["predicted"], strict=True))
    assert gate["control_holds"] is True
    for row in rows:
        if row["figure"] == "gate":
            truth, guess = float(row["output_tokens"]), float(row["predicted_length"])
            if "oracle" in row["contender"]:
                assert guess == truth
            else:
                assert abs(guess - truth) <= LENGTH_ERROR * truth + 0.5
    # the speculative gate's oracle runs are the same requests as the headline's predicted runs
    oracle = mean_e2e(rows, "gate", "arrivals", "contender", "load", "seed")
    for load in gate["loads"]:
        for seed, value in zip(seeds, gate["per_seed"]["lp-sjf oracle"][f"{load:g}"], strict=True):
            assert value == pytest.approx(oracle[("poisson", "lp-sjf oracle", str(float(load)), str(seed))])


def test_claim_verdicts_follow_from_the_curves(results: dict[str, Any],
                                               figures: dict[str, dict[str, Any]]) -> None:
    for claim in results["claims"]:
        if not claim["claim"].startswith("39 %") or claim["figure"] not in ("fig5-poisson", "fig5-burst",
                                                                            "untried-heavy-tail"):
            continue
        curve = curve_of(figures[claim["figure"]]["ours"])
        at = curve.largest_gain_load()
        assert at is not None
        gain = curve.gain(at)
        assert claim["ours"] == gain.cell()
        assert claim["verdict"] == ratio_verdict(PAPER_GAIN, gain)[0]


def test_every_policy_of_a_case_ran_the_same_requests(rows: Rows) -> None:
    requests: dict[tuple[str, ...], dict[str, list[tuple[str, str]]]] = defaultdict(lambda: defaultdict(list))
    for row in rows:
        if row["figure"] in ("fig5-cases", "fig5-once", "fig6", "untried-heavy-tail"):
            case = (row["figure"], row["method"], row["workload"], row["arrivals"], row["load"],
                    row["num_requests"], row["seed"])
            requests[case][row["contender"]].append((row["prompt_tokens"], row["output_tokens"]))
    assert requests
    for per_policy in requests.values():
        first = next(iter(per_policy.values()))
        assert all(sorted(v) == sorted(first) for v in per_policy.values())


def test_fig6_names_the_best_k(figures: dict[str, dict[str, Any]]) -> None:
    fig6 = figures["fig6"]["ours"]
    for case, values in fig6["per_case"].items():
        finite = {int(k.split("=")[1]): v for k, v in values.items() if v is not None}
        best = min(finite.values())
        assert fig6["best_k"][case] == [k for k, v in finite.items() if v <= best * (1 + K_TOLERANCE)]


def test_switching_cost_is_recomputed_from_the_lone_runs(figures: dict[str, dict[str, Any]], rows: Rows) -> None:
    latency = load_profile(PROFILE)
    ratios = []
    for row in rows:
        if row["figure"] == "fig2-fig7":
            tokens = int(row["prompt_tokens"]) + int(row["output_tokens"])
            assert float(row["queueing_delay_s"]) == pytest.approx(0.0, abs=1e-9)  # alone on the engine
            if SWITCH_TOKENS[0] <= int(row["output_tokens"]) < SWITCH_TOKENS[1]:
                ratios.append(2 * latency.swap_time_s(tokens) / float(row["e2e_s"]))
    near = figures["fig2-fig7"]["ours"]["switch_near_500"]
    assert (near is None and not ratios) or near == pytest.approx(float(np.median(ratios)))
    for errors in figures["fig2-fig7"]["ours"]["estimate_errors"].values():
        assert 0 < errors["perceptible"] <= errors["requests"]
        assert errors["true_length"] >= 0


def test_untried_settings_draw_long_outputs_and_the_68m_spread(figures: dict[str, dict[str, Any]],
                                                               rows: Rows) -> None:
    untried = [row for row in rows if row["figure"] == "untried-heavy-tail"]
    assert untried and all(row["method"] == UNTRIED_METHOD and row["logged_tokens_per_round"] == ""
                           for row in untried)  # rounds drawn from the fit, not a log
    chat = [int(r["output_tokens"]) for r in rows if r["figure"] == "fig5-cases" and r["workload"] == PLOTTED]
    long = [int(r["output_tokens"]) for r in untried]
    assert np.median(long) > np.median(chat)
    sweep = [row for row in rows if row["figure"] == "untried-error"]
    errors = figures["untried-error"]["ours"]["loads"]
    assert {row["prediction"] for row in sweep} == {"oracle" if e == 0 else f"lognormal σ {e:g}" for e in errors}
    for row in sweep:
        if row["prediction"] == "oracle":
            assert float(row["predicted_length"]) == float(row["output_tokens"])


def test_requests_csv_carries_each_logged_requests_tokens_per_round(rows: Rows) -> None:
    fig5 = [row for row in rows if row["figure"] == "fig5-cases"]
    logged = [row for row in fig5 if not row["workload"].startswith("mbpp")]
    assert logged and all(1.0 <= float(row["logged_tokens_per_round"]) <= 21.0 for row in logged)
    assert all(row["logged_tokens_per_round"] == "" for row in fig5 if row["workload"].startswith("mbpp"))
