"""``semsched reproduce scoreboard`` (issue 31): contenders, regret, failures shown, and the --quick report's
numbers recomputed from its own files (the report's structure is tests/experiments/test_reproduce.py's)."""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from semsched.core.request import RequestState
from semsched.experiments import ExperimentContext, laps_sd, proserve
from semsched.experiments.curves import VERDICTS
from semsched.experiments.report import record_problems
from semsched.experiments.scoreboard import (
    BENCHMARKS,
    LOADS,
    QUICK_CONTENDERS,
    QUICK_LOADS,
    REGRET_CAP,
    UTILITY,
    _failed_contender,
    _regret_cell,
    contenders,
    grid_contenders,
    read_run,
    regret_table,
    run_benchmark,
    trace_benchmark,
    tuned_specs,
    windows,
)
from semsched.metrics.tdg import TDGWeights
from semsched.policies import POLICIES
from semsched.sim.parallel import InProcess, PointError, SimPoint
from semsched.sim.runner import ClusterSpec, run_policy
from semsched.sim.speculative import speculation_preset
from semsched.workloads import build_workload
from tests.experiments.conftest import QuickReports, mooncake_trace

Rows = list[dict[str, str]]


# ---- contenders ------------------------------------------------------------------------------------------------
def test_contenders_are_every_policy_and_the_seeds_tuned_specs() -> None:
    every = contenders()
    assert {name: name for name in POLICIES.names()}.items() <= every.items()
    assert len(set(every.values())) == len(every), "no spec runs twice"
    workload = build_workload(proserve.MAIN.workload, rate_per_s=1.0, num_requests=500, seed=0)
    w_p = TDGWeights.paper_defaults(workload.to_requests()).first_token
    assert every[proserve.OURS] == proserve.slide_batching(w_p, proserve.PROFILE)
    plotted = laps_sd.policies(speculation_preset(laps_sd.PLOTTED_METHOD))
    assert every[laps_sd.OUR_LAPS] == plotted[laps_sd.OUR_LAPS]
    assert every["laps-sd (paper)"] == plotted[laps_sd.PAPER_LAPS]
    for label, spec in tuned_specs().items():  # a tuned spec equal to a default is that default's row
        assert spec in every.values()
        assert label in every or every[spec] == spec
    for spec in every.values():
        POLICIES.create(spec)


def test_quick_contenders_are_the_registered_few() -> None:
    quick = grid_contenders(quick=True)
    assert list(quick) == [label for label in QUICK_CONTENDERS if label in POLICIES.names()]
    assert set(quick) <= set(grid_contenders(quick=False))


# ---- regret ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("higher_is_better", [False, True])
def test_regret_is_each_seeds_best_over_the_contenders_value(higher_is_better: bool) -> None:
    values: dict[str, dict[float, list[float | None]]] = {
        "a": {1.0: [2.0, 4.0, 3.0]}, "b": {1.0: [1.0, None, 6.0]}, "c": {1.0: [4.0, 2.0, 0.0]}}
    table = regret_table(values, higher_is_better=higher_is_better)
    for seed in range(3):
        column = [x for v in values.values() if (x := v[1.0][seed]) is not None]
        best = max(column) if higher_is_better else min(column)
        for label, per_load in values.items():
            value = per_load[1.0][seed]
            if value is None:
                continue
            ratio = (best / value if value else REGRET_CAP) if higher_is_better else (
                value / best if best else (1.0 if value == 0 else REGRET_CAP))
            expected = min(ratio, REGRET_CAP)
            assert any(expected == pytest.approx(x) for x in (table[label][1.0].low, table[label][1.0].median,
                                                            table[label][1.0].high)), (label, seed)
    assert table["b"][1.0].missing == 1 and table["a"][1.0].missing == 0
    assert min(band.low for band in (table[k][1.0] for k in values) if band.low is not None) == 1.0


