"""Tests for semsched/workloads/ktas_ed.py: the emergency-department workload on KTAS triage data.

Every build counts tokens with the shared Llama-2 tokenizer, so those tests are marked ``data``."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import semsched.predict.urgency as urgency_model
from semsched.cli import main
from semsched.predict.ktas import REQUIRED_COLUMNS, TriageRecords, load_ktas
from semsched.workloads import DataNotFoundError, KtasEdConfig, WorkloadError, build_workload, parse_workload_spec
from semsched.workloads.ktas_ed import TOKENIZER_FILE, _predicted_levels, token_counts
from semsched.workloads.traces import DATA_DIR_ENV, data_dir

WriteFile = Callable[[str, str], Path]


@pytest.fixture(autouse=True)
def fresh_predictions() -> Iterator[None]:
    """Predictions are cached per process: each test computes its own (a test may replace the classifier)."""
    _predicted_levels.cache_clear()
    yield
    _predicted_levels.cache_clear()


def _ktas_file(write_file: WriteFile, rows: list[tuple[str, int, int]]) -> Path:
    """A triage file with one row per (chief complaint, expert level, nurse level), other inputs blank."""
    lines = [";".join(REQUIRED_COLUMNS)]
    for complaint, expert, nurse in rows:
        values = {column: "" for column in REQUIRED_COLUMNS}
        values.update(Chief_complain=complaint, Age="40", KTAS_expert=str(expert), KTAS_RN=str(nurse))
        lines.append(";".join(values[column] for column in REQUIRED_COLUMNS))
    return write_file("triage.csv", "\n".join(lines) + "\n")


THREE_PATIENTS = [("chest pain", 2, 3), ("cough", 5, 4), ("unconscious after fall from a ladder", 1, 1)]
EXPERT = {complaint: expert - 1 for complaint, expert, _ in THREE_PATIENTS}  # urgency levels, 0 = most urgent
NURSE = {complaint: nurse - 1 for complaint, _, nurse in THREE_PATIENTS}


def _complaints(texts: tuple[str, ...] | None) -> list[str]:
    """The chief complaint each triage text starts with."""
    assert texts is not None
    return [text.split(".")[0].removeprefix("Chief complaint: ") for text in texts]


def _by_text(records: TriageRecords) -> dict[str, set[tuple[int, int]]]:
    """Each triage text's (expert, nurse) levels: texts may repeat across rows."""
    found: dict[str, set[tuple[int, int]]] = {}
    for text, expert, nurse in zip(records.texts, records.expert, records.nurse, strict=True):
        found.setdefault(text, set()).add((int(expert), int(nurse)))
    return found


@pytest.mark.data
def test_builds_from_the_shared_file_with_expert_urgency() -> None:
    workload = build_workload("ktas-ed", rate_per_s=1.0, duration_s=20.0, seed=0)
    records = load_ktas(data_dir() / "ktas_triage.csv")
    assert workload.name == "ktas-ed" and 0 < len(workload) <= len(records)
    assert workload.urgency is not None and workload.urgency_true is None and workload.prompt_text is not None
    labels = _by_text(records)
    for text, level in zip(workload.prompt_text, workload.urgency, strict=True):
        assert text and any(expert - 1 == level for expert, _ in labels[text])  # urgency = KTAS - 1
    counts = Counter(records.texts)
    assert all(n <= counts[text] for text, n in Counter(workload.prompt_text).items())  # no row twice
    instants, per_spike = np.unique(workload.arrival_time_s, return_counts=True)
    assert np.allclose(np.diff(instants), 0.1) and per_spike.max() <= 5
    assert workload.output_tokens.min() >= 5 and workload.output_tokens.max() <= 50


@pytest.mark.data
def test_prompt_tokens_are_the_llama2_count_of_the_text() -> None:
    from tokenizers import Tokenizer

    workload = build_workload("ktas-ed", rate_per_s=1.0, seed=1, num_requests=20)
    tokenizer = Tokenizer.from_file(str(data_dir() / TOKENIZER_FILE))
    assert workload.prompt_text is not None
    expected = [len(tokenizer.encode(text).ids) for text in workload.prompt_text]
    assert list(workload.prompt_tokens) == expected
    assert all(n > 10 for n in expected)
    request = workload.to_requests()[0]
    assert request.prompt_text == workload.prompt_text[0] and request.prompt_tokens == expected[0]


