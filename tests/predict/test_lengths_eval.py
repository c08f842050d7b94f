"""The evaluation of online length predictors (semsched/predict/lengths_eval.py): the online mode's order, the
cross-model history, errors naming the file, the report's shape; one run on the real embedding model."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from semsched.core.request import LengthDistribution
from semsched.predict.history import DEFAULT_PRIOR, distribution_of
from semsched.predict.lengths_eval import (
    LengthsEvalError,
    Stream,
    embedding_cost,
    evaluate,
    history_paths,
    run_online,
)
from semsched.predict.online import Prompts
from semsched.workloads.answers import AnswerDataError, answer_files, load_answer_file, token_counts
from tests.predict.factories import FakeEncoder, prompts, random_units, write_alpaca_file


class Spy:
    """Records, at every predict, which rows (by prompt text) it had observed."""

    name = "spy"

    def __init__(self) -> None:
        self.seen: list[str] = []
        self.seen_at_predict: list[tuple[tuple[str, ...], tuple[str, ...]]] = []

    def predict(self, batch: Prompts) -> list[LengthDistribution]:
        self.seen_at_predict.append((batch.texts, tuple(self.seen)))
        return [DEFAULT_PRIOR] * len(batch)

    def observe(self, batch: Prompts, output_tokens: npt.NDArray[np.int64]) -> None:
        self.seen.extend(batch.texts)


def test_online_predicts_each_request_from_the_rows_before_it_only() -> None:
    stream = Stream(prompts(random_units(6, 4, seed=0)), np.arange(1, 7, dtype=np.int64))
    spy = Spy()
    predictions, _, _ = run_online(spy, stream)
    assert len(predictions) == 6
    assert spy.seen_at_predict == [((f"p{i}",), tuple(f"p{j}" for j in range(i))) for i in range(6)]


def _rows(count: int, prefix: str) -> list[tuple[str, str]]:
    return [(f"Question {i}?", " ".join([prefix] * (i + 1))) for i in range(count)]


@pytest.mark.data
def test_online_semantic_knn_sees_earlier_answers_to_the_same_prompt(tmp_path: Path) -> None:
    answers = ["one", "one two", "one two three", "a b c d", "x y", "last one"]
    path = write_alpaca_file(tmp_path / "same.json", [("Same prompt?", a) for a in answers])
    report = evaluate(path, predictors=["semantic-knn:min_neighbours=5"], encoder=FakeEncoder())
    result = report.results[0]
    lengths = token_counts(answers)
    # row 5 is predicted from rows 0-4 (all identical prompts); rows 1-4 from fewer, by the top-k fallback
    expected = [DEFAULT_PRIOR] + [distribution_of(lengths[:i]) for i in range(1, 6)]
    from semsched.predict.scoring import score

    assert result.scores == score(expected, lengths)
    assert report.requests == 6 and report.history_rows == 0 and report.embedding is None


@pytest.mark.data
def test_history_files_are_observed_first_and_may_not_be_the_file_itself(tmp_path: Path) -> None:
    target = write_alpaca_file(tmp_path / "target.json", _rows(8, "word"))
    other = write_alpaca_file(tmp_path / "other.json", _rows(8, "longer words"), generator="other")
    report = evaluate(target, mode="cross-model", history=[other], predictors=["histogram"],
                      encoder=FakeEncoder())
    assert report.history_rows == 8 and report.history_files == (other,)
    with pytest.raises(LengthsEvalError, match="target.json is the evaluated file itself"):
        evaluate(target, mode="online", history=[other, target], encoder=FakeEncoder())


@pytest.mark.data
def test_cross_model_defaults_to_every_other_file_of_the_benchmark() -> None:
    files = answer_files("mt-bench")
    target = load_answer_file(files[0])
    others = history_paths(target, "cross-model", None)
    assert files[0] not in others and len(others) == len(files) - 1
    assert history_paths(target, "online", None) == []


def test_a_wrong_format_file_is_refused_with_its_name(tmp_path: Path) -> None:
    bad = tmp_path / "trace.csv"
    bad.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n")
    with pytest.raises(AnswerDataError, match=str(bad)):
        evaluate(bad, encoder=FakeEncoder())


@pytest.mark.parametrize(("kwargs", "needle"), [({"mode": "offline"}, "mode"), ({"predictors": []}, "predictors")])
def test_bad_settings_are_refused_before_any_file_is_read(kwargs: dict[str, object], needle: str) -> None:
    with pytest.raises(LengthsEvalError, match=needle):
        evaluate("/no/such/file.json", encoder=FakeEncoder(), **kwargs)  # type: ignore[arg-type]


def test_embedding_cost_times_a_batch_and_singles() -> None:
    encoder = FakeEncoder()
    cost = embedding_cost([f"t{i}" for i in range(10)], encoder, batch_size=4, singles=3)
    assert (cost.batch_size, cost.singles) == (4, 3)
    assert encoder.calls == 1 + 1 + 3  # model load, the batch, the singles
    assert cost.batched_ms >= 0 and cost.single_ms >= 0


@pytest.mark.data
@pytest.mark.embeddings
def test_online_on_mt_bench_with_the_real_embeddings_offline() -> None:
    from semsched.predict.embed import Embedder

    path = answer_files("mt-bench")[0]
    report = evaluate(path, predictors=["semantic-knn", "histogram"])
    document = report.as_dict()
    assert set(document) == {"semantic-knn", "histogram", "embedding"}
    for name in ("semantic-knn", "histogram"):
        assert document[name]["n"] == report.requests
        assert all(math.isfinite(document[name][key]) for key in ("crps", "log_loss", "mae_mean"))
    encoder = Embedder(cache=False)
    texts = ["Write a poem about the sea.", "Give me the capital of France.",
             "Compose a short poem about the ocean."]
    similar, unrelated, paraphrase = encoder.encode(texts)
    assert float(similar @ paraphrase) > 0.6 > float(similar @ unrelated)
    cost = embedding_cost(texts, encoder, batch_size=3, singles=2)
    assert cost.batched_ms > 0 and cost.single_ms > 0