def test_regret_orders_like_the_medians() -> None:
    values: dict[str, dict[float, list[float | None]]] = {
        "fast": {0.6: [1.0, 1.1], 1.2: [2.0, 2.2]}, "slow": {0.6: [1.5, 1.6], 1.2: [6.0, 6.6]}}
    table = regret_table(values, higher_is_better=False)
    assert table["fast"][0.6].median == 1.0 == table["fast"][1.2].median
    assert table["slow"][1.2].median == pytest.approx(np.median([6.0 / 2.0, 6.6 / 2.2]))


# ---- failures shown, never dropped -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return mooncake_trace(tmp_path_factory.mktemp("scoreboard") / "trace.jsonl")


def test_a_contender_that_raises_is_an_error_cell(trace: Path) -> None:
    benchmark = trace_benchmark(str(trace), num_requests=40)
    ctx = ExperimentContext("scoreboard", quick=True, seed=0)
    entries = {"fcfs": "fcfs", "broken": "fcfs:no_such_parameter=1"}
    result = run_benchmark(ctx, benchmark, entries, (0.6, 1.2), (0, 1), 40)
    assert set(result.errors) == {"broken"} and "no_such_parameter" in result.errors["broken"]
    assert result.values()["broken"] == {0.6: [None, None], 1.2: [None, None]}
    assert _regret_cell(result, result.regret(), "broken").startswith("error: ")
    assert all(o.headline is not None and o.stranded == 0 for per in result.outcomes["fcfs"].values() for o in per)
    assert {run.policy for run in ctx.runs} == {"fcfs"} and len(ctx.runs) == 4


def test_a_failed_grid_names_its_contender(trace: Path) -> None:
    workload = build_workload(str(trace), rate_per_s=1.0, seed=0, num_requests=None).head(5)
    point = SimPoint("bench fcfs:no_such_parameter=1 load=0.6 seed=0", workload, "fcfs:no_such_parameter=1",
                     ClusterSpec())
    with pytest.raises(PointError) as caught:
        InProcess().run([point])
    running = {"fcfs": "fcfs", "broken": "fcfs:no_such_parameter=1"}
    assert _failed_contender(caught.value, running) == "broken"
    assert _failed_contender(RuntimeError("something else"), running) is None


def test_a_stranded_run_has_no_headline(trace: Path) -> None:
    benchmark = trace_benchmark(str(trace), num_requests=20)
    setup = benchmark.setup((0,), 20, None)
    run = run_policy(setup.workload_at(0, 0.6), "fcfs", setup.clusters[0])
    assert read_run(benchmark, run, setup, 0).headline is not None
    run.requests[0].state = RequestState.STALLED
    outcome = read_run(benchmark, run, setup, 0)
    assert outcome.headline is None and outcome.stranded == 1 and outcome.finished == len(run.requests) - 1


def test_windows_are_consecutive_requests_spread_over_the_trace(trace: Path) -> None:
    whole = build_workload(str(trace), rate_per_s=1.0, seed=0, num_requests=None)
    parts = windows(str(trace), (0, 1, 2), 50)
    starts = []
    for part in parts.values():
        assert len(part) == 50 and part.arrival_time_s[0] == 0.0
        start = next(i for i in range(len(whole) - 49)
                     if np.array_equal(whole.prompt_tokens[i:i + 50], part.prompt_tokens))
        assert np.array_equal(whole.output_tokens[start:start + 50], part.output_tokens)
        starts.append(start)
    assert starts == sorted(starts) and starts[0] == 0 and starts[-1] == len(whole) - 50


# ---- the --quick report ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def report(quick_reports: QuickReports) -> Path:
    """The session's ``--quick`` report (tests/experiments/conftest.py)."""
    return quick_reports.path("scoreboard")


def test_quick_report_is_a_readable_record_with_utilitys_targets(report: Path, results: dict[str, Any]) -> None:
    text = (report / "report.md").read_text()
    assert text.index("## Claims") < text.index("## Figures") < text.index("## regret")
    assert record_problems(text) == []
    assert record_problems(text.replace("](", "](img/scoreboard_")) == []
    claims = results["claims"]
    seed_benchmarks = [b.name for b in BENCHMARKS if b.seed_benchmark]
    assert [c["figure"] for c in claims[:len(seed_benchmarks)]] == seed_benchmarks
    assert len(claims) == len(seed_benchmarks) + 3
    for claim in claims:
        assert claim["verdict"] in VERDICTS and claim["why"], claim
        if UTILITY not in POLICIES.names():
            assert claim["ours"] == "not run" and claim["why"] == "utility not registered"
    assert results["meta"]["quick"] is True and results["meta"]["grid_note"]


