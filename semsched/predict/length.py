"""Output-length *bucket* predictors (seed 000, "Semantic Scheduling for LLM Inference": 5-10 buckets, output
capped at 500 tokens), trained and measured on real answers.

* :class:`LengthBuckets`: equal-width buckets over ``[1, max_output]``; a length above ``max_output`` falls in the
  last bucket (the engine stops there). What the scheduler sees for a bucket is a uniform distribution over
  ``points_per_bucket`` lengths at the centres of equal parts of the bucket: its mean is the bucket's midpoint,
  and a request that outlives part of its bucket still expects work left in it (a single point at the midpoint
  would promise ~1 token once the midpoint is passed).
* :class:`NoisyBucketOracle`: true lengths -> buckets mislabelled by :func:`semsched.predict.oracle.mislabel`.
* :func:`load_answer_lengths`: MT-Bench (first turn) or AlpacaEval prompts, with the Llama-2 token count of every
  model's answer: many real output lengths per prompt.
* :class:`LengthBucketPredictor`: prompt -> all-MiniLM-L6-v2 embedding -> multinomial logistic regression over
  buckets. By default it is trained on one row per (prompt, answer), so its probabilities estimate the spread of
  lengths different models give one prompt; ``training="median"`` trains on each prompt's median bucket instead
  (held out, it is less accurate: MT-Bench 0.19-0.25 vs 0.37 at 5 buckets, AlpacaEval 0.37-0.41 vs 0.45, over
  C 0.1-10). :func:`cross_validate` compares a predictor with trivial baselines and the noisy oracle on
  held-out prompts; :func:`measure_cost` times a prediction (``semsched length eval`` shows both).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import joblib
import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import KFold

from semsched.core.errors import SemschedError
from semsched.core.request import LengthDistribution
from semsched.predict.embed import Embedder
from semsched.predict.oracle import OracleError, mislabel, target_distance
from semsched.workloads.answers import AnswerDataError, json_field, parse_jsonl, read_json, read_text
from semsched.workloads.answers import tokenizer as answer_tokenizer
from semsched.workloads.traces import data_dir as shared_data_dir

DEFAULT_MAX_OUTPUT, DEFAULT_NUM_BUCKETS, DEFAULT_POINTS_PER_BUCKET = 500, 5, 4
MIN_BUCKETS, MAX_BUCKETS = 5, 10  # seed 000's range
DATASETS = ("mt-bench", "alpaca-eval")
MODEL_FILE, META_FILE = "model.joblib", "model.json"
FORMAT_VERSION = 1
Training = Literal["answers", "median"]
TRAININGS: tuple[Training, ...] = ("answers", "median")
DEFAULT_BATCH_SIZES = (1, 4, 16, 64)
#: inverse regularisation: best held-out accuracy and bucket error of 0.1-10 on both data sets (5 buckets)
DEFAULT_C = 0.3


class LengthError(SemschedError):
    """Bad bucket, oracle or predictor settings: the message names the parameter and its limits."""


LengthDataError = AnswerDataError
"""A prompt/answer file cannot be read: the message names the file, and the row and field where one is bad."""

class LengthModelError(SemschedError):
    """A length model cannot be used (untrained, missing, or another format); the message says which."""


def _is_int(value: object) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


# ---- buckets ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LengthBuckets:
    """``num_buckets`` equal-width buckets of output lengths over ``[1, max_output]`` (integer edges; bucket ``b``
    ends at ``(b + 1) * max_output // num_buckets``). Lengths above ``max_output`` belong to the last bucket."""

    max_output: int = DEFAULT_MAX_OUTPUT
    num_buckets: int = DEFAULT_NUM_BUCKETS
    points_per_bucket: int = DEFAULT_POINTS_PER_BUCKET
    upper_edges: tuple[int, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not _is_int(self.num_buckets) or not MIN_BUCKETS <= self.num_buckets <= MAX_BUCKETS:
            raise LengthError(f"num_buckets: must be an integer from {MIN_BUCKETS} to {MAX_BUCKETS} "
                              f"(got {self.num_buckets!r})")
        if not _is_int(self.max_output) or self.max_output < self.num_buckets:
            raise LengthError(f"max_output: must be an integer >= num_buckets ({self.num_buckets}), so that every "
                              f"bucket holds a length (got {self.max_output!r})")
        if not _is_int(self.points_per_bucket) or self.points_per_bucket < 1:
            raise LengthError(f"points_per_bucket: must be an integer >= 1 (got {self.points_per_bucket!r})")
        edges = tuple((b + 1) * int(self.max_output) // int(self.num_buckets) for b in range(self.num_buckets))
        object.__setattr__(self, "upper_edges", edges)

    def bucket_of(self, lengths: int | Sequence[int] | np.ndarray) -> np.ndarray:
        """0-based bucket index of each length (an int64 array shaped like ``lengths``); lengths must be >= 1."""
        values = np.asarray(lengths)
        if values.size and (not np.issubdtype(values.dtype, np.integer) or values.min() < 1):
            raise LengthError(f"lengths: must be integers >= 1 (got {values.dtype} from {values.min()!r})")
        return np.searchsorted(np.asarray(self.upper_edges), values, side="left").clip(
            max=self.num_buckets - 1).astype(np.int64)

    def range_of(self, bucket: int) -> tuple[int, int]:
        """Smallest and largest length of ``bucket`` (both inclusive)."""
        if not _is_int(bucket) or not 0 <= bucket < self.num_buckets:
            raise LengthError(f"bucket: must be an integer from 0 to {self.num_buckets - 1} (got {bucket!r})")
        low = 1 if bucket == 0 else self.upper_edges[bucket - 1] + 1
        return low, self.upper_edges[bucket]

    def points(self, bucket: int) -> tuple[int, ...]:
        """The lengths :meth:`distribution` spreads a bucket over: centres of equal parts of the bucket."""
        low, high = self.range_of(bucket)
        width = high - low + 1
        count = min(self.points_per_bucket, width)
        centres = low - 0.5 + (2 * np.arange(count) + 1) * width / (2 * count)
        return tuple(sorted({int(math.floor(c + 0.5)) for c in centres}))

    def distribution(self, bucket: int) -> LengthDistribution:
        """What the scheduler sees for a predicted bucket: uniform over :meth:`points` (mean = midpoint)."""
        points = self.points(bucket)
        return LengthDistribution(points, tuple(1.0 / len(points) for _ in points))

    @property
    def means(self) -> np.ndarray:
        """Mean length of each bucket's distribution, shape (num_buckets,)."""
        return np.array([self.distribution(b).mean for b in range(self.num_buckets)])

    def distribution_from_probs(self, probs: Sequence[float] | np.ndarray) -> LengthDistribution:
        """The mixture of the buckets' distributions weighted by ``probs`` (one per bucket, >= 0, sum 1)."""
        weights = np.asarray(probs, dtype=np.float64)
        if weights.shape != (self.num_buckets,):
            raise LengthError(f"probs: need one probability per bucket ({self.num_buckets}), got shape "
                              f"{weights.shape}")
        if not np.all(np.isfinite(weights)) or weights.min() < 0 or not math.isclose(weights.sum(), 1.0,
                                                                                      abs_tol=1e-6):
            raise LengthError("probs: must be finite, >= 0 and sum to 1")
        weights = weights / weights.sum()
        lengths: list[int] = []
        masses: list[float] = []
        for bucket in np.flatnonzero(weights > 0):
            points = self.points(int(bucket))
            lengths.extend(points)
            masses.extend([float(weights[bucket]) / len(points)] * len(points))
        return LengthDistribution(tuple(lengths), tuple(masses))

    def capped(self, lengths: np.ndarray) -> np.ndarray:
        """Lengths as the engine generates them: at most ``max_output``."""
        return np.asarray(np.minimum(np.asarray(lengths), self.max_output))


# ---- noisy oracle ----------------------------------------------------------------------------------------
class NoisyBucketOracle:
    """True lengths -> buckets of which a fraction ``error`` is wrong, by seed 000's error model
    (:func:`~semsched.predict.oracle.mislabel`). Owns its random generator: two oracles with one seed agree."""

    def __init__(self, buckets: LengthBuckets, error: float, seed: int = 0) -> None:
        try:
            target_distance(error, buckets.num_buckets)  # checks the error
        except OracleError as problem:
            raise LengthError(str(problem)) from None
        self.buckets, self.error = buckets, float(error)
        self._rng = np.random.default_rng(seed)

    def predict_buckets(self, true_lengths: Sequence[int] | np.ndarray) -> np.ndarray:
        true = self.buckets.bucket_of(np.asarray(true_lengths))
        return mislabel(true, self.buckets.num_buckets, self.error, self._rng)

    def predict(self, true_lengths: Sequence[int] | np.ndarray) -> list[LengthDistribution]:
        return [self.buckets.distribution(int(b)) for b in self.predict_buckets(true_lengths)]


# ---- prompt / answer lengths -----------------------------------------------------------------------------
@dataclass(frozen=True)
class AnswerLengths:
    """Prompts and, per prompt, the output token count of each model's answer (int64, at least one)."""

    dataset: str
    prompts: tuple[str, ...]
    lengths: tuple[np.ndarray, ...]
    num_models: int

    def __len__(self) -> int:
        return len(self.prompts)

    def subset(self, indices: Iterable[int]) -> AnswerLengths:
        chosen = [int(i) for i in indices]
        return AnswerLengths(self.dataset, tuple(self.prompts[i] for i in chosen),
                             tuple(self.lengths[i] for i in chosen), self.num_models)

    def pairs(self, indices: Sequence[int] | np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(prompt index, answer length) of every answer of the chosen prompts (default: all)."""
        chosen = np.arange(len(self)) if indices is None else np.asarray(indices, dtype=np.int64)
        if chosen.size == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        owners = np.concatenate([np.full(self.lengths[i].size, i, dtype=np.int64) for i in chosen])
        return owners, np.concatenate([self.lengths[i] for i in chosen])


def _jsonl(path: Path) -> list[tuple[int, Any]]:
    return parse_jsonl(path, read_text(path))


def _mt_bench(directory: Path) -> tuple[list[str], list[list[str]], int]:
    questions = directory / "mt_bench" / "question.jsonl"
    ids: dict[int, int] = {}
    prompts: list[str] = []
    for number, row in _jsonl(questions):
        qid = json_field(row, ["question_id"], questions, f"row {number}", int)
        if qid in ids:
            raise LengthDataError(f"{questions}: row {number}: question_id {qid} appears twice")
        ids[qid] = len(prompts)
        prompts.append(json_field(row, ["turns", 0], questions, f"row {number}", str))
    answers: list[list[str]] = [[] for _ in prompts]
    files = sorted((directory / "mt_bench" / "model_answer").glob("*.jsonl"))
    for path in files:
        for number, row in _jsonl(path):
            qid = json_field(row, ["question_id"], path, f"row {number}", int)
            if qid not in ids:
                raise LengthDataError(f"{path}: row {number}: question_id {qid} is not in {questions.name}")
            answers[ids[qid]].append(json_field(row, ["choices", 0, "turns", 0], path, f"row {number}", str))
    return prompts, answers, len(files)


def _alpaca_eval(directory: Path) -> tuple[list[str], list[list[str]], int]:
    prompts: dict[str, list[str]] = {}  # instruction -> answers; instructions are unique, files' orders differ
    files = sorted((directory / "alpaca_eval" / "model_outputs").glob("*.json"))
    for path in files:
        rows = read_json(path)
        if not isinstance(rows, list):
            raise LengthDataError(f"{path}: must hold a JSON list of outputs (got {type(rows).__name__})")
        for index, row in enumerate(rows):
            instruction = json_field(row, ["instruction"], path, f"row {index}", str)
            prompts.setdefault(instruction, []).append(json_field(row, ["output"], path, f"row {index}", str))
    return list(prompts), list(prompts.values()), len(files)


def load_answer_lengths(dataset: str, data_dir: str | Path | None = None) -> AnswerLengths:
    """Prompts of ``dataset`` ("mt-bench": each question's first turn; "alpaca-eval": each instruction) with the
    Llama-2 token count of every model's answer (special tokens not counted). Empty answers are skipped, and so
    is a prompt left with none. ``data_dir`` defaults to the shared data directory (``$SEMSCHED_DATA_DIR``)."""
    if dataset not in DATASETS:
        raise LengthDataError(f"dataset: must be one of {', '.join(DATASETS)} (got {dataset!r})")
    directory = Path(data_dir) if data_dir is not None else shared_data_dir()
    if not directory.is_dir():
        raise LengthDataError(f"data directory {directory} does not exist (set SEMSCHED_DATA_DIR)")
    prompts, answers, num_models = _mt_bench(directory) if dataset == "mt-bench" else _alpaca_eval(directory)
    if num_models == 0:
        raise LengthDataError(f"{directory}: no model answer files for {dataset}")
    tokenizer = answer_tokenizer(directory)
    flat = [text for texts in answers for text in texts if text.strip()]
    counts = iter(len(encoding.ids) for encoding in tokenizer.encode_batch(flat, add_special_tokens=False))
    kept_prompts, kept_lengths = [], []
    for prompt, texts in zip(prompts, answers, strict=True):
        lengths = np.array([next(counts) for text in texts if text.strip()], dtype=np.int64)
        lengths = lengths[lengths > 0]
        if lengths.size:
            kept_prompts.append(prompt)
            kept_lengths.append(lengths)
    return AnswerLengths(dataset, tuple(kept_prompts), tuple(kept_lengths), num_models)


# ---- the predictor ---------------------------------------------------------------------------------------
def _classifier(c: float, seed: int) -> LogisticRegression:
    return LogisticRegression(C=c, max_iter=5000, random_state=seed)


def _check_settings(c: float, training: str) -> None:
    if not (isinstance(c, int | float) and math.isfinite(c) and c > 0):
        raise LengthError(f"c (inverse regularisation): must be a finite number > 0 (got {c!r})")
    if training not in TRAININGS:
        raise LengthError(f"training: must be one of {', '.join(TRAININGS)} (got {training!r})")


def training_rows(data: AnswerLengths, buckets: LengthBuckets, training: Training,
                  indices: Sequence[int] | np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(prompt index, bucket label, weight) rows to fit on. ``answers``: one row per answer, with the answers of
    one prompt in one bucket merged into a row weighted by their number (the same loss, ~4x fewer rows);
    ``median``: one row per prompt, its median answer's bucket, weight 1."""
    chosen = np.arange(len(data)) if indices is None else np.asarray(indices, dtype=np.int64)
    if training == "answers":
        owners, lengths = data.pairs(chosen)
        keys, counts = np.unique(owners * buckets.num_buckets + buckets.bucket_of(lengths), return_counts=True)
        return keys // buckets.num_buckets, keys % buckets.num_buckets, counts.astype(np.float64)
    medians = np.array([max(1, int(round(float(np.median(data.lengths[i]))))) for i in chosen], dtype=np.int64)
    return chosen, buckets.bucket_of(medians), np.ones(chosen.size)


def _fit(vectors: np.ndarray, rows: tuple[np.ndarray, np.ndarray, np.ndarray], c: float,
         seed: int) -> LogisticRegression:
    owners, labels, weights = rows
    return _classifier(c, seed).fit(vectors[owners], labels, sample_weight=weights)


def _full_probs(model: LogisticRegression, vectors: np.ndarray, num_buckets: int) -> np.ndarray:
    """Probability of every bucket (0 for a bucket the model never saw), float64 rows summing to 1."""
    probabilities = np.zeros((vectors.shape[0], num_buckets))
    probabilities[:, np.asarray(model.classes_, dtype=np.int64)] = model.predict_proba(vectors)
    return np.asarray(probabilities / probabilities.sum(axis=1, keepdims=True))  # float32 inputs, float32 sums


class LengthBucketPredictor:
    """Prompt texts -> probability of each output-length bucket -> :class:`LengthDistribution` per prompt."""

    def __init__(self, buckets: LengthBuckets | None = None, *, c: float = DEFAULT_C,
                 training: Training = "answers", seed: int = 0, embedder: Embedder | None = None) -> None:
        _check_settings(c, training)
        self.buckets = buckets or LengthBuckets()
        self.c, self.training, self.seed = float(c), training, seed
        self.embedder = embedder or Embedder()
        self._model: LogisticRegression | None = None
        self.metadata: dict[str, Any] = {}

    def fit(self, data: AnswerLengths) -> LengthBucketPredictor:
        return self.fit_embeddings(self.embedder.encode(data.prompts), data)

    def fit_embeddings(self, vectors: np.ndarray, data: AnswerLengths) -> LengthBucketPredictor:
        """Fit on precomputed prompt embeddings (row ``i`` embeds ``data.prompts[i]``)."""
        self._model = _fit(vectors, training_rows(data, self.buckets, self.training), self.c, self.seed)
        return self

    def predict_proba_embeddings(self, vectors: np.ndarray) -> np.ndarray:
        if self._model is None:
            raise LengthModelError("the length predictor is not trained: call fit() or load a model directory")
        return _full_probs(self._model, vectors, self.buckets.num_buckets)

    def predict_proba(self, texts: Sequence[str]) -> np.ndarray:
        """(n, num_buckets) probabilities, one row per prompt."""
        return self.predict_proba_embeddings(self.embedder.encode(texts))

    def predict_buckets(self, texts: Sequence[str]) -> np.ndarray:
        """The most probable bucket of each prompt."""
        return np.asarray(np.argmax(self.predict_proba(texts), axis=1))

    def predict_distribution(self, texts: Sequence[str]) -> list[LengthDistribution]:
        return [self.buckets.distribution_from_probs(row) for row in self.predict_proba(texts)]

    def save(self, directory: str | Path) -> Path:
        """Write the model and its settings (and ``metadata``, e.g. cross-validation figures) to ``directory``."""
        if self._model is None:
            raise LengthModelError("the length predictor is not trained: nothing to save")
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        joblib.dump(self._model, out / MODEL_FILE)
        meta = {"format": FORMAT_VERSION, "max_output": self.buckets.max_output,
                "num_buckets": self.buckets.num_buckets, "points_per_bucket": self.buckets.points_per_bucket,
                "c": self.c, "training": self.training, "seed": self.seed, **self.metadata}
        (out / META_FILE).write_text(json.dumps(meta, indent=2) + "\n")
        return out

    @classmethod
    def load(cls, directory: str | Path, embedder: Embedder | None = None) -> LengthBucketPredictor:
        source = Path(directory)
        if not (source / MODEL_FILE).is_file() or not (source / META_FILE).is_file():
            raise LengthModelError(f"{source}: not a length model directory (it needs {MODEL_FILE} and "
                                   f"{META_FILE})")
        meta = json.loads((source / META_FILE).read_text())
        if meta.get("format") != FORMAT_VERSION:
            raise LengthModelError(f"{source}: model format {meta.get('format')!r}, this semsched reads "
                                   f"{FORMAT_VERSION}: train it again")
        settings = ("format", "max_output", "num_buckets", "points_per_bucket", "c", "training", "seed")
        buckets = LengthBuckets(meta["max_output"], meta["num_buckets"], meta["points_per_bucket"])
        model = cls(buckets, c=meta["c"], training=meta["training"], seed=meta["seed"], embedder=embedder)
        model._model = joblib.load(source / MODEL_FILE)
        model.metadata = {k: v for k, v in meta.items() if k not in settings}
        return model


# ---- held-out figures ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LengthMetrics:
    """Agreement of predictions with real answers, one row per answer: bucket accuracy, mean absolute bucket
    error, and seed 000's error notion, mean |predicted mean length - true length| / max_output (true lengths
    capped at max_output)."""

    name: str
    n: int
    accuracy: float
    mean_abs_bucket_error: float
    mean_length_error: float


def length_metrics(name: str, buckets: LengthBuckets, true_lengths: np.ndarray, predicted_buckets: np.ndarray,
                   predicted_means: np.ndarray) -> LengthMetrics:
    true_buckets = buckets.bucket_of(true_lengths)
    true_capped = buckets.capped(true_lengths)
    return LengthMetrics(
        name=name,
        n=int(true_buckets.size),
        accuracy=float(np.mean(predicted_buckets == true_buckets)),
        mean_abs_bucket_error=float(np.mean(np.abs(predicted_buckets - true_buckets))),
        mean_length_error=float(np.mean(np.abs(predicted_means - true_capped)) / buckets.max_output),
    )


@dataclass(frozen=True)
class LengthCVReport:
    """Held-out rows of :func:`cross_validate`. ``rows``: the predictor, ``majority`` (always the training folds'
    most common bucket), ``prior`` (the training folds' bucket frequencies for every prompt), seed 000's noisy
    oracle at two settings: ``oracle (same accuracy)`` mislabels as many answers as the predictor got wrong,
    ``oracle (same length error)`` has the predictor's mean length error (the point of seed 000's error sweep
    the predictor stands at), and ``prompt-histogram`` (each prompt's own answers' bucket frequencies,
    in-sample: roughly the best any predictor that sees only the prompt can do)."""

    dataset: str
    prompts: int
    answers: int
    folds: int
    buckets: LengthBuckets
    training: str
    c: float
    oracle_error_same_accuracy: float
    oracle_error_same_length: float
    rows: tuple[LengthMetrics, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"dataset": self.dataset, "prompts": self.prompts, "answers": self.answers, "folds": self.folds,
                "max_output": self.buckets.max_output, "num_buckets": self.buckets.num_buckets,
                "training": self.training, "c": self.c,
                "oracle_error_same_accuracy": self.oracle_error_same_accuracy,
                "oracle_error_same_length": self.oracle_error_same_length,
                "rows": [asdict(row) for row in self.rows]}


def cross_validate(data: AnswerLengths, buckets: LengthBuckets | None = None, *, folds: int = 5,
                   c: float = DEFAULT_C, training: Training = "answers", seed: int = 0,
                   embedder: Embedder | None = None, vectors: np.ndarray | None = None) -> LengthCVReport:
    """Held-out metrics grouped by prompt: the prompts are split into ``folds`` folds, and every answer of a
    prompt is predicted by a model trained on the other folds' prompts. ``vectors`` are the prompts' embeddings
    (computed with ``embedder`` when not given)."""
    buckets = buckets or LengthBuckets()
    _check_settings(c, training)
    if not _is_int(folds) or not 2 <= folds <= len(data):
        raise LengthError(f"folds: must be an integer from 2 to the number of prompts ({len(data)}) "
                          f"(got {folds!r})")
    if vectors is None:
        vectors = (embedder or Embedder()).encode(data.prompts)
    width = buckets.num_buckets
    predicted = np.zeros((len(data), width))
    majority = np.zeros((len(data), width))
    prior = np.zeros((len(data), width))
    for train, test in KFold(n_splits=folds, shuffle=True, random_state=seed).split(np.arange(len(data))):
        model = _fit(vectors, training_rows(data, buckets, training, train), c, seed)
        predicted[test] = _full_probs(model, vectors[test], width)
        frequencies = np.bincount(buckets.bucket_of(data.pairs(train)[1]), minlength=width).astype(np.float64)
        prior[test] = frequencies / frequencies.sum()
        majority[test, int(np.argmax(frequencies))] = 1.0
    owners, lengths = data.pairs()
    histogram = np.zeros((len(data), width))
    np.add.at(histogram, (owners, buckets.bucket_of(lengths)), 1.0)
    histogram /= histogram.sum(axis=1, keepdims=True)

    def row(name: str, probs: np.ndarray) -> LengthMetrics:
        per_answer = probs[owners]
        return length_metrics(name, buckets, lengths, np.argmax(per_answer, axis=1), per_answer @ buckets.means)

    model_row = row(f"predictor ({training})", predicted)
    same_accuracy = 1.0 - model_row.accuracy
    same_length = matching_oracle_error(buckets, lengths, model_row.mean_length_error, seed)
    rows = (model_row, row("majority", majority), row("prior", prior),
            _oracle_metrics("oracle (same accuracy)", buckets, lengths, same_accuracy, seed),
            _oracle_metrics("oracle (same length error)", buckets, lengths, same_length, seed),
            row("prompt-histogram", histogram))
    return LengthCVReport(data.dataset, len(data), int(lengths.size), folds, buckets, training, float(c),
                          same_accuracy, same_length, rows)


def _oracle_metrics(name: str, buckets: LengthBuckets, lengths: np.ndarray, error: float,
                    seed: int) -> LengthMetrics:
    predicted = NoisyBucketOracle(buckets, error, seed).predict_buckets(lengths)
    return length_metrics(name, buckets, lengths, predicted, buckets.means[predicted])


def matching_oracle_error(buckets: LengthBuckets, lengths: np.ndarray, mean_length_error: float,
                          seed: int = 0, *, tolerance: float = 1e-3) -> float:
    """The oracle error (0..1) whose mean length error on ``lengths`` is ``mean_length_error`` (by bisection; the
    oracle's error grows with its setting). 0 or 1 when the target is beyond what the oracle gives there."""
    def achieved(error: float) -> float:
        return _oracle_metrics("", buckets, lengths, error, seed).mean_length_error

    low, high = 0.0, 1.0
    if achieved(low) >= mean_length_error:
        return low
    if achieved(high) <= mean_length_error:
        return high
    while high - low > tolerance:
        middle = (low + high) / 2
        if achieved(middle) < mean_length_error:
            low = middle
        else:
            high = middle
    return (low + high) / 2


# ---- cost of a prediction --------------------------------------------------------------------------------
@dataclass(frozen=True)
class PredictionCost:
    """Wall time of embedding + classification of one batch (median of the timed batches)."""

    batch_size: int
    seconds_per_batch: float
    seconds_per_request: float


def measure_cost(predictor: LengthBucketPredictor, texts: Sequence[str],
                 batch_sizes: Sequence[int] = DEFAULT_BATCH_SIZES, *, repeats: int = 5) -> list[PredictionCost]:
    """Time ``predict_proba`` with an uncached embedder (on the CPU, as :class:`Embedder` runs) for each batch
    size: one warm-up batch, then ``repeats`` batches of different texts (``texts`` reused cyclically)."""
    if not texts:
        raise LengthError("texts: need at least one text to time")
    if not batch_sizes or any(not _is_int(size) or size < 1 for size in batch_sizes):
        raise LengthError(f"batch_sizes: must be integers >= 1 (got {list(batch_sizes)!r})")
    if not _is_int(repeats) or repeats < 1:
        raise LengthError(f"repeats: must be an integer >= 1 (got {repeats!r})")
    embedder = Embedder(cache=False, batch_size=max(batch_sizes))
    results = []
    cursor = 0
    for size in batch_sizes:
        seconds = []
        for attempt in range(repeats + 1):
            batch = [texts[(cursor + k) % len(texts)] for k in range(size)]
            cursor += size
            start = time.perf_counter()
            predictor.predict_proba_embeddings(embedder.encode(batch))
            if attempt > 0:  # the first batch of a size warms up (model load, first-shape kernels)
                seconds.append(time.perf_counter() - start)
        per_batch = float(np.median(seconds))
        results.append(PredictionCost(size, per_batch, per_batch / size))
    return results
