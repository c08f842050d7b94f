"""Monitoring series (semsched/metrics/series.py) on a hand-made run: every expected figure below is worked out
from the series' definitions in the module docstring, bin by bin."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from semsched.core.plan import PreemptionMode, PreemptionReason
from semsched.core.request import Request, RequestState
from semsched.metrics.series import MonitoringSeries, monitoring_series, series_columns, write_series_csv
from semsched.sim.monitor import MonitorLog, PreemptionRecord, QueueSample, SwapLevel
from tests.metrics.factories import RequestFactory

SWAP, RECOMPUTE, DROP = PreemptionMode.SWAP, PreemptionMode.RECOMPUTE, PreemptionMode.DROP
KV, PRIORITY = PreemptionReason.KV_PRESSURE, PreemptionReason.PRIORITY


def _requests(make_request: RequestFactory) -> list[Request]:
    """Priority 1 (PREMIUM, TTFT target 0.5 s) and priority 3 (BACKGROUND, no target); bins of 60 s."""
    premium = {"priority": 1, "tier": "PREMIUM", "ttft_slo_s": 0.5}
    background = {"priority": 3, "tier": "BACKGROUND"}
    return [
        make_request([10.2, 10.4], request_id="a", arrival_time_s=10.0, **premium),  # TTFT 0.2: met, bin 0
        make_request([21.0, 21.5], request_id="b", arrival_time_s=20.0, **premium),  # TTFT 1.0: missed, bin 0
        make_request([], request_id="c", arrival_time_s=65.0, state=RequestState.REJECTED, finish_time_s=65.0,
                     finish_reason="shed: PREMIUM at risk; BACKGROUND shed", **premium),  # missed, bin 1
        make_request([30.0, 61.0, 62.0], request_id="d", arrival_time_s=5.0, **background),  # ends in bin 1
        make_request([120.0], request_id="e", arrival_time_s=100.0, state=RequestState.DROPPED,
                     finish_time_s=130.0, finish_reason="dropped: KV cache full; tiered ends it", **background),
        make_request([125.1], request_id="f", arrival_time_s=125.0, **premium),  # met, bin 2
    ]


def _log() -> MonitorLog:
    def preemption(time_s: float, mode: PreemptionMode, reason: PreemptionReason) -> PreemptionRecord:
        return PreemptionRecord(time_s, 0, "x", 3, "BACKGROUND", mode, reason)

    return MonitorLog(
        sample_interval_s=30.0,
        num_swap_blocks=50,
        preemptions=[
            preemption(5.0, SWAP, KV),
            preemption(59.999, RECOMPUTE, PRIORITY),
            preemption(60.0, SWAP, PRIORITY),
            preemption(125.0, DROP, KV),
        ],
        queue_samples=[
            QueueSample(0.0, {1: 2, 3: 1}, 0),
            QueueSample(30.0, {3: 4}, 10),
            QueueSample(60.0, {}, 5),
            QueueSample(90.0, {1: 1}, 0),
            QueueSample(120.0, {1: 1, 3: 2}, 0),
        ],
        swap_levels=[SwapLevel(45.0, 40), SwapLevel(100.0, 7)],
        end_time_s=130.0,
    )


@pytest.fixture
def series(make_request: RequestFactory) -> MonitoringSeries:
    return monitoring_series(_requests(make_request), _log(), bin_s=60.0, rolling_bins=2,
                             target_shares={1: 3.0, 3: 1.0})


def test_bins_cover_the_run(series: MonitoringSeries) -> None:
    assert series.num_bins == 3  # 0-60, 60-120, 120-180: the run ends at 130 s
    assert series.starts_s.tolist() == [0.0, 60.0, 120.0]
    assert series.priorities == (1, 3)
    assert series.tiers == {1: ("PREMIUM",), 3: ("BACKGROUND",)}


def test_preemptions_by_mode_and_reason(series: MonitoringSeries) -> None:
    assert series.preemptions_by_mode == {RECOMPUTE: (1, 0, 0), SWAP: (1, 1, 0), DROP: (0, 0, 1)}
    assert series.preemptions_by_reason == {KV: (1, 0, 1), PRIORITY: (1, 1, 0)}
    assert series.preemptions == (2, 1, 1)


def test_slo_compliance_counts_requests_that_ended_in_the_bin(series: MonitoringSeries) -> None:
    assert series.slo_requests[1] == (2, 1, 1) and series.slo_met[1] == (1, 0, 1)
    assert series.slo_compliance(1) == (1 / 2, 0 / 1, 1 / 1)
    assert series.slo_compliance_rolling(1) == (1 / 2, (1 + 0) / (2 + 1), (0 + 1) / (1 + 1))


def test_a_priority_without_targets_has_no_compliance(series: MonitoringSeries) -> None:
    assert series.slo_compliance(3) == (None, None, None)
    assert series.slo_compliance_rolling(3) == (None, None, None)


def test_queue_depth_mean_and_max_over_the_samples_in_each_bin(series: MonitoringSeries) -> None:
    assert series.queue_depth_mean == {1: ((2 + 0) / 2, (0 + 1) / 2, 1 / 1), 3: ((1 + 4) / 2, 0 / 2, 2 / 1)}
    assert series.queue_depth_max == {1: (2, 1, 1), 3: (4, 0, 2)}


def test_a_bin_without_samples_has_no_queue_depth(make_request: RequestFactory) -> None:
    fine = monitoring_series(_requests(make_request), _log(), bin_s=20.0)
    # bins 0-20 (sample at 0), 20-40 (sample at 30), 40-60 (no sample; the swap level at 45)
    assert fine.queue_depth_mean[1][:3] == (2.0, 0.0, None)
    assert fine.queue_depth_max[3][:3] == (1, 4, None)
    assert fine.swap_blocks_max[:3] == (0, 10, 40)
    # in 30 s bins the level at 45 s after a swap-out is above the sample at 30 s in the same bin
    assert monitoring_series(_requests(make_request), _log(), bin_s=30.0).swap_blocks_max[:2] == (0, 40)


def test_served_tokens_shares_and_deviation_from_targets(series: MonitoringSeries) -> None:
    assert series.output_tokens == {1: (4, 0, 1), 3: (1, 2, 1)}
    assert series.token_share(1) == (4 / 5, 0 / 2, 1 / 2)
    assert series.target_shares == {1: 3 / 4, 3: 1 / 4}
    assert series.share_deviation(1) == (4 / 5 - 3 / 4, 0 / 2 - 3 / 4, 1 / 2 - 3 / 4)
    assert series.share_deviation(3) == (1 / 5 - 1 / 4, 2 / 2 - 1 / 4, 1 / 2 - 1 / 4)


def test_without_target_shares_there_is_no_deviation(make_request: RequestFactory) -> None:
    series = monitoring_series(_requests(make_request), _log())
    assert series.share_deviation(1) is None
    assert not any(name.startswith("share_deviation") for name in series.rows()[0])


def test_a_bin_that_served_nothing_has_no_share(make_request: RequestFactory) -> None:
    requests = [make_request([1.0], request_id="a", priority=1), make_request([125.0], request_id="b", priority=2)]
    series = monitoring_series(requests, _log(), bin_s=60.0, target_shares={1: 1.0})
    assert series.token_share(1) == (1.0, None, 0.0)
    assert series.share_deviation(2) == (0.0 - 0.0, None, 1.0 - 0.0)  # a priority not named has target 0


def test_swap_space_in_use_is_the_most_in_the_bin(series: MonitoringSeries) -> None:
    assert series.swap_blocks_max == (40, 7, 0)  # samples 0, 10 and the level 40; 5, 0 and 7; 0
    assert series.swap_fraction_max() == (40 / 50, 7 / 50, 0 / 50)


def test_rejections_by_kind_of_reason(series: MonitoringSeries) -> None:
    assert series.rejections == {"dropped": (0, 0, 1), "shed": (0, 1, 0)}
    assert series.num_rejections == (0, 1, 1)


def test_rows_carry_every_column_with_units(series: MonitoringSeries) -> None:
    rows = series.rows()
    assert len(rows) == series.num_bins
    assert rows[1]["start_s"] == 60.0 and rows[1]["end_s"] == 120.0
    assert rows[1]["preemptions_swap"] == 1 and rows[1]["preemptions_priority"] == 1
    assert rows[1]["rejections_shed"] == 1 and rows[2]["rejections_dropped"] == 1
    assert rows[0]["slo_compliance_p3"] == ""  # no figure: an empty cell, never 100 %
    assert rows[0]["queue_depth_max_p3"] == 4 and rows[0]["swap_fraction_max"] == 40 / 50


def test_the_csv_has_one_row_per_policy_and_bin_and_the_union_of_columns(
    tmp_path: Path, series: MonitoringSeries, make_request: RequestFactory
) -> None:
    other = monitoring_series([make_request([1.0], request_id="z", priority=0)], MonitorLog(1.0, end_time_s=1.0))
    path = tmp_path / "series.csv"
    write_series_csv(path, {"tiered": series, "fcfs": other})
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        rows = list(reader)
        header = reader.fieldnames or []
    assert header == series_columns([series, other])
    assert header[:5] == ["policy", "bin", "start_s", "end_s", "preemptions"]
    assert {"queue_depth_mean_p0", "queue_depth_mean_p1", "slo_compliance_rolling_p3", "swap_blocks_max"} <= set(
        header
    )
    assert [row["policy"] for row in rows] == ["tiered"] * series.num_bins + ["fcfs"] * other.num_bins
    assert rows[-1]["queue_depth_mean_p1"] == "" and rows[-1]["rejections_shed"] == ""


def test_requests_still_in_flight_end_in_no_bin(make_request: RequestFactory) -> None:
    running = make_request([1.0], request_id="r", state=RequestState.RUNNING, ttft_slo_s=1.0, priority=1)
    series = monitoring_series([running], MonitorLog(1.0, end_time_s=2.0))
    assert series.slo_requests[1] == (0,) and series.output_tokens[1] == (1,)  # one 60 s bin


def test_an_empty_run_has_one_empty_bin() -> None:
    series = monitoring_series([], MonitorLog(1.0))
    assert series.num_bins == 1 and series.priorities == () and series.preemptions == (0,)
    assert series.swap_blocks_max == (None,) and series.rejections == {}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"bin_s": 0.0}, "bin_s"),
        ({"bin_s": float("inf")}, "bin_s"),
        ({"rolling_bins": 0}, "rolling_bins"),
        ({"target_shares": {1: -0.5}}, r"target_shares\[1\]"),
        ({"target_shares": {1: 0.0}}, "target_shares"),
        ({"target_shares": {1: float("nan")}}, r"target_shares\[1\]"),
    ],
)
def test_bad_parameters_are_refused(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        monitoring_series([], MonitorLog(1.0), **kwargs)  # type: ignore[arg-type]


def test_a_sample_of_many_points_counts_each_point_in_its_bin() -> None:
    # interval 0.7 s: points 0, 0.7, ..., 104.3 s (150 points); those in 0-60 s are k = 0..85 (85 * 0.7 = 59.5)
    log = MonitorLog(0.7, queue_samples=[QueueSample(0.0, {1: 2}, 3, num_points=150),
                                         QueueSample(105.0, {1: 8}, 9, num_points=1)], end_time_s=105.0)
    series = monitoring_series([], log, bin_s=60.0)
    points_in_first_bin = sum(1 for k in range(150) if k * 0.7 < 60.0)
    assert points_in_first_bin == 86
    assert series.queue_depth_mean[1] == ((2 * 86) / 86, (2 * 64 + 8 * 1) / (64 + 1))
    assert series.queue_depth_max[1] == (2, 8)
    assert series.swap_blocks_max == (3, 9)
