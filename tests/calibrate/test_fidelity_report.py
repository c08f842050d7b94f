"""Tests for semsched/calibrate/fidelity_report.py: comparisons, the rich table, the analysis lines and the files,
on a report built from a synthetic replay (the simulator's own latencies, 20 % slower)."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from semsched.calibrate.fidelity import compare_policy, scheduler_config
from semsched.calibrate.fidelity_report import (
    FidelityReport,
    MetricComparison,
    analysis_lines,
    compare,
    compare_repeats,
    dominant_statement,
    fidelity_table,
    statistic,
    write_report,
)
from semsched.calibrate.profiling import EngineSettings
from tests.calibrate.fidelity_factories import profile_info, replay_result, small_workload


def test_relative_error_is_sim_minus_real_over_real() -> None:
    assert MetricComparison("ttft_mean", 2.0, 1.5).error == pytest.approx(-0.25)
    assert MetricComparison("e2e_p90", 1.0, 1.1).error == pytest.approx(0.1)
    assert MetricComparison("ttft_mean", 0.0, 0.0).error == 0.0
    assert math.isinf(MetricComparison("ttft_mean", 0.0, 1.0).error)


def test_statistics_are_the_mean_and_numpys_p90() -> None:
    values = [0.1, 0.5, 0.2, 3.0, 0.4]
    assert statistic(values, "mean") == pytest.approx(np.mean(values))
    assert statistic(values, "p90") == pytest.approx(np.percentile(values, 90))
    with pytest.raises(ValueError, match="unknown"):
        statistic(values, "p50")
    with pytest.raises(ValueError, match="no values"):
        statistic([], "mean")


def test_compare_gives_every_metric_in_order() -> None:
    metrics = compare({"ttft": [1.0, 2.0], "e2e": [3.0, 5.0]}, {"ttft": [1.0, 1.0], "e2e": [4.0, 4.0]})
    assert [m.metric for m in metrics] == ["ttft_mean", "ttft_p90", "e2e_mean", "e2e_p90"]
    assert metrics[0].error == pytest.approx(-1 / 3) and metrics[2].error == pytest.approx(0.0)


@pytest.fixture(scope="module")
def report() -> FidelityReport:
    workload = small_workload()
    config = scheduler_config(EngineSettings(model="m", max_model_len=1024))
    policies = tuple(
        compare_policy(workload, [replay_result(workload, policy)], config, profile_info(), "iteration")
        for policy in ("fcfs", "priority-preempt")
    )
    meta = {
        "num_requests": len(workload),
        "load_average_before": 3.0,
        "load_average_after": 0.5,
        "cpu_count": 2,
        "onednn_primitive_cache_capacity": "8192",
        "profile": {"overheads": {"arrival_s": 4.6e-4, "new_shape_s": 2.1e-3, "idle_wakeup_s": 1.75e-3}},
    }
    return FidelityReport(meta, policies)


def test_the_comparison_sees_the_slowdown_of_the_synthetic_engine(report: FidelityReport) -> None:
    for policy in report.policies:
        assert policy.num_complete == len(policy.sim_requests)
        for metric in policy.metrics:
            assert metric.error == pytest.approx(1 / 1.2 - 1)  # the real side is the simulator, 20 % slower
        assert set(policy.by_priority) <= {0, 1, 2, 3}
        analysis = policy.analysis
        assert analysis.engine_time_ratio > 1  # the synthetic steps carry overheads BATCH does not charge
        assert [m.metric for m in analysis.corrected] == [m.metric for m in policy.metrics]
        assert all(change > 0 for change in analysis.sensitivity.values())  # slower steps, later tokens
    assert report.worst_mean_error == pytest.approx(1 - 1 / 1.2)


def test_table_lists_policy_by_metric_with_real_sim_and_error(report: FidelityReport) -> None:
    console = Console(file=io.StringIO(), width=120)
    console.print(fidelity_table(report))
    text = console.file.getvalue()  # type: ignore[attr-defined]
    for expected in ("fcfs", "priority-preempt", "ttft mean", "ttft p90", "e2e mean", "e2e p90", "-16.7%"):
        assert expected in text


def test_analysis_lines_explain_the_error_and_give_the_verdict(report: FidelityReport) -> None:
    lines = analysis_lines(report)
    text = "\n".join(lines)
    assert lines[0].startswith("machine: load average 3.0") and "competed for the CPUs" in lines[0]
    assert "oneDNN primitive cache 8192" in lines[0]
    assert "0.46 ms per arrival" in lines[1] and "1.75 ms more per arrival that finds the engine idle" in lines[1]
    assert "12/12 requests finished with their exact token count" in text
    assert "profile by step class" in text and "step-time fit" in text and "dominant:" in text
    assert "decode-only steps by what came before: decode-only right after a batch change" in text
    assert "sim with the profile x" in text and "sensitivity at this load: 5% longer steps" in text
    assert "engine-speed probe (one decode-only step of 4 requests): 2.10 ms before and 2.30 ms after" in text
    assert "1.100x its time when the profile was measured (slower machine: 10.0%)" in text
    assert lines[-2].startswith("target |error of every mean| <= 10%: NOT met")
    assert "sim on the machine's speed during each replay (its settled decode-only steps against" in text
    given = report.worst_given_speed_error
    assert given is not None and given < report.worst_mean_error
    verdict = "met" if given <= 0.1 else "NOT met"
    assert lines[-1] == (
        f"on the machine's speed during each replay (the drift taken out): {verdict} (worst {given:.1%})"
    )


def test_report_files_hold_the_summary_and_every_request_and_step(report: FidelityReport, tmp_path: Path) -> None:
    paths = write_report(report, tmp_path / "out")
    assert [p.name for p in paths] == ["fidelity.json", "requests.csv", "steps.csv"]
    data = json.loads(paths[0].read_text())
    assert set(data["policies"]) == {"fcfs", "priority-preempt"}
    fcfs = data["policies"]["fcfs"]
    assert set(fcfs["metrics"]) == {"ttft_mean", "ttft_p90", "e2e_mean", "e2e_p90"}
    assert {"sources", "step_classes", "corrected", "sensitivity", "step_times_ms"} <= set(fcfs["analysis"])
    with paths[1].open() as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 2 * 12 and rows[0]["real_ttft_s"] and rows[0]["sim_ttft_s"]
    with paths[2].open() as handle:
        assert len(list(csv.DictReader(handle))) == sum(len(p.real.steps) for p in report.policies)
    assert {row["repeat"] for row in rows} == {"0"}


# ---- several replays per policy -------------------------------------------------------------------------------
def test_compare_repeats_takes_each_statistics_mean_over_the_replays() -> None:
    sim = {"ttft": [0.5, 0.5], "e2e": [4.4, 4.4]}
    reals = [{"ttft": [t, t], "e2e": [e, e]} for t, e in ((1.0, 3.0), (3.0, 9.0), (2.0, 4.5))]
    metrics = compare_repeats(reals, sim)
    ttft, e2e = metrics[0], metrics[2]
    assert ttft.real_repeats_s == (1.0, 3.0, 2.0) and ttft.real_s == 2.0
    assert e2e.real_s == pytest.approx(5.5) and e2e.error == pytest.approx(-0.2)  # the median would be 4.5
    assert e2e.repeat_spread == pytest.approx((9.0 - 3.0) / 5.5) and e2e.within_repeats
    assert not ttft.within_repeats  # faster than the fastest replay
    assert compare_repeats(reals[:1], sim) == compare(reals[0], sim)  # one replay: the plain comparison
    with pytest.raises(ValueError, match="no replays"):
        compare_repeats([], sim)


def test_compare_repeats_treats_the_range_as_closed() -> None:
    sim = {"ttft": [2.0], "e2e": [2.0]}
    metrics = compare_repeats([{"ttft": [2.0], "e2e": [2.0]}, {"ttft": [3.0], "e2e": [1.0]}], sim)
    assert all(m.within_repeats for m in metrics)


@pytest.fixture(scope="module")
def repeated_report() -> FidelityReport:
    """Three replays per policy at 1.3x, 0.9x and 1.5x the simulator's latencies."""
    workload = small_workload()
    config = scheduler_config(EngineSettings(model="m", max_model_len=1024))
    policies = tuple(
        compare_policy(
            workload,
            [replay_result(workload, policy, slowdown) for slowdown in (1.3, 0.9, 1.5)],
            config,
            profile_info(),
            "iteration",
        )
        for policy in ("fcfs", "priority-preempt")
    )
    return FidelityReport({"num_requests": len(workload)}, policies)


