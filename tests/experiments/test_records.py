"""The committed records in docs/reproductions stay readable (issue 30): each seed's record opens with its claim
table, holds at most 20,000 characters and no table cell with more than three numbers, and every image it shows
is committed (no stale or missing PNG)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from semsched.experiments import EXPERIMENTS
from semsched.experiments.report import record_problems

DOCS = Path(__file__).resolve().parents[2] / "docs" / "reproductions"
RECORDS = sorted(DOCS.glob("*.md"))


def test_every_experiment_has_a_record() -> None:
    assert {path.stem for path in RECORDS} == set(EXPERIMENTS.names())


@pytest.mark.parametrize("path", RECORDS, ids=lambda path: path.stem)
def test_record_is_readable(path: Path) -> None:
    text = path.read_text()
    assert record_problems(text) == []
    if EXPERIMENTS.get(path.stem).source:  # a paper's reproduction opens with its claims
        assert text.index("\n## Claims\n") < text.index("\n## Figures\n")


def test_images_are_exactly_the_ones_shown() -> None:
    shown = {name for path in RECORDS for name in re.findall(r"\]\(img/([\w.-]+\.png)\)", path.read_text())}
    committed = {png.name for png in (DOCS / "img").glob("*.png")}
    assert shown == committed, f"missing: {sorted(shown - committed)}; stale: {sorted(committed - shown)}"
