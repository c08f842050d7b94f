"""Tests for semsched/predict/length.py (buckets, noisy oracle, answer-length loader, predictor) and
semsched/cli/length.py."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from semsched.cli import length as length_cli
from semsched.cli.common import UsageError
from semsched.predict.length import (
    MAX_BUCKETS,
    MIN_BUCKETS,
    AnswerLengths,
    LengthBucketPredictor,
    LengthBuckets,
    LengthDataError,
    LengthError,
    LengthModelError,
    NoisyBucketOracle,
    cross_validate,
    load_answer_lengths,
    training_rows,
)
from semsched.predict.oracle import target_distance
from semsched.workloads.answers import TOKENIZER_FILE
from semsched.workloads.traces import data_dir

# ---- buckets ---------------------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(num_buckets=st.integers(MIN_BUCKETS, MAX_BUCKETS), extra=st.integers(0, 2000))
def test_buckets_partition_one_to_max_output(num_buckets: int, extra: int) -> None:
    buckets = LengthBuckets(max_output=num_buckets + extra, num_buckets=num_buckets)
    ranges = [buckets.range_of(b) for b in range(num_buckets)]
    assert ranges[0][0] == 1 and ranges[-1][1] == buckets.max_output
    widths = []
    for b, (low, high) in enumerate(ranges):
        assert low <= high
        widths.append(high - low + 1)
        assert buckets.bucket_of(np.array([low, high])).tolist() == [b, b]
        if b + 1 < num_buckets:
            assert ranges[b + 1][0] == high + 1  # contiguous: every length in exactly one bucket
    assert max(widths) - min(widths) <= 1  # equal width, up to integer edges


def test_lengths_above_max_output_fall_in_the_last_bucket() -> None:
    buckets = LengthBuckets(max_output=500, num_buckets=5)
    above = np.array([501, 10_000])
    assert buckets.bucket_of(above).tolist() == [4, 4]
    assert buckets.capped(above).tolist() == [500, 500]


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"num_buckets": MIN_BUCKETS - 1}, "num_buckets"),
        ({"num_buckets": MAX_BUCKETS + 1}, "num_buckets"),
        ({"num_buckets": True}, "num_buckets"),
        ({"num_buckets": 5.0}, "num_buckets"),
        ({"max_output": 4, "num_buckets": 5}, "max_output"),
        ({"points_per_bucket": 0}, "points_per_bucket"),
    ],
)
def test_bad_bucket_settings_name_the_parameter(kwargs: dict[str, object], needle: str) -> None:
    with pytest.raises(LengthError, match=needle):
        LengthBuckets(**kwargs)  # type: ignore[arg-type]


def test_bad_lengths_buckets_and_probabilities_are_refused() -> None:
    buckets = LengthBuckets()
    with pytest.raises(LengthError, match="lengths"):
        buckets.bucket_of(np.array([0, 5]))
    with pytest.raises(LengthError, match="lengths"):
        buckets.bucket_of(np.array([1.5]))
    for bad in (-1, buckets.num_buckets):
        with pytest.raises(LengthError, match="bucket"):
            buckets.range_of(bad)
    with pytest.raises(LengthError, match="probs"):
        buckets.distribution_from_probs(np.ones(buckets.num_buckets - 1) / (buckets.num_buckets - 1))
    with pytest.raises(LengthError, match="probs"):
        buckets.distribution_from_probs(np.full(buckets.num_buckets, 0.5))


@pytest.mark.parametrize("num_buckets", [MIN_BUCKETS, 7, MAX_BUCKETS])
def test_a_bucket_is_seen_as_points_inside_it_centred_on_its_midpoint(num_buckets: int) -> None:
    buckets = LengthBuckets(max_output=500, num_buckets=num_buckets)
    for b in range(num_buckets):
        low, high = buckets.range_of(b)
        seen = buckets.distribution(b)
        assert low <= seen.lengths[0] and seen.lengths[-1] <= high
        assert len(seen.lengths) == min(buckets.points_per_bucket, high - low + 1)
        assert abs(seen.mean - (low + high) / 2) <= 0.5  # rounding to integer lengths only


def test_a_one_token_wide_bucket_is_a_point() -> None:
    buckets = LengthBuckets(max_output=5, num_buckets=5)
    assert [buckets.distribution(b).lengths for b in range(5)] == [(1,), (2,), (3,), (4,), (5,)]


def test_probabilities_mix_the_buckets_distributions() -> None:
    buckets = LengthBuckets(max_output=500, num_buckets=6)
    one_hot = np.eye(buckets.num_buckets)[2]
    assert buckets.distribution_from_probs(one_hot) == buckets.distribution(2)
    probs = np.random.default_rng(3).dirichlet(np.ones(buckets.num_buckets))
    mixed = buckets.distribution_from_probs(probs)
    assert math.isclose(mixed.mean, float(probs @ buckets.means), rel_tol=1e-9)
    for b in range(buckets.num_buckets):
        low, high = buckets.range_of(b)
        mass = sum(p for n, p in zip(mixed.lengths, mixed.probs, strict=True) if low <= n <= high)
        assert math.isclose(mass, probs[b], abs_tol=1e-9)


# ---- noisy oracle ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("num_buckets", "error"), [(5, 0.1), (5, 0.4), (10, 0.25), (8, 0.0)])
def test_oracle_error_fraction_and_distance_are_the_ones_asked_for(num_buckets: int, error: float) -> None:
    buckets = LengthBuckets(max_output=500, num_buckets=num_buckets)
    lengths = np.random.default_rng(1).integers(1, 2 * buckets.max_output, size=20_000)
    true = buckets.bucket_of(lengths)
    predicted = NoisyBucketOracle(buckets, error, seed=7).predict_buckets(lengths)
    wrong = predicted != true
    assert wrong.sum() == round(error * lengths.size)  # mislabel makes exactly this many wrong
    if wrong.any():
        distance = np.abs(predicted - true)[wrong]
        tolerance = 4 * distance.std() / math.sqrt(distance.size) + 1e-9  # 4 standard errors of the mean
        assert abs(distance.mean() - target_distance(error, num_buckets)) <= tolerance


def test_oracle_is_deterministic_per_seed_and_gives_bucket_distributions() -> None:
    buckets = LengthBuckets()
    lengths = np.arange(1, 700)
    first = NoisyBucketOracle(buckets, 0.3, seed=5).predict_buckets(lengths)
    assert np.array_equal(first, NoisyBucketOracle(buckets, 0.3, seed=5).predict_buckets(lengths))
    seen = NoisyBucketOracle(buckets, 0.3, seed=5).predict(lengths)
    assert seen == [buckets.distribution(int(b)) for b in first]


@pytest.mark.parametrize("error", [-0.1, 1.5, float("nan")])
def test_oracle_refuses_a_bad_error(error: float) -> None:
    with pytest.raises(LengthError, match="error"):
        NoisyBucketOracle(LengthBuckets(), error)


# ---- loader ----------------------------------------------------------------------------------------------


def _jsonl(rows: list[object]) -> str:
    return "".join(json.dumps(row) + "\n" for row in rows)


def _mt_bench_dir(root: Path, answers: dict[str, list[object]]) -> Path:
    """A small MT-Bench folder: two questions, one answer file per model, the shared tokenizer linked in."""
    (root / "mt_bench" / "model_answer").mkdir(parents=True)
    questions = [{"question_id": 1, "turns": ["Say hi.", "Again."]},
                 {"question_id": 2, "turns": ["Write a poem.", "Shorter."]}]
    (root / "mt_bench" / "question.jsonl").write_text(_jsonl(questions))
    for model, rows in answers.items():
        (root / "mt_bench" / "model_answer" / f"{model}.jsonl").write_text(_jsonl(rows))
    tokenizer = root / TOKENIZER_FILE
    tokenizer.parent.mkdir(parents=True)
    tokenizer.symlink_to(data_dir() / TOKENIZER_FILE)
    return root


def _answer(question_id: int, text: str) -> dict[str, object]:
    return {"question_id": question_id, "choices": [{"index": 0, "turns": [text, "second turn"]}]}


@pytest.mark.data
def test_loader_counts_each_answers_tokens_and_skips_empty_ones(tmp_path: Path) -> None:
    from tokenizers import Tokenizer

    texts = {"a": ["Hi there!", "Roses are red."], "b": ["", "A longer poem about the sea and the sky."]}
    root = _mt_bench_dir(tmp_path, {m: [_answer(1, t[0]), _answer(2, t[1])] for m, t in texts.items()})
    loaded = load_answer_lengths("mt-bench", root)
    tokenizer = Tokenizer.from_file(str(data_dir() / TOKENIZER_FILE))

    def count(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False).ids)

    assert loaded.prompts == ("Say hi.", "Write a poem.")
    assert loaded.num_models == 2
    assert loaded.lengths[0].tolist() == [count("Hi there!")]  # model b's empty answer is skipped
    assert loaded.lengths[1].tolist() == [count(texts["a"][1]), count(texts["b"][1])]


@pytest.mark.parametrize(
    ("row", "needles"),
    [
        ('{"question_id": 1, "choices": [{"turns": [3]}]}', ["b.jsonl", "row 2", "choices[0].turns[0]"]),
        ('{"choices": [{"turns": ["x"]}]}', ["b.jsonl", "row 2", "question_id"]),
        ('{"question_id": 9, "choices": [{"turns": ["x"]}]}', ["b.jsonl", "row 2", "question_id 9"]),
        ("{not json", ["b.jsonl", "row 2", "not JSON"]),
    ],
)
def test_a_malformed_answer_row_is_named(tmp_path: Path, row: str, needles: list[str]) -> None:
    root = _mt_bench_dir(tmp_path, {"a": [_answer(1, "ok")]})
    (root / "mt_bench" / "model_answer" / "b.jsonl").write_text(json.dumps(_answer(1, "fine")) + "\n" + row + "\n")
    with pytest.raises(LengthDataError) as caught:
        load_answer_lengths("mt-bench", root)
    for needle in needles:
        assert needle in str(caught.value)


def test_loader_refuses_an_unknown_dataset_and_a_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(LengthDataError, match="dataset"):
        load_answer_lengths("sharegpt", tmp_path)
    with pytest.raises(LengthDataError, match="does not exist"):
        load_answer_lengths("mt-bench", tmp_path / "absent")


@pytest.mark.data
def test_mt_bench_has_one_prompt_per_question_and_positive_counts() -> None:
    questions = (data_dir() / "mt_bench" / "question.jsonl").read_text().splitlines()
    answer_files = list((data_dir() / "mt_bench" / "model_answer").glob("*.jsonl"))
    loaded = load_answer_lengths("mt-bench")
    assert len(loaded) == len([line for line in questions if line.strip()])
    assert loaded.prompts == tuple(json.loads(line)["turns"][0] for line in questions if line.strip())
    assert loaded.num_models == len(answer_files)
    assert all(counts.size and counts.min() > 0 and counts.size <= loaded.num_models for counts in loaded.lengths)


@pytest.mark.data
@pytest.mark.slow
def test_alpaca_eval_has_one_prompt_per_instruction() -> None:
    files = sorted((data_dir() / "alpaca_eval" / "model_outputs").glob("*.json"))
    instructions = {row["instruction"] for path in files for row in json.loads(path.read_text())}
    loaded = load_answer_lengths("alpaca-eval")
    assert set(loaded.prompts) == instructions and len(loaded) == len(instructions)
    assert sum(counts.size for counts in loaded.lengths) <= len(instructions) * len(files)
    assert all(counts.size and counts.min() > 0 for counts in loaded.lengths)


# ---- training rows (no embeddings needed) ----------------------------------------------------------------


def test_answer_rows_merge_a_prompts_answers_per_bucket_without_losing_any() -> None:
    buckets = LengthBuckets()
    data = AnswerLengths("toy", ("p0", "p1"), (np.array([5, 7, 350, 900]), np.array([120])), 2)
    owners, labels, weights = training_rows(data, buckets, "answers")
    expanded = sorted((int(o), int(b)) for o, b, w in zip(owners, labels, weights, strict=True)
                      for _ in range(int(w)))
    pairs_owners, pairs_lengths = data.pairs()
    assert expanded == sorted(zip(pairs_owners.tolist(), buckets.bucket_of(pairs_lengths).tolist(), strict=True))
    owners, labels, weights = training_rows(data, buckets, "median")
    medians = [int(np.median(lengths)) for lengths in data.lengths]
    assert labels.tolist() == buckets.bucket_of(np.array(medians)).tolist() and weights.tolist() == [1.0, 1.0]


# ---- the predictor (sentence embeddings) -----------------------------------------------------------------


@pytest.fixture(scope="module")
def mt_bench() -> AnswerLengths:
    return load_answer_lengths("mt-bench")


@pytest.fixture(scope="module")
def trained(mt_bench: AnswerLengths) -> LengthBucketPredictor:
    return LengthBucketPredictor(LengthBuckets()).fit(mt_bench)


@pytest.mark.data
@pytest.mark.embeddings
def test_held_out_predictor_beats_the_majority_bucket(mt_bench: AnswerLengths) -> None:
    report = cross_validate(mt_bench, LengthBuckets(), folds=5)
    rows = {row.name: row for row in report.rows}
    model, majority = rows["predictor (answers)"], rows["majority"]
    assert model.n == majority.n == sum(counts.size for counts in mt_bench.lengths)
    assert model.mean_abs_bucket_error < majority.mean_abs_bucket_error
    assert model.mean_length_error < majority.mean_length_error
    assert math.isclose(report.oracle_error_same_accuracy, 1 - model.accuracy)
    assert math.isclose(rows["oracle (same accuracy)"].accuracy, model.accuracy, abs_tol=1 / model.n)


@pytest.mark.data
@pytest.mark.embeddings
def test_predictions_are_bucket_mixtures(trained: LengthBucketPredictor, mt_bench: AnswerLengths) -> None:
    texts = list(mt_bench.prompts[:6])
    probs = trained.predict_proba(texts)
    assert probs.shape == (6, trained.buckets.num_buckets)
    assert np.allclose(probs.sum(axis=1), 1.0)
    for row, seen in zip(probs, trained.predict_distribution(texts), strict=True):
        assert math.isclose(seen.mean, float(row @ trained.buckets.means), rel_tol=1e-9)
    assert trained.predict_buckets(texts).tolist() == np.argmax(probs, axis=1).tolist()


@pytest.mark.data
@pytest.mark.embeddings
def test_save_and_load_give_identical_probabilities(trained: LengthBucketPredictor, mt_bench: AnswerLengths,
                                                    tmp_path: Path) -> None:
    trained.metadata = {"note": "round trip"}
    loaded = LengthBucketPredictor.load(trained.save(tmp_path / "model"))
    texts = list(mt_bench.prompts[:10])
    assert np.array_equal(loaded.predict_proba(texts), trained.predict_proba(texts))
    assert (loaded.buckets, loaded.c, loaded.training, loaded.metadata) == (
        trained.buckets, trained.c, trained.training, {"note": "round trip"})


def test_an_untrained_or_missing_model_is_refused(tmp_path: Path) -> None:
    with pytest.raises(LengthModelError, match="not trained"):
        LengthBucketPredictor().save(tmp_path / "model")
    with pytest.raises(LengthModelError, match="not a length model directory"):
        LengthBucketPredictor.load(tmp_path)
    with pytest.raises(LengthError, match="training"):
        LengthBucketPredictor(training="mean")  # type: ignore[arg-type]


# ---- CLI -------------------------------------------------------------------------------------------------


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="semsched")
    length_cli.register(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(argv)


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--buckets", str(MIN_BUCKETS - 1)], "--buckets"),
        (["--buckets", "5", "--max-output", "4"], "--max-output"),
        (["--c", "0"], "--c"),
        (["--cost-batches", "1,x"], "--cost-batches"),
        (["--folds", "1"], "--folds"),
    ],
)
def test_eval_options_are_checked(argv: list[str], needle: str) -> None:
    args = _parse(["length", "eval", *argv])
    with pytest.raises(UsageError, match=needle):
        args.handler(args, Console())


@pytest.mark.data
@pytest.mark.embeddings
def test_eval_json_has_the_documented_keys(capsys: pytest.CaptureFixture[str]) -> None:
    args = _parse(["length", "eval", "--data", "mt-bench", "--folds", "3", "--cost-batches", "1,2",
                   "--cost-repeats", "1", "--json"])
    assert args.handler(args, Console()) == 0
    document = json.loads(capsys.readouterr().out)
    assert set(document) == {"cv", "cost", "cpu_count"}
    assert set(document["cv"]) == {"dataset", "prompts", "answers", "folds", "max_output", "num_buckets",
                                   "training", "c", "oracle_error_same_accuracy", "oracle_error_same_length",
                                   "rows"}
    assert [row["name"] for row in document["cv"]["rows"]] == [
        "predictor (answers)", "majority", "prior", "oracle (same accuracy)", "oracle (same length error)",
        "prompt-histogram"]
    for row in document["cv"]["rows"]:
        assert set(row) == {"name", "n", "accuracy", "mean_abs_bucket_error", "mean_length_error"}
    assert [cost["batch_size"] for cost in document["cost"]] == [1, 2]
    for cost in document["cost"]:
        assert set(cost) == {"batch_size", "seconds_per_batch", "seconds_per_request"}
        assert math.isclose(cost["seconds_per_request"] * cost["batch_size"], cost["seconds_per_batch"])