def test_with_repeats_the_real_side_is_the_replays_mean_and_the_analysis_is_of_the_median_replay(
    repeated_report: FidelityReport,
) -> None:
    for policy in repeated_report.policies:
        assert len(policy.all_replays) == 3 and policy.analysis.replay_index == 0  # 1.3x is the median
        assert policy.real is policy.all_replays[0]
        for metric in policy.metrics:
            assert metric.error == pytest.approx(1 / np.mean([1.3, 0.9, 1.5]) - 1)
            assert len(metric.real_repeats_s) == 3 and metric.within_repeats
        assert policy.num_complete == len(policy.sim_requests)
        # simulated on the speed the replays' decode steps ran at, the means are within the target: that says more
        # than "the simulator lies among the replays", which is what is left without it
        assert policy.given_speed is not None
        statement = dominant_statement(policy)
        assert statement.startswith("the machine's speed: on the speed the machine ran each replay")
        assert "machine noise" in dominant_statement(dataclasses.replace(policy, given_speed=None))


def test_with_repeats_the_table_the_lines_and_the_files_show_every_replay(
    repeated_report: FidelityReport, tmp_path: Path
) -> None:
    console = Console(file=io.StringIO(), width=140)
    console.print(fidelity_table(repeated_report))
    table = console.file.getvalue()  # type: ignore[attr-defined]
    assert "real range (s)" in table and "sim, machine speed (s)" in table
    text = "\n".join(analysis_lines(repeated_report))
    assert "in each of 3 replays" in text and "real replays: ttft mean" in text
    assert "the analysis below is of replay 1 of 3" in text
    paths = write_report(repeated_report, tmp_path / "out")
    data = json.loads(paths[0].read_text())
    assert len(data["policies"]["fcfs"]["replays"]) == 3
    assert len(data["policies"]["fcfs"]["metrics"]["e2e_mean"]["real_repeats_s"]) == 3
    given = data["policies"]["fcfs"]["given_machine_speed"]
    assert len(given["per_replay"]) == 3 and len(given["speeds"]) == 3 and given["window_s"] == 3.0
    assert data["worst_given_speed_error"] == pytest.approx(repeated_report.worst_given_speed_error)
    with paths[1].open() as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 2 * 3 * 12 and {r["repeat"] for r in rows} == {"0", "1", "2"}
    with paths[2].open() as handle:
        steps = list(csv.DictReader(handle))
    assert len(steps) == sum(len(r.steps) for p in repeated_report.policies for r in p.all_replays)