@pytest.mark.data
def test_token_counts_include_the_begin_of_sequence_token() -> None:
    assert list(token_counts(("", "hello"))) == [1, 2]


@pytest.mark.data
def test_more_requests_than_rows_are_drawn_with_replacement(write_file: WriteFile) -> None:
    path = _ktas_file(write_file, THREE_PATIENTS)
    workload = build_workload(f"ktas-ed:data={path}", rate_per_s=1.0, seed=2, num_requests=60)
    assert len(workload) == 60 and workload.urgency is not None
    complaints = _complaints(workload.prompt_text)
    assert set(complaints) == set(EXPERT)
    assert list(workload.urgency) == [EXPERT[c] for c in complaints]
    few = build_workload(f"ktas-ed:data={path}", rate_per_s=1.0, seed=2, num_requests=3)
    assert sorted(_complaints(few.prompt_text)) == sorted(EXPERT)  # without replacement


@pytest.mark.data
def test_outputs_drawn_in_the_range_and_capped(write_file: WriteFile) -> None:
    path = _ktas_file(write_file, THREE_PATIENTS)
    n = 5_000
    drawn = build_workload(f"ktas-ed:data={path};output_tokens=5/8", rate_per_s=1.0, seed=3, num_requests=n)
    assert set(drawn.output_tokens) == {5, 6, 7, 8}
    capped = build_workload(f"ktas-ed:data={path};max_output_tokens=20", rate_per_s=1.0, seed=3, num_requests=n)
    default = build_workload(f"ktas-ed:data={path}", rate_per_s=1.0, seed=3, num_requests=n)
    assert (default.output_tokens.min(), default.output_tokens.max()) == (5, 50)
    assert np.array_equal(capped.output_tokens, np.minimum(default.output_tokens, 20))


@pytest.mark.data
def test_nurse_urgency_keeps_the_expert_level_as_truth(write_file: WriteFile) -> None:
    path = _ktas_file(write_file, THREE_PATIENTS)
    workload = build_workload(f"ktas-ed:data={path};urgency=nurse", rate_per_s=1.0, seed=4, num_requests=30)
    assert workload.urgency is not None and workload.urgency_true is not None
    complaints = _complaints(workload.prompt_text)
    assert list(workload.urgency_true) == [EXPERT[c] for c in complaints]
    assert list(workload.urgency) == [NURSE[c] for c in complaints]