def test_every_benchmark_has_its_curve_or_says_why_not(figures: dict[str, dict[str, Any]]) -> None:
    assert list(figures) == ["regret", *(b.name for b in BENCHMARKS)]
    contenders_run = figures["regret"]["ours"]["contenders"]
    for benchmark in BENCHMARKS:
        ours = figures[benchmark.name]["ours"]
        if "skipped" in ours:
            assert ours["skipped"] and figures["regret"]["ours"]["skipped"][benchmark.name] == ours["skipped"]
            continue
        assert ours["loads"] == list(QUICK_LOADS) and ours["higher_is_better"] == benchmark.higher_is_better
        assert set(ours["per_seed"]) == set(contenders_run)


def test_values_are_the_runs_own(figures: dict[str, dict[str, Any]], rows: Rows) -> None:
    """long-context's mean E2E of finished requests and the count not served, from requests.csv."""
    ours = figures["long-context"]["ours"]
    specs = figures["long-context"]["config"]["contenders"]
    e2e: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    not_served: dict[tuple[str, str, str], int] = defaultdict(int)
    for row in rows:
        if row["figure"] != "long-context":
            continue
        key = (row["policy"], row["load"], row["seed"])
        if row["state"] == "finished":
            e2e[key].append(float(row["e2e_s"]))
        else:
            not_served[key] += 1
    checked = 0
    for label, per_load in ours["per_seed"].items():
        for load, values in per_load.items():
            for k, (seed, value) in enumerate(zip(ours["seeds"], values, strict=True)):
                key = (specs[label], str(float(load)), str(seed))
                assert value == pytest.approx(float(np.mean(e2e[key])), rel=1e-9)
                assert ours["not_served_per_seed"][label][load][k] == not_served[key]
                checked += 1
    assert checked == len(specs) * len(QUICK_LOADS)


def test_the_regret_table_is_the_benchmarks_values(figures: dict[str, dict[str, Any]]) -> None:
    regret = figures["regret"]["ours"]["regret"]
    for benchmark in BENCHMARKS:
        ours = figures[benchmark.name]["ours"]
        if "skipped" in ours:
            continue
        values = {label: {float(x): v for x, v in per_load.items()}
                  for label, per_load in ours["per_seed"].items()}
        table = regret_table(values, higher_is_better=benchmark.higher_is_better)
        for label, per_load in table.items():
            for load, band in per_load.items():
                assert regret[benchmark.name][label][f"{load:g}"] == dataclasses.asdict(band)


def test_the_full_grid_is_the_issues() -> None:
    assert LOADS == (0.6, 0.9, 1.2)
    names = [b.name for b in BENCHMARKS]
    assert len(set(names)) == len(names) and {"long-context", "production"} <= set(names)
    for benchmark in BENCHMARKS:
        assert benchmark.num_requests(quick=True) < benchmark.num_requests(quick=False)


def test_a_users_trace_replaces_the_long_context_requests(trace: Path) -> None:
    long_context = next(b for b in BENCHMARKS if b.name == "long-context")
    assert long_context.takes_workload
    ctx = ExperimentContext("scoreboard", quick=True, seed=0, workload=str(trace))
    result = run_benchmark(ctx, long_context, {"fcfs": "fcfs"}, (0.6,), (0,), 30)
    mine = build_workload(str(trace), rate_per_s=1.0, seed=0, num_requests=None).head(30)
    assert result.setup.config["workload"] == str(trace)
    assert result.setup.config["prompt_tokens_max"] == int(mine.prompt_tokens.max())
    assert [o.num_requests for o in result.outcomes["fcfs"][0.6]] == [30]
