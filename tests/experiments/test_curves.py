"""Load curves, collapses, verdicts and the readable-record checks (semsched/experiments/curves.py, report.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from semsched.experiments.curves import Band, Claim, LoadCurve, ratio_verdict
from semsched.experiments.registry import ExperimentError
from semsched.experiments.report import MAX_RECORD_CHARS, numbers_in, record, record_problems

LOADS = (0.5, 0.7, 0.9, 1.1, 1.3, 1.5)
SEEDS = (0, 1, 2)


def _curve(**changes: object) -> LoadCurve:
    """Latency (lower is better): ours wins past 1.0x, the baselines below; seed 2 of "b" collapses at 1.5x."""
    values = {
        "ours": {load: [10.0 * load, 10.0 * load + 1, 10.0 * load - 1] for load in LOADS},
        "a": {load: [8.0 * load ** 2 + 1] * 3 for load in LOADS},
        "b": {load: [9.0 * load ** 2 + 2] * 3 for load in LOADS},
    }
    values["b"][1.5] = [22.0, 22.0, 90.0]
    arguments: dict[str, object] = {"metric": "mean latency (s)", "loads": LOADS, "seeds": SEEDS, "values": values,
                                    "ours": "ours", "baselines": ("a", "b"), "higher_is_better": False}
    arguments.update(changes)
    return LoadCurve(**arguments)  # type: ignore[arg-type]


def test_band_is_median_and_min_max_and_counts_missing() -> None:
    band = Band.of([3.0, None, 1.0, 2.0])
    assert (band.median, band.low, band.high, band.missing) == (2.0, 1.0, 3.0, 1)
    assert band.cell() == "2 [1-3] (1 n/a)"
    assert Band.of([None, None]).cell() == "n/a"


def test_gain_is_against_the_best_baseline_per_load_in_our_favour() -> None:
    curve = _curve()
    # at 0.5x: a = 3, b = 4.25, ours 5 (4-6): the best baseline is a, ratio a/ours = 3/5 per seed median
    assert curve.best_baseline(0.5) == "a"
    assert curve.gain(0.5).median == pytest.approx(3 / 5)
    # at 1.5x: a = 19, ours 15: a / ours
    assert curve.gain(1.5).median == pytest.approx(19 / 15)
    assert curve.largest_gain_load() == 1.5
    assert curve.as_good_loads() == [1.3, 1.5]


def test_higher_is_better_flips_the_ratio() -> None:
    values = {"ours": {load: [2.0] * 3 for load in LOADS}, "a": {load: [1.0] * 3 for load in LOADS}}
    curve = LoadCurve("attainment", LOADS, SEEDS, values, "ours", ("a",), higher_is_better=True)
    assert curve.gain(0.9).median == 2.0 and curve.direction() == "ours / best baseline"
    assert curve.as_good_loads() == list(LOADS)


def test_a_collapse_is_found_and_shown_not_averaged() -> None:
    curve = _curve()
    collapses = curve.collapses()
    assert [(c.policy, c.load, c.seed) for c in collapses] == [("b", 1.5, 2)]
    assert "1 collapse(s) shown" in curve.headline()
    figure = curve.figure("fig", title="t", paper_says="p", paper={}, config={}, command="c")
    assert any("Collapse: b at 1.5x, seed 2: 90" in note for note in figure.notes)
    assert figure.ours["per_seed"]["b"]["1.5"] == [22.0, 22.0, 90.0]
    assert figure.ours["median"]["b"]["1.5"] == 22.0


def test_a_missing_value_is_a_collapse() -> None:
    curve = _curve()
    curve.values["ours"][0.7][1] = None  # type: ignore[index]
    curve._bands.clear()
    assert ("ours", 0.7, 1) in {(c.policy, c.load, c.seed) for c in curve.collapses()}


def test_headline_names_largest_gain_and_the_loads_where_ours_holds() -> None:
    headline = _curve().headline()
    assert "largest gain 1.27 [1.19-1.36] at 1.5x" in headline
    assert "at least as good at 1.3-1.5x" in headline


def test_table_cells_hold_at_most_three_numbers() -> None:
    table = _curve().table()
    assert all(numbers_in(cell) <= 3 for row in table.rows for cell in row)
    assert table.columns[0] == "load" and table.columns[1] == "ours"


def test_a_headline_curve_needs_six_loads_and_three_seeds() -> None:
    with pytest.raises(ExperimentError, match="at least 6 loads and 3 seeds"):
        _curve(loads=LOADS[:3])
    short = {p: {load: [1.0] for load in LOADS[:2]} for p in ("ours", "a")}
    quick = _curve(loads=LOADS[:2], seeds=(0,), values=short, baselines=("a",), strict=False)
    assert quick.gain(0.5).median == 1.0
    with pytest.raises(ExperimentError, match="has 2 values for 3 seeds"):
        _curve(values={**_curve().values, "a": {load: [1.0, 2.0] for load in LOADS}})


@pytest.mark.parametrize(("paper", "band", "verdict"), [
    (1.7, Band(1.6, 1.2, 2.0), "reproduced"),
    (1.7, Band(2.05, 2.0, 2.1), "reproduced"),  # within 25 % of the median
    (6.0, Band(2.0, 1.8, 2.2), "partly"),
    (1.7, Band(0.9, 0.8, 1.0), "not"),
    (1.7, Band(None, None, None), "not"),
])
def test_ratio_verdict(paper: float, band: Band, verdict: str) -> None:
    assert ratio_verdict(paper, band)[0] == verdict


def test_claim_from_curve_reads_the_largest_gain() -> None:
    claim = _curve().claim("ours cuts latency", paper=1.3, figure="fig")
    assert claim.verdict == "reproduced" and claim.ours == "1.27 [1.19-1.36]"
    assert claim.where == "at 1.5x; as good as the best at 1.3-1.5x"
    with pytest.raises(ExperimentError, match="verdict"):
        Claim("c", "1", "1", "maybe", "why")


def test_numbers_in_a_cell() -> None:
    assert numbers_in("1.27 [1.19-1.36]") == 3
    assert numbers_in("at 1.5x; as good as the best at 0.5-0.9x") == 3
    assert numbers_in("fcfs / semantic 8.7, sjf 6.1, hpjf 1.7 at 100") == 4
    assert numbers_in("[fig2c](#fig2c) tokens") == 0
    assert numbers_in("a100-qwen1.5-7b") == 0  # a name's digits are not numbers


def _report(tmp_path: Path, body: str) -> Path:
    directory = tmp_path / "report"
    directory.mkdir()
    (directory / "report.md").write_text(body)
    return directory


def test_record_refuses_an_unreadable_report(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    own = _report(tmp_path / "own", "# demo\n") if (tmp_path / "own").mkdir() is None else tmp_path
    (own / "results.json").write_text('{"meta": {"source": ""}, "claims": [], "figures": []}')
    assert record(own, docs, "demo") == docs / "demo.md"  # semsched's own experiment: no paper, no claims
    with pytest.raises(ExperimentError, match="no claim table"):
        record(_report(tmp_path, "# r\n\n## Paper vs ours\n"), docs, "x")
    crowded = "# r\n\n## Claims\n\n| claim | ours |\n|---|---|\n| c | 1, 2, 3, 4 |\n"
    assert record_problems(crowded) == ["line 7: a cell holds 4 numbers: '1, 2, 3, 4'"]
    with pytest.raises(ExperimentError, match="a cell holds 4 numbers"):
        record(_report(tmp_path / "b", crowded) if (tmp_path / "b").mkdir() is None else tmp_path, docs, "x")
    long = "# r\n\n## Claims\n\n" + "x" * MAX_RECORD_CHARS
    assert "characters" in record_problems(long)[0]
    assert not (docs / "x.md").exists()  # nothing written
    good = "# r\n\n## Claims\n\n| claim | ours |\n|---|---|\n| c | 1.2 [1-3] |\n"
    assert record(_report(tmp_path / "c", good) if (tmp_path / "c").mkdir() is None else tmp_path, docs, "x") \
        == docs / "x.md"


def test_the_figure_draws_bands_and_collapses(tmp_path: Path) -> None:
    figure = _curve().figure("fig", title="t", paper_says="p", paper={}, config={}, command="c")
    figure.plot(tmp_path / "fig.png")
    assert (tmp_path / "fig.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_record_limit_counts_the_image_paths_as_written(tmp_path: Path) -> None:
    head = "# r\n\n## Claims\n\n![fig](fig.png)\n"
    body = head + "x" * (MAX_RECORD_CHARS - len(head) - 1) + "\n"
    assert len(body) == MAX_RECORD_CHARS and not record_problems(body)
    report = _report(tmp_path, body)
    (report / "fig.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    with pytest.raises(ExperimentError, match="characters"):  # img/x_fig.png is longer than fig.png
        record(report, tmp_path / "docs", "x")
