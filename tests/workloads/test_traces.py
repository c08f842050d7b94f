"""Tests for semsched/workloads/traces.py."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from semsched.workloads import (
    DEFAULT_TIERS,
    DataNotFoundError,
    TraceFormatError,
    WorkloadError,
    find_data_file,
    load_azure_csv,
    load_mooncake_jsonl,
    read_azure_csv,
    read_mooncake_jsonl,
    rescale_to_rate,
)
from tests.workloads.factories import make_workload

WriteFile = Callable[[str, str], Path]
HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
GOOD_ROW = "2023-11-16 18:15:46.6805900,374,44\n"


# ---- real files ------------------------------------------------------------------------------------------
@pytest.mark.data
@pytest.mark.parametrize(
    ("file_name", "rows"), [("azure_llm_2023_conv.csv", 19_366), ("azure_llm_2023_code.csv", 8_819)]
)
def test_real_azure_traces_load(real_data_dir: Path, file_name: str, rows: int) -> None:
    # The data README says 19,365 / 8,818 rows; the files hold one more data row each (the README counted
    # newline characters, and the last row has no trailing newline).
    workload, report = read_azure_csv(real_data_dir / file_name)
    assert len(workload) == report.num_rows == rows
    assert report.num_zero_prompt_clamped == report.num_zero_output_clamped == 0
    assert report.num_out_of_order == 0
    assert workload.arrival_time_s[0] == 0.0
    assert 3400.0 < workload.duration_s() < 3600.0  # about one hour of traffic
    assert workload.tier == ("default",) * rows


@pytest.mark.data
def test_real_conv_trace_first_gap_keeps_all_fraction_digits(real_data_dir: Path) -> None:
    workload = load_azure_csv(real_data_dir / "azure_llm_2023_conv.csv")
    # rows 1 and 2: 18:15:46.6805900 and 18:15:50.9951690
    assert workload.arrival_time_s[1] == pytest.approx(4.314579, abs=1e-6)
    assert list(workload.prompt_tokens[:2]) == [374, 396]


# ---- Azure CSV errors ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("row", "expected"),
    [
        (
            "2023-11-16 18:15:47.1,12x,44\n",
            "line 3 (row 2): ContextTokens must be an integer >= 0, got '12x'",
        ),
        (
            "2023-11-16 18:15:47.1,12,-3\n",
            "line 3 (row 2): GeneratedTokens must be an integer >= 0, got '-3'",
        ),
        ("2023-11-16 18:15:47.1,12,4.5\n", "GeneratedTokens must be an integer"),
        ("2023-11-16 18:15,12,4\n", "line 3 (row 2): TIMESTAMP must look like"),
        ("2023-13-16 18:15:47.1,12,4\n", "TIMESTAMP is not a valid date"),
        ("2023-11-16 18:15:47.1,12\n", "line 3 (row 2): has 2 fields, the header has 3"),
        (
            "2023-11-16 18:15:47.1,99999999999999999999,4\n",
            "line 3 (row 2): ContextTokens must be at most 2147483647 tokens, got '99999999999999999999'",
        ),
        ("2023-11-16 18:15:47.1,12,2147483648\n", "GeneratedTokens must be at most 2147483647 tokens"),
        ("2023-11-16 18:15:47.1,12," + "9" * 5000 + "\n", "GeneratedTokens must be at most 2147483647 tokens"),
    ],
)
def test_azure_bad_rows_name_file_row_and_field(write_file: WriteFile, row: str, expected: str) -> None:
    path = write_file("trace.csv", HEADER + GOOD_ROW + row)
    with pytest.raises(TraceFormatError) as info:
        load_azure_csv(path)
    assert str(info.value).startswith("trace.csv")
    assert expected in str(info.value)


def test_azure_missing_column_and_empty_file(write_file: WriteFile) -> None:
    path = write_file("nocol.csv", "TIMESTAMP,ContextTokens\n2023-11-16 18:15:46.68,374\n")
    with pytest.raises(TraceFormatError, match=r"nocol.csv line 1: missing column\(s\) \['GeneratedTokens'\]"):
        load_azure_csv(path)
    with pytest.raises(TraceFormatError, match="file is empty"):
        load_azure_csv(write_file("empty.csv", ""))
    with pytest.raises(TraceFormatError, match="contains no requests"):
        load_azure_csv(write_file("header.csv", HEADER))


def test_azure_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "binary.csv"
    path.write_bytes(HEADER.encode() + b"\xff\xfe,1,2\n")
    with pytest.raises(TraceFormatError, match="binary.csv: not UTF-8"):
        load_azure_csv(path)


def test_azure_zero_lengths_clamped_and_counted(write_file: WriteFile) -> None:
    rows = "2023-11-16 18:00:00.5,0,5\n2023-11-16 18:00:01,7,0\n2023-11-16 18:00:02,8,0\n"
    workload, report = read_azure_csv(write_file("zeros.csv", HEADER + rows))
    assert (report.num_zero_prompt_clamped, report.num_zero_output_clamped) == (1, 2)
    assert list(workload.prompt_tokens) == [1, 7, 8] and list(workload.output_tokens) == [5, 1, 1]


def test_azure_unsorted_rows_sorted_stably(write_file: WriteFile) -> None:
    rows = (
        "2023-11-16 18:00:05,1,1\n"
        "2023-11-16 18:00:01,2,2\n"
        "2023-11-16T18:00:05,3,3\n"
        "2023-11-16 18:00:03.2500000,4,4\n"
    )
    workload, report = read_azure_csv(write_file("unsorted.csv", HEADER + rows))
    assert report.num_out_of_order == 2
    assert list(workload.prompt_tokens) == [2, 4, 1, 3]
    assert list(workload.arrival_time_s) == [0.0, 2.25, 4.0, 4.0]


def test_missing_file_is_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        load_azure_csv(tmp_path / "absent.csv")
    with pytest.raises(WorkloadError, match="absent.jsonl: no such file"):
        load_mooncake_jsonl(tmp_path / "absent.jsonl")


@pytest.mark.parametrize("name", ["folder.csv", "folder.jsonl"])
def test_a_directory_is_not_a_trace(tmp_path: Path, name: str) -> None:
    (tmp_path / name).mkdir()
    load = load_mooncake_jsonl if name.endswith(".jsonl") else load_azure_csv
    with pytest.raises(WorkloadError, match=f"trace path .*{name}: is a directory, not a trace file"):
        load(tmp_path / name)


def test_a_length_at_the_limit_loads(write_file: WriteFile) -> None:
    workload = load_azure_csv(write_file("big.csv", HEADER + "2023-11-16 18:15:47.1,2147483647,+0007\n"))
    assert int(workload.prompt_tokens[0]) == 2**31 - 1 and int(workload.output_tokens[0]) == 7


# ---- Mooncake JSONL --------------------------------------------------------------------------------------
def _jsonl(*records: object) -> str:
    return "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records)


def test_mooncake_loads_ms_timestamps_and_sorts(write_file: WriteFile) -> None:
    text = _jsonl(
        {"timestamp": 2500, "input_length": 10, "output_length": 3, "hash_ids": [1, 2]},
        "",
        {"timestamp": 1000, "input_length": 20, "output_length": 0},
    )
    workload, report = read_mooncake_jsonl(write_file("mc.jsonl", text))
    assert list(workload.arrival_time_s) == [0.0, 1.5]
    assert list(workload.prompt_tokens) == [20, 10] and list(workload.output_tokens) == [1, 3]
    assert report.num_zero_output_clamped == 1 and report.num_out_of_order == 1
    assert workload.tiers[0].name == "default" and len(workload.tiers) == 1


def test_mooncake_tiers_and_priorities(write_file: WriteFile) -> None:
    text = _jsonl(
        {"timestamp": 0, "input_length": 1, "output_length": 1, "tier": "PREMIUM"},
        {"timestamp": 1, "input_length": 1, "output_length": 1, "tier": "STANDARD", "priority": 7},
        {"timestamp": 2, "input_length": 1, "output_length": 1, "priority": 4},
    )
    workload = load_mooncake_jsonl(write_file("tiers.jsonl", text))
    assert workload.tier == ("PREMIUM", "STANDARD", "default")
    assert list(workload.priority) == [1, 7, 4]
    assert workload.tiers[: len(DEFAULT_TIERS)] == DEFAULT_TIERS
    assert workload.to_requests()[0].ttft_slo_s == 0.2


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ('{"timestamp": 1, "input_length": 5,', "line 2: not valid JSON"),
        ("[1, 2]", "line 2: expected a JSON object"),
        ('{"timestamp": 1, "output_length": 5}', "line 2: missing field 'input_length'"),
        (
            '{"timestamp": 1, "input_length": -5, "output_length": 5}',
            "line 2: input_length must be an integer >= 0",
        ),
        (
            '{"timestamp": 1, "input_length": 5, "output_length": 2.5}',
            "line 2: output_length must be an integer",
        ),
        (
            '{"timestamp": "soon", "input_length": 5, "output_length": 5}',
            "line 2: timestamp must be a finite number",
        ),
        (
            '{"timestamp": 1, "input_length": 5, "output_length": 5, "tier": "GOLD"}',
            "line 2: tier must be one of",
        ),
        (
            '{"timestamp": 1, "input_length": 5, "output_length": 5, "priority": "high"}',
            "line 2: priority must be",
        ),
        (
            '{"timestamp": 1, "input_length": 99999999999999999999, "output_length": 5}',
            "line 2: input_length must be at most 2147483647 tokens, got 99999999999999999999",
        ),
        (
            '{"timestamp": 1, "input_length": 5, "output_length": ' + "9" * 5000 + "}",
            "line 2: not readable JSON",
        ),
        (
            '{"timestamp": 1' + "0" * 400 + ', "input_length": 5, "output_length": 5}',
            "line 2: timestamp must be a finite number, got 10000000000000000000...00000000 (401 characters)",
        ),
        ('{"timestamp": NaN, "input_length": 5, "output_length": 5}', "line 2: timestamp must be a finite number"),
        (
            '{"timestamp": 1, "input_length": 5, "output_length": 5, "priority": 99999999999999999999}',
            "line 2: priority must be an integer from -2147483648 to 2147483647, got 99999999999999999999",
        ),
    ],
)
def test_mooncake_bad_lines_name_file_line_and_field(write_file: WriteFile, line: str, expected: str) -> None:
    good = '{"timestamp": 0, "input_length": 5, "output_length": 5}\n'
    with pytest.raises(TraceFormatError) as info:
        load_mooncake_jsonl(write_file("bad.jsonl", good + line + "\n"))
    assert str(info.value).startswith("bad.jsonl")
    assert expected in str(info.value)


# ---- rescale and data directory --------------------------------------------------------------------------
@pytest.mark.parametrize("target_rate_per_s", [0.1, 3.0, 250.0])
def test_rescale_hits_target_rate(target_rate_per_s: float) -> None:
    times_s = np.cumsum(np.random.default_rng(0).exponential(0.7, 500)) + 2.0
    workload = make_workload(times_s)
    rescaled = rescale_to_rate(workload, target_rate_per_s)
    assert rescaled.mean_rate() == pytest.approx(target_rate_per_s)
    assert rescaled.arrival_time_s[0] == workload.arrival_time_s[0]
    assert np.array_equal(rescaled.output_tokens, workload.output_tokens)
    with pytest.raises(WorkloadError, match="target_rate_per_s"):
        rescale_to_rate(workload, 0.0)


def test_rescale_beyond_a_float_is_named() -> None:
    with pytest.raises(WorkloadError, match="target_rate_per_s: 1e-310 stretches 'test' beyond a float's range"):
        rescale_to_rate(make_workload((0.0, 1.0, 2.0)), 1e-310)


def test_find_data_file_honours_env_and_reports_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "x.csv").write_text(HEADER, encoding="utf-8")
    monkeypatch.setenv("SEMSCHED_DATA_DIR", str(tmp_path))
    assert find_data_file("x.csv") == tmp_path / "x.csv"
    with pytest.raises(DataNotFoundError, match="'y.csv' not found"):
        find_data_file("y.csv")
    monkeypatch.setenv("SEMSCHED_DATA_DIR", str(tmp_path / "nowhere"))
    with pytest.raises(DataNotFoundError, match="SEMSCHED_DATA_DIR"):
        find_data_file("x.csv")


@pytest.mark.data
def test_default_data_dir_is_beside_project(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SEMSCHED_DATA_DIR", raising=False)
    path = find_data_file("azure_llm_2023_code.csv")
    assert path.parent.name == "data" and path.parent.parent.name == "shared"


def test_client_columns_are_read_when_present(write_file: WriteFile) -> None:
    csv_path = write_file("clients.csv", "TIMESTAMP,ContextTokens,GeneratedTokens,client\n"
                                        "2023-11-16 18:15:47.0,10,2,bob\n2023-11-16 18:15:46.0,20,3,alice\n")
    assert load_azure_csv(csv_path).client == ("alice", "bob")  # sorted by time with the other columns
    assert load_azure_csv(write_file("plain.csv", HEADER + GOOD_ROW)).client is None
    rows = [{"timestamp": 0, "input_length": 5, "output_length": 1, "client": "t1"},
            {"timestamp": 5, "input_length": 5, "output_length": 1, "client": "t2"}]
    jsonl = write_file("clients.jsonl", "\n".join(json.dumps(r) for r in rows))
    assert load_mooncake_jsonl(jsonl).client == ("t1", "t2")


def test_bad_client_cells_name_the_line(write_file: WriteFile) -> None:
    empty = write_file("empty_client.csv", "TIMESTAMP,ContextTokens,GeneratedTokens,client\n"
                                           "2023-11-16 18:15:47.0,10,2, \n")
    with pytest.raises(TraceFormatError, match="line 2.*client must be a non-empty string"):
        load_azure_csv(empty)
    rows = [{"timestamp": 0, "input_length": 5, "output_length": 1, "client": "t1"},
            {"timestamp": 5, "input_length": 5, "output_length": 1}]
    partial = write_file("partial.jsonl", "\n".join(json.dumps(r) for r in rows))
    with pytest.raises(TraceFormatError, match="client given on some rows but not on row 2"):
        load_mooncake_jsonl(partial)
    with pytest.raises(TraceFormatError, match="client must be"):
        load_mooncake_jsonl(write_file("num.jsonl", json.dumps({**rows[1], "client": 3})))
