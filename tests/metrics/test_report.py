from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

import pytest
from rich.console import Console
from rich.table import Table

from semsched.core.request import LengthDistribution, Request, RequestState
from semsched.metrics.report import (
    REQUEST_CSV_COLUMNS,
    class_table,
    comparison_table,
    print_comparison,
    write_json,
    write_requests_csv,
    write_summary_csv,
)
from semsched.metrics.request_metrics import REQUEST_ATTRIBUTES, request_metrics
from semsched.metrics.summary import Summary, metric_columns, summarize
from semsched.metrics.units import MISSING
from tests.metrics.factories import RequestFactory
from tests.support import make_request as support_request
from tests.support import make_scheduler

REJECTION = "prompt_tokens + max_output_tokens = 9000 exceeds the KV capacity of 8192 tokens"


def _run(make_request: RequestFactory, late_s: float) -> list[Request]:
    return [
        make_request([0.2, 0.4], request_id="a", priority=0, tier="premium", ttft_slo_s=1.0, urgency=3),
        make_request([late_s, late_s + 0.1], request_id="b", priority=1, ttft_slo_s=1.0, max_output_tokens=64),
        make_request(
            [], request_id="c", state=RequestState.REJECTED, priority=1, output_tokens=700, finish_reason=REJECTION
        ),
    ]


@pytest.fixture
def results(make_request: RequestFactory) -> dict[str, Summary]:
    return {"fcfs": summarize(_run(make_request, 2.0)), "edf": summarize(_run(make_request, 0.5))}


def _reject_constant(name: str) -> float:
    raise AssertionError(f"JSON contains {name}")


def test_json_round_trip_has_no_nan(tmp_path: Path, results: dict[str, Summary]) -> None:
    path = tmp_path / "out.json"
    write_json(path, results, meta={"seed": 1, "bad": math.nan, "nested": {"inf": math.inf}})
    data = json.loads(path.read_text(), parse_constant=_reject_constant)
    assert data["meta"] == {"seed": 1, "bad": None, "nested": {"inf": None}}
    assert set(data["results"]) == {"fcfs", "edf"}
    assert data["results"]["edf"]["overall"]["num_requests"] == 3
    assert data["results"]["fcfs"]["by_priority"]["1"]["ttft_s"]["count"] == 1


def _read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def test_requests_csv_one_row_per_request(tmp_path: Path, make_request: RequestFactory) -> None:
    path = tmp_path / "requests.csv"
    metrics = [request_metrics(r) for r in _run(make_request, 2.0)]
    write_requests_csv(path, metrics, "fcfs")
    write_requests_csv(path, metrics, "edf", append=True)
    rows = _read_csv(path)
    assert list(rows[0]) == REQUEST_CSV_COLUMNS
    assert [(r["policy"], r["request_id"]) for r in rows] == [
        ("fcfs", "a"), ("fcfs", "b"), ("fcfs", "c"), ("edf", "a"), ("edf", "b"), ("edf", "c")
    ]  # fmt: skip
    late, rejected = rows[1], rows[2]
    assert (late["ttft_slo_met"], late["slo_met"], late["tpot_slo_met"]) == ("False", "False", "")
    assert (rejected["state"], rejected["ttft_s"], rejected["slo_met"]) == ("rejected", "", "")
    assert float(rows[0]["itl_max_s"]) == pytest.approx(0.2)


def test_requests_csv_says_why_and_what_was_asked(tmp_path: Path, make_request: RequestFactory) -> None:
    path = tmp_path / "requests.csv"
    write_requests_csv(path, [request_metrics(r) for r in _run(make_request, 2.0)], "fcfs")
    first, late, rejected = _read_csv(path)
    assert (rejected["state"], rejected["rejection_reason"]) == ("rejected", REJECTION)
    assert (first["state"], first["rejection_reason"]) == ("finished", "")
    assert (rejected["max_output_tokens"], rejected["target_output_tokens"]) == ("4096", "700")
    assert (late["max_output_tokens"], late["target_output_tokens"]) == ("64", "2")
    assert (first["priority"], first["tier"], first["urgency"], late["urgency"]) == ("0", "premium", "3", "")
    assert (first["ttft_slo_s"], first["e2e_slo_s"]) == ("1.0", "")
    assert set(REQUEST_ATTRIBUTES) <= set(first)


