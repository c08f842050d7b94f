from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

import pytest
from rich.console import Console

from semsched.core.request import Request, RequestState
from semsched.metrics.report import (
    REQUEST_CSV_COLUMNS,
    class_table,
    comparison_table,
    print_comparison,
    write_json,
    write_requests_csv,
    write_summary_csv,
)
from semsched.metrics.request_metrics import request_metrics
from semsched.metrics.summary import Summary, metric_names, summarize
from tests.metrics.factories import RequestFactory


def _run(make_request: RequestFactory, late_s: float) -> list[Request]:
    return [
        make_request([0.2, 0.4], request_id="a", priority=0, tier="premium", ttft_slo_s=1.0),
        make_request([late_s, late_s + 0.1], request_id="b", priority=1, ttft_slo_s=1.0),
        make_request([], request_id="c", state=RequestState.REJECTED, priority=1),
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


def test_requests_csv_one_row_per_request(tmp_path: Path, make_request: RequestFactory) -> None:
    path = tmp_path / "requests.csv"
    metrics = [request_metrics(r) for r in _run(make_request, 2.0)]
    write_requests_csv(path, metrics, "fcfs")
    write_requests_csv(path, metrics, "edf", append=True)
    with path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert list(rows[0]) == REQUEST_CSV_COLUMNS
    assert [(r["policy"], r["request_id"]) for r in rows] == [
        ("fcfs", "a"), ("fcfs", "b"), ("fcfs", "c"), ("edf", "a"), ("edf", "b"), ("edf", "c")
    ]  # fmt: skip
    rejected = rows[2]
    assert (rejected["state"], rejected["ttft_s"], rejected["slo_met"]) == ("rejected", "", "False")
    assert float(rows[0]["itl_max_s"]) == pytest.approx(0.2)


def test_summary_csv_one_row_per_policy_and_class(tmp_path: Path, results: dict[str, Summary]) -> None:
    path = tmp_path / "summary.csv"
    write_summary_csv(path, results)
    with path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [(r["policy"], r["class"]) for r in rows] == [
        ("fcfs", "all"), ("fcfs", "p0"), ("fcfs", "p1"), ("edf", "all"), ("edf", "p0"), ("edf", "p1")
    ]  # fmt: skip
    assert set(metric_names()) <= set(rows[0])
    assert float(rows[0]["slo_attainment"]) == pytest.approx(1 / 3)
    assert float(rows[3]["slo_attainment"]) == pytest.approx(2 / 3)


def _render(table: object) -> str:
    console = Console(file=io.StringIO(), width=250, record=True)
    console.print(table)
    return console.export_text()


def test_comparison_table(results: dict[str, Summary]) -> None:
    table = comparison_table(results)
    assert table.row_count == 2
    text = _render(table)
    assert "fcfs" in text and "edf" in text
    assert "33.3%" in text and "66.7%" in text


def test_class_table_has_a_column_per_class(results: dict[str, Summary]) -> None:
    table = class_table(results, "slo_attainment")
    assert [c.header for c in table.columns] == ["policy", "all", "p0 (premium)", "p1 (default)"]
    assert table.row_count == 2


def test_print_comparison(results: dict[str, Summary]) -> None:
    console = Console(file=io.StringIO(), width=250, record=True)
    print_comparison(console, results)
    text = console.export_text()
    assert "Policy comparison" in text and "tdg_ratio by priority class" in text
