"""Model-based length predictors refit on the history (seed 002 §4.3.1's "LLM-based predictor" stand-ins).

Both learn from the warm-up corpus and the FIFO history together, refit inside :meth:`observe` once
``refit_every`` (100) requests finished since the last fit, so :meth:`predict` only applies the current model
(training time is reported apart from prediction time). Cold start: a model fitted on the warm-up corpus at
construction when one is given; else the default prior until ``min_rows`` (10) rows were observed.

* ``regressor`` (:class:`RegressorPredictor`): ridge regression of log output length on the prompt embedding; a
  *point* prediction, ``exp`` of the predicted log length (a median estimate), as the DistilBERT-style
  predictors of SSJF give one number.
* ``buckets`` (:class:`BucketsPredictor`): seed 000's :class:`~semsched.predict.length.LengthBucketPredictor`
  (logistic regression over equal-width buckets up to ``max_output``), whose bucket probabilities become a
  mixture of uniform distributions inside the buckets (:meth:`LengthBuckets.distribution_from_probs`). The
  defaults, 10 buckets up to 1,000 tokens, stretch seed 000's 500-token cap: AlpacaEval answers run longer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from semsched.core.request import LengthDistribution
from semsched.predict.history import DEFAULT_PRIOR, Corpus, FinishedHistory
from semsched.predict.length import (
    DEFAULT_C,
    MAX_BUCKETS,
    MIN_BUCKETS,
    AnswerLengths,
    LengthBucketPredictor,
    LengthBuckets,
)
from semsched.predict.length_registry import PredictorConfig, check_float, check_int, register_length_predictor
from semsched.predict.online import Prompts

MAX_ROWS = 10_000_000
MAX_OUTPUT_TOKENS = 1_000_000


@dataclass(frozen=True)
class RefitConfig(PredictorConfig):
    refit_every: int = field(default=100, metadata={"doc": "finished requests between refits"})
    min_rows: int = field(default=10, metadata={"doc": "rows needed for a first fit (before: the prior)"})

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("refit_every", self.refit_every, 1, MAX_ROWS)
        check_int("min_rows", self.min_rows, 2, MAX_ROWS)


class RefittingPredictor:
    """History + warm-up corpus + a model refit every ``refit_every`` observations (module docstring)."""

    name = "refitting"

    def __init__(self, config: RefitConfig, warmup: Corpus | None = None) -> None:
        self.refit_config = config
        self.history = FinishedHistory(config.capacity)
        self.warmup = warmup if warmup is not None else Corpus.empty()
        self.fitted = False
        self._fitted_at = 0  # history.observed at the last fit
        self.fits = 0
        if len(self.warmup) >= config.min_rows:
            self._refit()

    def observe(self, prompts: Prompts, output_tokens: npt.NDArray[np.int64]) -> None:
        self.history.add(prompts.vectors, prompts.prompt_tokens, output_tokens)
        rows = len(self.history) + len(self.warmup)
        due = self.history.observed - self._fitted_at >= self.refit_config.refit_every
        if rows >= self.refit_config.min_rows and (due or not self.fitted):
            self._refit()

    def predict(self, prompts: Prompts) -> list[LengthDistribution]:
        if not self.fitted:
            return [DEFAULT_PRIOR] * len(prompts)
        return self.apply(prompts.vectors)

    def _refit(self) -> None:
        history = self.history.rows()
        vectors = history.vectors if not len(self.warmup) else (
            self.warmup.vectors if not len(history) else np.concatenate([self.warmup.vectors, history.vectors]))
        lengths = np.concatenate([self.warmup.output_tokens, history.output_tokens])
        self.fit(vectors, lengths)
        self.fitted, self._fitted_at, self.fits = True, self.history.observed, self.fits + 1

    def fit(self, vectors: npt.NDArray[np.float32], output_tokens: npt.NDArray[np.int64]) -> None:
        raise NotImplementedError

    def apply(self, vectors: npt.NDArray[np.float32]) -> list[LengthDistribution]:
        raise NotImplementedError


@dataclass(frozen=True)
class RegressorConfig(RefitConfig):
    alpha: float = field(default=1.0, metadata={"doc": "ridge penalty"})

    def __post_init__(self) -> None:
        super().__post_init__()
        check_float("alpha", self.alpha, 0.0, 1e9)


@register_length_predictor
class RegressorPredictor(RefittingPredictor):
    """Ridge regression of ``log(output tokens)`` on the embedding (closed form, intercept unpenalised); predicts
    the point ``round(exp(prediction))``, at least 1."""

    name = "regressor"
    summary = "ridge regression of log output length on the embedding: a point prediction"
    config_cls = RegressorConfig

    def __init__(self, config: RegressorConfig, warmup: Corpus | None = None) -> None:
        self.config = config
        self._weights = np.zeros(0)
        self._intercept = 0.0
        super().__init__(config, warmup)

    def fit(self, vectors: npt.NDArray[np.float32], output_tokens: npt.NDArray[np.int64]) -> None:
        x = vectors.astype(np.float64)
        y = np.log(output_tokens.astype(np.float64))
        x_mean, y_mean = x.mean(axis=0), y.mean()
        centred = x - x_mean
        gram = centred.T @ centred + self.config.alpha * np.eye(x.shape[1])
        self._weights = np.linalg.solve(gram, centred.T @ (y - y_mean))
        self._intercept = float(y_mean - x_mean @ self._weights)

    def predict_log(self, vectors: npt.NDArray[np.float32]) -> npt.NDArray[np.float64]:
        return np.asarray(vectors.astype(np.float64) @ self._weights + self._intercept)

    def apply(self, vectors: npt.NDArray[np.float32]) -> list[LengthDistribution]:
        points = np.clip(np.rint(np.exp(self.predict_log(vectors))), 1, MAX_OUTPUT_TOKENS).astype(np.int64)
        return [LengthDistribution.point(int(n)) for n in points]


@dataclass(frozen=True)
class BucketsConfig(RefitConfig):
    num_buckets: int = field(default=10, metadata={"doc": f"buckets, {MIN_BUCKETS} to {MAX_BUCKETS}"})
    max_output: int = field(default=1000, metadata={"doc": "last bucket's upper edge (longer: last bucket)"})
    c: float = field(default=DEFAULT_C, metadata={"doc": "inverse regularisation of the logistic regression"})

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("num_buckets", self.num_buckets, MIN_BUCKETS, MAX_BUCKETS)
        check_int("max_output", self.max_output, self.num_buckets, MAX_OUTPUT_TOKENS)
        check_float("c", self.c, 1e-9, 1e9)


@register_length_predictor
class BucketsPredictor(RefittingPredictor):
    """Seed 000's bucket classifier refit on history and warm-up (module docstring). While every row seen falls in
    one bucket (a classifier needs two), that bucket is predicted with certainty."""

    name = "buckets"
    summary = "seed 000's logistic regression over length buckets, refit on the history"
    config_cls = BucketsConfig

    def __init__(self, config: BucketsConfig, warmup: Corpus | None = None) -> None:
        self.config = config
        self.buckets = LengthBuckets(config.max_output, config.num_buckets)
        self.model = LengthBucketPredictor(self.buckets, c=config.c)
        self._only_bucket: int | None = None
        super().__init__(config, warmup)

    def fit(self, vectors: npt.NDArray[np.float32], output_tokens: npt.NDArray[np.int64]) -> None:
        seen = np.unique(self.buckets.bucket_of(output_tokens))
        self._only_bucket = int(seen[0]) if seen.size == 1 else None
        if self._only_bucket is None:
            rows = AnswerLengths("history", ("",) * len(output_tokens), tuple(output_tokens[:, None]), 1)
            self.model.fit_embeddings(vectors, rows)

    def apply(self, vectors: npt.NDArray[np.float32]) -> list[LengthDistribution]:
        if self._only_bucket is not None:
            return [self.buckets.distribution(self._only_bucket)] * len(vectors)
        return [self.buckets.distribution_from_probs(row) for row in self.model.predict_proba_embeddings(vectors)]