def test_requests_csv_has_urgency_truth_and_predicted_length(tmp_path: Path, make_request: RequestFactory) -> None:
    prediction = LengthDistribution.point(30)
    predicted = make_request([0.1], request_id="p", urgency=1, urgency_true=0, predicted_output=prediction)
    plain = make_request([0.2], request_id="q")
    path = tmp_path / "requests.csv"
    write_requests_csv(path, [request_metrics(predicted), request_metrics(plain)], "fcfs")
    first, second = _read_csv(path)
    columns = list(first)
    at = columns.index("urgency")
    assert columns[at : at + 3] == ["urgency", "urgency_true", "predicted_length"]
    assert "predicted_output_mean_tokens" not in columns  # one column for the prediction, named as issue 15 asks
    assert (first["urgency"], first["urgency_true"], first["predicted_length"]) == ("1", "0", "30.0")
    assert (second["urgency"], second["urgency_true"], second["predicted_length"]) == ("", "", "")


def test_csv_duration_columns_are_seconds(
    tmp_path: Path, make_request: RequestFactory, results: dict[str, Summary]
) -> None:
    write_summary_csv(tmp_path / "summary.csv", results)
    write_requests_csv(tmp_path / "requests.csv", [request_metrics(r) for r in _run(make_request, 2.0)], "fcfs")
    summary_columns = list(_read_csv(tmp_path / "summary.csv")[0])
    request_columns = list(_read_csv(tmp_path / "requests.csv")[0])
    durations = ("ttft", "tpot", "e2e", "queueing_delay", "itl", "arrival_time")
    for column in (*summary_columns, *request_columns):
        if column.startswith(durations) and not column.endswith(("_met", "attainment")):
            assert column.endswith(("_s", "_s_per_token")), column
    assert "ttft_p90_s" in summary_columns and "goodput_requests_per_s" in summary_columns


def test_summary_csv_one_row_per_policy_and_class(tmp_path: Path, results: dict[str, Summary]) -> None:
    path = tmp_path / "summary.csv"
    write_summary_csv(path, results)
    rows = _read_csv(path)
    assert [(r["policy"], r["class"]) for r in rows] == [
        ("fcfs", "all"), ("fcfs", "p0"), ("fcfs", "p1"), ("edf", "all"), ("edf", "p0"), ("edf", "p1")
    ]  # fmt: skip
    assert set(metric_columns()) <= set(rows[0])
    # the rejected request c has no target: attainment is over a and b only
    assert float(rows[0]["slo_attainment"]) == pytest.approx(1 / 2)
    assert float(rows[3]["slo_attainment"]) == pytest.approx(2 / 2)
    assert float(rows[0]["ttft_mean_s"]) == pytest.approx((0.2 + 2.0) / 2)


def _render(table: object) -> str:
    console = Console(file=io.StringIO(), width=250, record=True)
    console.print(table)
    return console.export_text()


def test_comparison_table(results: dict[str, Summary]) -> None:
    table = comparison_table(results)
    assert table.row_count == 2
    text = _render(table)
    assert "fcfs" in text and "edf" in text
    assert "50.0%" in text and "100.0%" in text


def test_comparison_table_shows_rejected_and_dropped(make_request: RequestFactory) -> None:
    requests = [
        make_request([0.5], request_id="a"),
        make_request([], request_id="b", state=RequestState.REJECTED),
        make_request([], request_id="c", state=RequestState.REJECTED),
        make_request([], request_id="d", state=RequestState.DROPPED),
    ]
    table = comparison_table({"fcfs": summarize(requests)})
    headers = _headers(table)
    assert _cells(table, headers.index("rejected")) == ["2"]
    assert _cells(table, headers.index("dropped")) == ["1"]
    assert _cells(table, headers.index("SLO met")) == [MISSING]  # no request has a target


def _headers(table: Table) -> list[str]:
    return [" ".join(str(c.header).split()) for c in table.columns]


def _cells(table: Table, column: int) -> list[str]:
    return [str(cell) for cell in table.columns[column].cells]


def _latency_run(make_request: RequestFactory, ttft_s: float) -> Summary:
    return summarize([make_request([ttft_s, ttft_s + 0.05], e2e_slo_s=60.0)])


