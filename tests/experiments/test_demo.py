"""The demo experiment's figures (semsched/experiments/demo.py): one unit per table, plots that say what the
report says, and a quick grid that does not pretend to rank the policies."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from semsched.experiments import demo
from semsched.metrics import summarize
from semsched.metrics.plots import NO_SLO
from semsched.metrics.summary import Summary
from tests.metrics.factories import build_request

CONFIG = {"num_requests": 4, "duration_s": 300.0}


def _summary(slow_s: float, met_premium: bool) -> Summary:
    """SYSTEM without targets, PREMIUM with a TTFT target met or missed, and one slow request."""
    return summarize([
        build_request([0.1, 0.2], request_id="s", priority=0, tier="SYSTEM"),
        build_request([0.1 if met_premium else 2.0, 2.1], request_id="p", priority=1, tier="PREMIUM",
                      ttft_slo_s=0.5),
        build_request([0.3, slow_s], request_id="b", priority=3, tier="BACKGROUND", e2e_slo_s=60.0),
    ])


@pytest.fixture
def summaries() -> dict[str, Summary]:
    return {demo.BASELINE: _summary(30.0, met_premium=False), "sjf": _summary(31.0, met_premium=True)}


def test_the_quick_grid_names_no_winner(summaries: dict[str, Summary]) -> None:
    for make in (demo._overall_figure, demo._tier_figure):
        full = make(summaries, CONFIG, "cmd", quick=False)
        quick = make(summaries, CONFIG, "cmd", quick=True)
        assert "under sjf" in full.headline and "too small to rank" not in full.headline
        assert "too small to rank" in quick.headline and "under sjf" not in quick.headline
        assert any("too small to rank" in note for note in quick.notes)


def test_the_comparison_table_has_one_unit_for_its_latencies(summaries: dict[str, Summary]) -> None:
    # TTFT p90 well under 10 s, E2E p90 above it: one unit for all three columns
    table = demo._overall_figure(summaries, CONFIG, "cmd", quick=False).table
    assert table is not None
    units = {c.rsplit("(", 1)[1] for c in table.columns if c.startswith(("TTFT", "E2E"))}
    assert units == {"s)"}


def test_the_plots_say_what_the_report_says(summaries: dict[str, Summary], monkeypatch: pytest.MonkeyPatch,
                                            tmp_path: Path) -> None:
    drawn: list[dict[str, Any]] = []

    def capture(path: Path, groups: list[str], series: dict[str, list[float | None]], **options: Any) -> None:
        drawn.append({"groups": groups, "series": series, **options})

    monkeypatch.setattr(demo, "bar_chart", capture)
    overall = demo._overall_figure(summaries, CONFIG, "cmd", quick=False)
    tiers = demo._tier_figure(summaries, CONFIG, "cmd", quick=False)
    for figure in (overall, tiers):
        assert figure.plot is not None
        figure.plot(tmp_path / "x.png")
    comparison, per_tier = drawn
    assert "all requests" in overall.title and "all requests" in comparison["title"]  # not "by tier" alone
    assert comparison["groups"][0] == "all requests"
    assert per_tier["missing"] == NO_SLO and per_tier["zero"] == "0 %"
    assert per_tier["series"][demo.BASELINE][per_tier["groups"].index("PREMIUM")] == 0.0  # drawn as "0 %"
