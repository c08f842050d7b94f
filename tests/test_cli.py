import json
from pathlib import Path

import pytest

from semsched.cli import main


def test_simulate_writes_reports(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "simulate",
            "--policy",
            "fcfs,edf:deadline=e2e;preempt=true",
            "--rate",
            "3",
            "--duration",
            "20",
            "--out",
            str(tmp_path),
        ]
    )
    assert code == 0
    report = json.loads((tmp_path / "summary.json").read_text())
    assert set(report["results"]) == {"fcfs", "edf:deadline=e2e,preempt=true"}
    rows = (tmp_path / "requests.csv").read_text().strip().splitlines()
    assert len(rows) == 1 + 2 * report["meta"]["num_requests"]
    assert (tmp_path / "comparison.png").stat().st_size > 0
    assert "fcfs" in capsys.readouterr().out


def test_sweep_writes_plot(tmp_path: Path) -> None:
    code = main(["sweep", "--policy", "fcfs,sjf", "--rates", "2,3", "--duration", "15", "--out", str(tmp_path)])
    assert code == 0
    assert (tmp_path / "sweep_e2e_mean.png").stat().st_size > 0
    assert [p["rate"] for p in json.loads((tmp_path / "sweep.json").read_text())["results"]["sjf"]] == [2.0, 3.0]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["simulate", "--policy", "nope"], "unknown policy 'nope'"),
        (["simulate", "--policy", "sjf:length=psychic"], "length"),
        (["simulate", "--policy", "edf:bogus=1"], "unknown parameter 'bogus'"),
        (["simulate", "--rate", "-1"], "--rate"),
        (["simulate", "--workload", "no-such-workload"], "no-such-workload"),
        (["simulate", "--profile", "no-such-profile"], "no-such-profile"),
        (["simulate", "--max-seqs", "0"], "max_num_seqs"),
    ],
)
def test_bad_input_is_one_clear_line(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*argv, "--duration", "5"]) == 2
    err = capsys.readouterr().err
    assert "error:" in err and message in err and "Traceback" not in err


def test_malformed_trace_row_names_row_and_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "trace.csv"
    trace.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,12,4\n2023-11-16 18:15:47.1,x,5\n"
    )
    assert main(["simulate", "--workload", str(trace), "--duration", "5"]) == 2
    err = capsys.readouterr().err
    assert "ContextTokens" in err and "row 2" in err


def test_listing_commands(capsys: pytest.CaptureFixture[str]) -> None:
    for command in ("policies", "profiles", "workloads"):
        assert main([command]) == 0
    out = capsys.readouterr().out
    assert "priority-preempt" in out and "a100-qwen1.5-7b" in out and "azure-conv" in out
