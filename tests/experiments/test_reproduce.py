"""``semsched reproduce``: every registered experiment with ``--quick`` writes the report of
../shared/EXPERIMENTS.md, and its numbers come from the run (recomputed here from requests.csv)."""

from __future__ import annotations

import csv
import json
from collections import Counter
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

from semsched.cli import main
from semsched.experiments import EXPERIMENTS, Experiment, ExperimentContext
from semsched.experiments.report import record
from tests.experiments.conftest import QUICK_OPTIONS, QuickReports

REQUIRED_KEYS = {"id", "title", "paper", "ours", "config"}


@pytest.fixture(scope="module", params=EXPERIMENTS.names())
def quick_report(request: pytest.FixtureRequest, quick_reports: QuickReports) -> tuple[str, Path]:
    """The experiment's ``--quick`` report of the session (tests/experiments/conftest.py: made once, with the
    options its own module checks)."""
    name: str = request.param
    return name, quick_reports.path(name)


def _requests(out: Path) -> list[dict[str, str]]:
    with (out / "requests.csv").open(newline="") as handle:
        return list(csv.DictReader(handle))


def test_report_has_every_file_and_section(quick_report: tuple[str, Path]) -> None:
    name, out = quick_report
    document = json.loads((out / "results.json").read_text())
    figures = document["figures"]
    assert figures and document["meta"]["experiment"] == name and document["meta"]["quick"] is True
    report = (out / "report.md").read_text()
    if document["claims"]:  # a record's claim table: one row per claim, before any figure
        assert report.index("## Claims") < report.index(f"{figures[0]['id']}: {figures[0]['title']}")
        for claim in document["claims"]:
            assert claim["verdict"] in {"reproduced", "partly", "not"} and claim["claim"] in report
    else:
        assert "## Paper vs ours" in report
    for figure in figures:
        assert set(figure) >= REQUIRED_KEYS
        assert f"{figure['id']}: {figure['title']}" in report
        assert f"![{figure['id']}]({figure['id']}.png)" in report
        png = out / f"{figure['id']}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_requests_csv_holds_every_request_of_every_figure(quick_report: tuple[str, Path]) -> None:
    _, out = quick_report
    rows = _requests(out)
    figures = {figure["id"] for figure in json.loads((out / "results.json").read_text())["figures"]}
    assert rows and {row["figure"] for row in rows} <= figures
    # a figure's point is named by the run columns between ``figure`` and ``policy`` (rate, seed, ...): every
    # policy of one point runs on the same requests (a sweep's points may hold different numbers of requests)
    header = list(rows[0])
    run_columns = header[1:header.index("policy")]
    per_point: dict[tuple[str, ...], Counter[str]] = {}
    for row in rows:
        point = (row["figure"], *(row[column] for column in run_columns))
        per_point.setdefault(point, Counter())[row["policy"]] += 1
    for point, per_policy in per_point.items():
        assert len(set(per_policy.values())) == 1, f"{point}: every policy runs on the same requests"


def test_demo_numbers_are_the_runs_own(quick_reports: QuickReports) -> None:
    assert QUICK_OPTIONS["demo"] == ["--seed", "3"]
    out = quick_reports.path("demo")
    ours = next(f for f in json.loads((out / "results.json").read_text())["figures"] if f["id"] == "comparison")
    rows = [row for row in _requests(out) if row["figure"] == "comparison"]
    for policy, numbers in ours["ours"].items():
        mine = [row for row in rows if row["policy"] == policy]
        finished = [float(row["e2e_s"]) for row in mine if row["state"] == "finished"]
        assert numbers["num_requests"] == len(mine)
        assert numbers["num_finished"] == len(finished)
        assert numbers["e2e_p90_s"] == pytest.approx(float(np.percentile(finished, 90)), rel=1e-9)
    assert ours["config"]["seed"] == 3


def test_same_seed_same_numbers(quick_reports: QuickReports, tmp_path: Path) -> None:
    """A second run in the same process, later in the session, with the seed of the session's demo report."""
    first, second = quick_reports.path("demo"), tmp_path / "again"
    assert main(["reproduce", "demo", "--quick", "--out", str(second), *quick_reports.options("demo")]) == 0
    figures = [json.loads((out / "results.json").read_text())["figures"] for out in (first, second)]
    assert [f["ours"] for f in figures[0]] == [f["ours"] for f in figures[1]]


def test_list_and_unknown_name(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["reproduce", "--list"]) == 0
    assert "demo" in capsys.readouterr().out
    assert main(["reproduce", "no-such-experiment"]) == 2
    err = capsys.readouterr().err
    assert "unknown experiment 'no-such-experiment'" in err and "demo" in err


class _Broken(Experiment):
    name: ClassVar[str] = "broken-for-test"
    summary: ClassVar[str] = "fails after one run"

    def run(self, ctx: ExperimentContext) -> None:
        raise RuntimeError("the experiment failed half-way")


def test_a_failed_run_leaves_no_half_report(tmp_path: Path) -> None:
    EXPERIMENTS.register(_Broken)
    try:
        out = tmp_path / "broken"
        with pytest.raises(RuntimeError):
            main(["reproduce", "broken-for-test", "--out", str(out)])
        assert not out.exists() and list(tmp_path.iterdir()) == []
    finally:
        EXPERIMENTS.unregister("broken-for-test")


@pytest.mark.parametrize("make", ["file", "foreign"])
def test_out_that_is_not_a_report_directory_is_refused(
    make: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    if make == "file":
        out.write_text("x")
    else:
        out.mkdir()
        (out / "thesis.tex").write_text("precious")
    assert main(["reproduce", "demo", "--quick", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "--out" in err and "Traceback" not in err
    assert (out.read_text() if make == "file" else (out / "thesis.tex").read_text()) in ("x", "precious")


def test_record_copies_the_report_with_its_images(quick_reports: QuickReports, tmp_path: Path) -> None:
    out, docs = quick_reports.path("demo"), tmp_path / "docs"
    target = record(out, docs, "demo")
    text = target.read_text()
    links: list[Any] = [line for line in text.splitlines() if line.startswith("![")]
    assert links and all("](img/demo_" in line for line in links)
    for line in links:
        assert (docs / line.split("](")[1].rstrip(")")).is_file()