@pytest.mark.data
def test_predicted_urgency_comes_from_out_of_fold_levels(
    write_file: WriteFile, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _ktas_file(write_file, THREE_PATIENTS)
    calls: list[dict[str, Any]] = []

    def cross_val_levels(records: TriageRecords, **settings: Any) -> np.ndarray:
        calls.append({"rows": len(records), **settings})
        return np.array([3, 3, 2])  # one predicted KTAS level per row, in file order

    monkeypatch.setattr(urgency_model, "cross_val_levels", cross_val_levels, raising=False)
    spec = f"ktas-ed:data={path};urgency=predicted;threshold=0.3;folds=3"
    workload = build_workload(spec, rate_per_s=1.0, seed=5, num_requests=40)
    again = build_workload(spec, rate_per_s=1.0, seed=6, num_requests=40)
    assert calls == [{"rows": 3, "threshold": 0.3, "folds": 3, "seed": 0}]  # computed once per file and settings
    predicted = {"chest pain": 2, "cough": 2, "unconscious after fall from a ladder": 1}
    for built in (workload, again):
        assert built.urgency is not None and built.urgency_true is not None
        complaints = _complaints(built.prompt_text)
        assert list(built.urgency) == [predicted[c] for c in complaints]
        assert list(built.urgency_true) == [EXPERT[c] for c in complaints]


@pytest.mark.data
def test_predictions_out_of_range_are_refused(write_file: WriteFile, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _ktas_file(write_file, THREE_PATIENTS)

    def zero_based(records: TriageRecords, **settings: Any) -> np.ndarray:
        return np.array([0, 1, 2])  # KTAS levels are 1-5

    monkeypatch.setattr(urgency_model, "cross_val_levels", zero_based, raising=False)
    with pytest.raises(WorkloadError, match="cross_val_levels must give one level 1-5 per row"):
        build_workload(f"ktas-ed:data={path};urgency=predicted", rate_per_s=1.0, seed=0, num_requests=5)


@pytest.mark.data
def test_urgency_error_mislabels_the_expert_levels() -> None:
    n = 1_000
    exact = build_workload("ktas-ed", rate_per_s=1.0, seed=7, num_requests=n)
    noisy = build_workload("ktas-ed:urgency_error=0.2", rate_per_s=1.0, seed=7, num_requests=n)
    assert np.array_equal(noisy.arrival_time_s, exact.arrival_time_s) and noisy.prompt_text == exact.prompt_text
    assert exact.urgency is not None and noisy.urgency is not None and noisy.urgency_true is not None
    assert np.array_equal(noisy.urgency_true, exact.urgency)
    assert np.mean(noisy.urgency != noisy.urgency_true) == pytest.approx(round(0.2 * n) / n)


@pytest.mark.data
def test_same_seed_same_workload() -> None:
    first = build_workload("ktas-ed", rate_per_s=1.0, duration_s=10.0, seed=9)
    again = build_workload("ktas-ed", rate_per_s=1.0, duration_s=10.0, seed=9)
    assert np.array_equal(first.arrival_time_s, again.arrival_time_s) and first.prompt_text == again.prompt_text
    assert first.tier == again.tier


def test_a_missing_data_file_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    absent = tmp_path / "nowhere" / "triage.csv"
    with pytest.raises(DataNotFoundError) as info:
        build_workload(f"ktas-ed:data={absent}", rate_per_s=1.0, seed=0, num_requests=5)
    assert str(absent) in str(info.value) and "data:" in str(info.value)
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path))
    with pytest.raises(DataNotFoundError) as default_info:
        build_workload("ktas-ed", rate_per_s=1.0, seed=0, num_requests=5)
    assert "ktas_triage.csv" in str(default_info.value) and str(tmp_path) in str(default_info.value)


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ("ktas-ed:urgency=doctor", "urgency: must be one of expert, nurse, predicted (got 'doctor')"),
        ("ktas-ed:output_tokens=50/5", "output_tokens: must be LOW/HIGH"),
        ("ktas-ed:output_tokens=5", "output_tokens: must be LOW/HIGH"),
        ("ktas-ed:output_tokens=0/5", "output_tokens: must be LOW/HIGH"),
        ("ktas-ed:urgency=nurse;urgency_error=0.1", "urgency_error: mislabels the expert levels"),
        ("ktas-ed:urgency_error=2", "urgency_error: must be a number from 0 to 1"),
        ("ktas-ed:threshold=0.3", "threshold: sets the classifier's; only with urgency=predicted"),
        ("ktas-ed:urgency=predicted;threshold=0", "threshold: must be a number in (0, 1]"),
        ("ktas-ed:folds=1", "folds: must be an integer from 2 to 100"),
        ("ktas-ed:gap_s=0", "gap_s: must be a finite number > 0"),
        ("ktas-ed:max_concurrent=0", "max_concurrent: must be an integer from 1 to 1,000,000"),
    ],
)
def test_bad_specs_are_named(spec: str, needle: str) -> None:
    with pytest.raises(WorkloadError) as info:
        parse_workload_spec(spec)
    assert needle in str(info.value) and str(info.value).startswith("workload 'ktas-ed': ")


def test_default_config() -> None:
    config = parse_workload_spec("ktas-ed")[1]
    assert config == KtasEdConfig()
    assert (config.urgency, config.gap_s, config.max_concurrent) == ("expert", 0.1, 5)
    assert config.output_tokens == (5, 50) and config.max_output_tokens is None


def test_the_listing_shows_the_new_parameters(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["workloads"]) == 0
    out = capsys.readouterr().out
    assert "ktas-ed" in out and "urgency: 'expert' | 'nurse' | 'predicted' = 'expert'" in out
    assert "output_tokens: int/int/... = (5, 50)" in out and "max_concurrent: int = 5" in out
    assert "urgency_levels: int = 5" in out and "urgency_error: float = 0.0" in out
    assert "urgency_weights: float/float/... (optional)" in out and "max_output_tokens = 500" in out


def test_size_is_checked_before_reading_anything(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DATA_DIR_ENV, "/nonexistent")
    with pytest.raises(WorkloadError, match="workload 'ktas-ed': .* would give about .* more than the limit"):
        build_workload("ktas-ed:gap_s=0.001", rate_per_s=1.0, duration_s=1e6, seed=0)