@pytest.mark.parametrize(
    ("first", "full", "expected"),
    [
        (28.0, 20.0, "ran faster while the first part was measured, so the replays ran busier than asked"),
        (20.0, 28.0, "ran slower while the first part was measured, so the replays ran lighter than asked"),
        (20.0, 20.5, None),
    ],
)
def test_load_line_says_when_the_first_part_set_the_rate_off(
    first: float, full: float, expected: str | None
) -> None:
    from semsched.calibrate.fidelity_report import _load_line

    rate = 0.3 * first
    line = _load_line(
        {"rate_per_s": rate, "simulated_saturation_rate_per_s": first, "full_profile_saturation_rate_per_s": full}
    )
    assert line.startswith(f"load: the replays ran at {rate / full:.0%} of the saturation rate of the full")
    assert f"the rate was set at 30% of the first part's, {first:.2f} req/s" in line
    if expected is None:
        assert "first part was measured" not in line
    else:
        assert expected in line


def test_the_written_steps_and_latencies_read_back_as_the_replays_had_them(
    repeated_report: FidelityReport, tmp_path: Path
) -> None:
    from semsched.calibrate.fidelity import real_latencies
    from semsched.calibrate.fidelity_report import read_real_latencies, read_steps_csv

    write_report(repeated_report, tmp_path)
    steps, latencies = read_steps_csv(tmp_path / "steps.csv"), read_real_latencies(tmp_path / "requests.csv")
    expected = {(p.policy, i): r for p in repeated_report.policies for i, r in enumerate(p.all_replays)}
    assert set(steps) == set(latencies) == set(expected)
    for key, replay in expected.items():
        assert len(steps[key]) == len(replay.steps)
        for read, original in zip(steps[key], replay.steps, strict=True):
            assert read.prefill == original.prefill and read.num_decode == original.num_decode
            assert read.duration_s == pytest.approx(original.duration_s, abs=1e-6)  # written to the microsecond
        real = real_latencies(replay)
        assert latencies[key]["e2e"] == pytest.approx(real["e2e"]) and latencies[key]["ttft"] == pytest.approx(
            real["ttft"]
        )


def test_a_file_that_is_not_a_steps_csv_is_refused_with_its_line(tmp_path: Path) -> None:
    from semsched.calibrate.fidelity_report import STEP_COLUMNS, read_steps_csv

    path = tmp_path / "steps.csv"
    path.write_text(",".join(STEP_COLUMNS) + "\nfcfs,0,0.1,0.2,0,0,0,0,0,12:0:5,1,10,0,0\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"steps.csv:2: not a steps.csv row"):
        read_steps_csv(path)