def test_duration_columns_pick_one_unit_by_their_largest_value(make_request: RequestFactory) -> None:
    results = {
        "fast": _latency_run(make_request, 0.25),
        "slow": _latency_run(make_request, 4351.3954),  # was printed as 4351395.4 ms
    }
    table = comparison_table(results)
    headers = _headers(table)
    ttft = headers.index("TTFT mean (min)")
    assert _cells(table, ttft) == ["0.0", "72.5"]
    assert _cells(table, headers.index("TPOT p90 (ms)")) == ["50.0", "50.0"]
    assert "E2E mean (min)" in headers and "norm. lat. (min/tok)" in headers


def test_request_latencies_share_one_unit_in_the_comparison_table(make_request: RequestFactory) -> None:
    # nine quick requests and one slow one: E2E mean below 10 s, E2E p99 above (was "(ms)" beside "(s)")
    requests = [make_request([0.1, 1.0], request_id=f"q{i}") for i in range(9)]
    requests.append(make_request([0.1, 50.0], request_id="slow"))
    summary = summarize(requests)
    assert summary.overall.metric("e2e_mean") < 10.0 <= summary.overall.metric("e2e_p99")
    table = comparison_table({"fcfs": summary})
    units = {h.rsplit("(", 1)[1] for h in _headers(table) if h.startswith(("TTFT", "E2E"))}
    assert units == {"s)"}
    ttft_mean = _cells(table, _headers(table).index("TTFT mean (s)"))[0]
    assert float(ttft_mean) == pytest.approx(0.1) and len(ttft_mean.split(".")[1]) == 3  # 3 significant digits


def test_class_table_has_a_column_per_class(results: dict[str, Summary]) -> None:
    table = class_table(results, "slo_attainment")
    assert [c.header for c in table.columns] == ["policy", "all", "p0 (premium)", "p1 (default)"]
    assert table.row_count == 2
    # p1 holds b (target, late under fcfs) and the rejected c (no target)
    assert _cells(table, 3) == ["0.0%", "100.0%"]


def test_class_table_of_a_class_without_targets_shows_a_dash(make_request: RequestFactory) -> None:
    requests = [
        make_request([0.1], request_id="s", priority=0),
        make_request([0.1], request_id="p", priority=1, ttft_slo_s=1.0),
    ]
    table = class_table({"fcfs": summarize(requests)}, "slo_attainment")
    assert [_cells(table, k)[0] for k in (1, 2, 3)] == ["100.0%", MISSING, "100.0%"]


def test_class_table_names_its_unit(results: dict[str, Summary], make_request: RequestFactory) -> None:
    table = class_table(results, "ttft_p90")
    assert table.title == "ttft_p90 (ms) by priority class"  # the largest, fcfs's p1, is 2.0 s
    assert _cells(table, 1)[1] == "470.0"  # edf, all: p90 of 0.2 and 0.5 s
    slow = class_table({"fcfs": _latency_run(make_request, 30.0)}, "ttft_p90_s")
    assert slow.title == "ttft_p90_s (s) by priority class"
    assert _cells(slow, 1) == ["30.00"]


def test_print_comparison(results: dict[str, Summary]) -> None:
    console = Console(file=io.StringIO(), width=250, record=True)
    print_comparison(console, results)
    text = console.export_text()
    assert "Policy comparison" in text and "tdg_ratio by priority class" in text


def test_a_scheduler_rejection_reaches_requests_csv(tmp_path: Path) -> None:
    scheduler = make_scheduler("fcfs", num_gpu_blocks=4, block_size=16)  # 64 tokens of KV in all
    too_large = support_request("big", prompt=100, output=8, ttft_slo_s=1.0)
    assert not scheduler.add_request(too_large, now_s=0.0).accepted
    path = tmp_path / "requests.csv"
    write_requests_csv(path, [request_metrics(too_large)], "fcfs")
    (row,) = _read_csv(path)
    assert row["state"] == "rejected"
    assert "exceeds the KV capacity" in row["rejection_reason"]
    assert (row["max_output_tokens"], row["target_output_tokens"], row["slo_met"]) == ("8", "8", "False")
    summary = summarize([too_large])
    assert (summary.overall.num_rejected, summary.overall.slo_attainment) == (1, 0.0)
