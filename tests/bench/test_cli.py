"""``semsched bench`` on the command line: a run's JSON and files, and bad input as one ``error:`` line."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
from fastapi import FastAPI

from semsched.cli import main

WORKLOAD = "azure-conv:max_output_tokens=8;max_prompt_tokens=20"


def run_args(url: str, *extra: str) -> list[str]:
    return ["bench", "--url", url, "--workload", WORKLOAD, "--rate", "40", "--duration", "0.25", *extra]


def closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def test_json_and_out_report_the_same_run(
    app: FastAPI, url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(run_args(url, "--json", "--out", str(tmp_path / "out"), "--header", "X-Run: test 1"))
    assert code == 0
    printed = json.loads(capsys.readouterr().out)
    written = json.loads((tmp_path / "out" / "bench.json").read_text())
    assert printed == written
    overall = printed["results"]["bench"]["overall"]
    assert overall["num_requests"] == len(app.state.calls) == printed["meta"]["num_requests"] > 0
    assert (tmp_path / "out" / "requests.csv").exists()
    assert all(call["_headers"]["x-run"] == "test 1" for call in app.state.calls)


def test_the_table_shows_every_class(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(run_args(url, "--max-requests", "5")) == 0
    out = capsys.readouterr().out
    assert "all" in out and "TTFT" in out and "goodput" in out


def test_max_requests_caps_what_is_sent(app: FastAPI, url: str) -> None:
    assert main(run_args(url, "--max-requests", "3", "--json")) == 0
    assert len(app.state.calls) == 3


@pytest.mark.parametrize(
    ("extra", "option"),
    [
        (["--rate", "0"], "--rate"),
        (["--duration", "-1"], "--duration"),
        (["--timeout-s", "0"], "--timeout-s"),
        (["--max-requests", "0"], "--max-requests"),
        (["--header", "no-colon"], "--header"),
        (["--header", "bad name: x"], "--header"),
        (["--workload", "nonsense-workload"], "--workload"),
    ],
)
def test_bad_options_are_one_error_line_naming_the_option(
    url: str, extra: list[str], option: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(run_args(url, *extra)) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and option in err and "Traceback" not in err


@pytest.mark.parametrize("bad_url", ["ftp://127.0.0.1:1", "localhost:8000", "http://:80", "http://h:99999"])
def test_a_bad_url_is_refused(bad_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(run_args(bad_url)) == 2
    assert "--url" in capsys.readouterr().err


def test_an_unreachable_server_is_refused_before_any_request(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(run_args(closed_port_url())) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and "--url" in err and "cannot reach" in err
