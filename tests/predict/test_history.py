"""The FIFO history, the warm-up corpus, the history-lookup and refitting predictors, and their registry
(semsched/predict/history.py, knn.py, fitted.py, length_registry.py). Hand-built vectors where the neighbours
are the point, random unit vectors elsewhere; no embedding model."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from semsched.core.request import LengthDistribution
from semsched.predict.fitted import BucketsConfig, BucketsPredictor, RegressorConfig, RegressorPredictor
from semsched.predict.history import DEFAULT_PRIOR, Corpus, FinishedHistory, HistoryError, resolve_paths
from semsched.predict.knn import (
    HistogramConfig,
    HistogramPredictor,
    InputLengthPredictor,
    NeighbourConfig,
    SemanticKnnPredictor,
)
from semsched.predict.length_registry import (
    LengthPredictorError,
    length_predictor_names,
    make_length_predictor,
    parse_length_spec,
)
from tests.predict.factories import FakeEncoder, prompts, random_units, unit, write_alpaca_file

# ---- the FIFO history ------------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(capacity=st.integers(1, 8), batches=st.lists(st.integers(0, 12), max_size=8))
def test_history_keeps_the_newest_rows_oldest_first(capacity: int, batches: list[int]) -> None:
    history = FinishedHistory(capacity)
    added: list[int] = []
    for size in batches:
        lengths = np.arange(len(added) + 1, len(added) + size + 1, dtype=np.int64)
        history.add(random_units(size, 3, seed=size), lengths, lengths)
        added.extend(lengths.tolist())
    kept = added[-capacity:] if added else []
    assert history.ordered().output_tokens.tolist() == kept
    assert sorted(history.rows().output_tokens.tolist()) == sorted(kept)
    assert (len(history), history.observed) == (len(kept), len(added))


def test_history_rows_carry_their_vectors_and_prompt_tokens_through_eviction() -> None:
    history = FinishedHistory(2)
    vectors = np.eye(3, dtype=np.float32)
    history.add(vectors, np.array([5, 6, 7]), np.array([50, 60, 70]))
    ordered = history.ordered()
    assert ordered.vectors.tolist() == vectors[1:].tolist()
    assert (ordered.prompt_tokens.tolist(), ordered.output_tokens.tolist()) == ([6, 7], [60, 70])


@pytest.mark.parametrize("capacity", [0, -1, 2.5, True])
def test_a_bad_capacity_is_refused_by_name(capacity: object) -> None:
    with pytest.raises(HistoryError, match="capacity"):
        FinishedHistory(capacity)  # type: ignore[arg-type]


def test_rows_of_another_dimension_or_zero_length_are_refused() -> None:
    history = FinishedHistory(4)
    history.add(random_units(1, 3, seed=0), np.array([1]), np.array([1]))
    with pytest.raises(HistoryError, match="dimensions"):
        history.add(random_units(1, 4, seed=0), np.array([1]), np.array([1]))
    with pytest.raises(HistoryError, match=">= 1"):
        history.add(random_units(1, 3, seed=0), np.array([1]), np.array([0]))


# ---- semantic-knn on hand-built vectors ------------------------------------------------------------------
# cosine with A: B 0.9, D 0.6, C 0
A, B, C, D = unit(1, 0, 0), unit(0.9, math.sqrt(1 - 0.81), 0), unit(0, 1, 0), unit(0.6, 0.8, 0)


def knn(warmup: Corpus | None = None, **settings: float) -> SemanticKnnPredictor:
    return SemanticKnnPredictor(NeighbourConfig(**settings), warmup)  # type: ignore[arg-type]


def test_semantic_knn_takes_the_rows_above_the_threshold() -> None:
    predictor = knn(min_neighbours=2)
    predictor.observe(prompts([A, B, C, D]), np.array([10, 20, 30, 40]))
    assert predictor.predict(prompts([A])) == [LengthDistribution((10, 20), (0.5, 0.5))]
    assert predictor.predict(prompts([C])) == [LengthDistribution((30, 40), (0.5, 0.5))]  # C.D = 0.8


def test_semantic_knn_adds_the_warm_up_corpus_when_too_few_qualify() -> None:
    warmup = Corpus(np.array([B, C]), np.array([10, 10]), np.array([50, 70]))
    predictor = knn(warmup, min_neighbours=2)
    predictor.observe(prompts([A, D]), np.array([10, 40]))
    assert predictor.predict(prompts([A])) == [LengthDistribution((10, 50), (0.5, 0.5))]


def test_semantic_knn_falls_back_to_the_most_similar_rows() -> None:
    warmup = Corpus(np.array([B]), np.array([10]), np.array([50]))
    predictor = knn(warmup, min_neighbours=5, fallback_k=3)
    predictor.observe(prompts([A, C, D]), np.array([10, 30, 40]))
    # A's similarities: A 1, B (warm-up) 0.9, D 0.6, C 0 -> the three most similar
    assert predictor.predict(prompts([A])) == [LengthDistribution((10, 40, 50), (1 / 3, 1 / 3, 1 / 3))]


def test_with_nothing_known_every_predictor_gives_the_prior() -> None:
    for predictor in (knn(), InputLengthPredictor(NeighbourConfig()), HistogramPredictor(HistogramConfig()),
                      RegressorPredictor(RegressorConfig()), BucketsPredictor(BucketsConfig())):
        assert predictor.predict(prompts([A, B])) == [DEFAULT_PRIOR, DEFAULT_PRIOR]


def test_a_request_is_never_its_own_neighbour_before_it_is_observed() -> None:
    predictor = knn(min_neighbours=1, threshold=0.95)
    predictor.observe(prompts([B]), np.array([20]))
    assert predictor.predict(prompts([A])) == [LengthDistribution.point(20)]  # the fallback: B is all there is
    predictor.observe(prompts([A]), np.array([10]))
    assert predictor.predict(prompts([A])) == [LengthDistribution.point(10)]


def test_evicted_rows_are_no_longer_neighbours() -> None:
    predictor = knn(capacity=2, min_neighbours=1, fallback_k=1)
    predictor.observe(prompts([A, C, D]), np.array([10, 30, 40]))
    assert predictor.predict(prompts([A])) == [LengthDistribution.point(40)]  # A was evicted; D is most similar


def test_a_batch_predicts_what_one_prompt_at_a_time_predicts() -> None:
    predictor = knn(min_neighbours=3, fallback_k=4, threshold=0.3)
    predictor.observe(prompts(random_units(300, 8, seed=1)), np.random.default_rng(2).integers(1, 500, 300))
    queries = prompts(random_units(40, 8, seed=3))
    one_by_one = [predictor.predict(queries.take([i]))[0] for i in range(len(queries))]
    assert predictor.predict(queries) == one_by_one


# ---- input-length and histogram --------------------------------------------------------------------------


def test_input_length_neighbours_have_similar_prompt_lengths() -> None:
    predictor = InputLengthPredictor(NeighbourConfig(min_neighbours=2))
    vectors = random_units(4, 3, seed=0)  # ignored by this predictor
    # ratios to 100 tokens: 0.9, 0.7, 0.8, 0.5
    predictor.observe(prompts(vectors, [90, 70, 125, 200]), np.array([11, 22, 33, 44]))
    assert predictor.predict(prompts(vectors[:1], [100])) == [LengthDistribution((11, 33), (0.5, 0.5))]


def test_histogram_moves_from_prior_to_warm_up_to_history() -> None:
    warmup = Corpus(np.array([A, B]), np.array([1, 1]), np.array([7, 9]))
    predictor = HistogramPredictor(HistogramConfig(min_history=2), warmup)
    assert predictor.predict(prompts([C])) == [LengthDistribution((7, 9), (0.5, 0.5))]
    predictor.observe(prompts([A]), np.array([3]))
    assert predictor.predict(prompts([C])) == [LengthDistribution((7, 9), (0.5, 0.5))]
    predictor.observe(prompts([B]), np.array([3]))
    assert predictor.predict(prompts([C, D])) == [LengthDistribution.point(3)] * 2


# ---- refitting predictors --------------------------------------------------------------------------------


def test_regressor_recovers_a_log_linear_length_and_refits_on_schedule() -> None:
    vectors = random_units(400, 8, seed=4)
    weights = np.linspace(-1, 1, 8)
    lengths = np.rint(np.exp(vectors @ weights + 5)).astype(np.int64)
    predictor = RegressorPredictor(RegressorConfig(alpha=1e-6, refit_every=100, min_rows=10))
    predictor.observe(prompts(vectors[:5]), lengths[:5])
    assert predictor.fits == 0 and predictor.predict(prompts(vectors[:1])) == [DEFAULT_PRIOR]
    for start in range(5, 300, 5):
        predictor.observe(prompts(vectors[start:start + 5]), lengths[start:start + 5])
    assert predictor.fits == 3  # the first fit at 10 rows observed, then at 110 and 210 (every 100)
    held_out = predictor.predict(prompts(vectors[300:]))
    assert all(len(d.lengths) == 1 for d in held_out)  # a point prediction
    predicted = np.array([d.lengths[0] for d in held_out])
    assert np.all(np.abs(predicted - lengths[300:]) <= 0.02 * lengths[300:] + 1)


def test_buckets_predictor_learns_which_bucket_a_direction_means() -> None:
    vectors = random_units(300, 8, seed=5)
    lengths = np.where(vectors[:, 0] > 0, 950, 40).astype(np.int64)
    predictor = BucketsPredictor(BucketsConfig(refit_every=1000, min_rows=300))
    predictor.observe(prompts(vectors), lengths)
    queries = random_units(50, 8, seed=6)
    means = np.array([d.mean for d in predictor.predict(prompts(queries))])
    assert np.mean((means > 500) == (queries[:, 0] > 0)) >= 0.9


def test_buckets_predictor_with_one_bucket_seen_predicts_it() -> None:
    predictor = BucketsPredictor(BucketsConfig(min_rows=2))
    predictor.observe(prompts([A, B]), np.array([10, 20]))
    config = predictor.buckets
    assert predictor.predict(prompts([C])) == [config.distribution(0)]


# ---- registry and specs ----------------------------------------------------------------------------------


def test_every_documented_predictor_is_registered() -> None:
    assert length_predictor_names() == ["buckets", "histogram", "input-length", "regressor", "semantic-knn"]


def test_a_spec_sets_parameters_by_their_types() -> None:
    predictor = make_length_predictor("semantic-knn:threshold=0.7;min_neighbours=3;capacity=50")
    assert isinstance(predictor, SemanticKnnPredictor)
    config = predictor.config
    assert (config.threshold, config.min_neighbours, predictor.history.capacity) == (0.7, 3, 50)


@pytest.mark.parametrize(
    ("spec", "needles"),
    [
        ("semantic-knn:threshold=1.5", ["threshold", "-1 to 1", "1.5"]),
        ("semantic-knn:min_neighbours=0", ["min_neighbours", "from 1"]),
        ("histogram:capacity=0", ["capacity", "from 1"]),
        ("buckets:num_buckets=30", ["num_buckets", "5 to 10"]),
        ("regressor:refit_every=x", ["refit_every", "int"]),
        ("semantic-knn:radius=2", ["unknown parameter", "radius"]),
        ("oracle", ["unknown length predictor", "semantic-knn"]),
        ("semantic-knn:warmup=/no/such/file.json", ["warmup", "/no/such/file.json"]),
    ],
)
def test_bad_specs_name_the_field_and_limit(spec: str, needles: list[str]) -> None:
    with pytest.raises(LengthPredictorError) as caught:
        make_length_predictor(spec, FakeEncoder())
    for needle in needles:
        assert needle in str(caught.value)


def test_a_warm_up_file_of_the_wrong_format_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "notes.json"
    bad.write_text("plain text")
    with pytest.raises(LengthPredictorError, match=str(bad)):
        make_length_predictor(f"semantic-knn:warmup={bad}", FakeEncoder())


def test_warm_up_paths_join_with_plus_and_expand_globs(tmp_path: Path) -> None:
    for name in ("a.json", "b.json", "c.jsonl"):
        (tmp_path / name).write_text("[]")
    paths = resolve_paths(f"{tmp_path}/*.json+{tmp_path / 'c.jsonl'}")
    assert [p.name for p in paths] == ["a.json", "b.json", "c.jsonl"]
    with pytest.raises(HistoryError, match="matches no file"):
        resolve_paths(f"{tmp_path}/*.csv")


@pytest.mark.data
def test_a_warm_up_file_becomes_the_cold_start(tmp_path: Path) -> None:
    path = write_alpaca_file(tmp_path / "warm.json", [("Say hi.", "Hi there!"), ("Count to three.", "1 2 3")])
    predictor = make_length_predictor(f"semantic-knn:warmup={path};min_neighbours=1", FakeEncoder())
    assert isinstance(predictor, SemanticKnnPredictor) and len(predictor.warmup) == 2
    same = predictor.predict(prompts(FakeEncoder().encode(["Say hi."])))[0]
    assert same == LengthDistribution.point(int(predictor.warmup.output_tokens[0]))
    _, config = parse_length_spec(f"histogram:warmup={path}")
    assert config.warmup == str(path)
