"""History-lookup length predictors (seed 002 §3.1, §4.3.1): the distribution of what similar requests produced.

* ``semantic-knn`` (:class:`SemanticKnnPredictor`, the paper's predictor): the empirical output-length distribution
  of the finished requests whose prompt embedding has cosine similarity >= ``threshold`` (0.8, the paper's best,
  Fig. 13a) with the prompt's.
* ``input-length`` (:class:`InputLengthPredictor`, the paper's "semantic-unaware history-based predictor"): the
  same, with prompt *lengths* as the similarity: ``min(I, I') / max(I, I') >= threshold``.
* ``histogram`` (:class:`HistogramPredictor`): every prompt gets the history's global histogram.

**The neighbour rule** (both ``semantic-knn`` and ``input-length``), for each prompt:

1. the history rows with similarity >= ``threshold``, if there are at least ``min_neighbours`` (5) of them;
2. else those plus the warm-up corpus rows with similarity >= ``threshold``, if together at least
   ``min_neighbours``;
3. else the ``fallback_k`` (20) most similar rows of history and warm-up corpus together, whatever their
   similarity (all of them if there are fewer);
4. with neither history nor corpus: :data:`~semsched.predict.history.DEFAULT_PRIOR`.

A batch of prompts costs one matrix product against the history (and one against the corpus), in chunks of
:data:`CHUNK_ROWS` prompts to bound memory; each step of the rule then takes all the prompts it concerns at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from semsched.core.request import LengthDistribution
from semsched.predict.history import DEFAULT_PRIOR, Corpus, FinishedHistory, distribution_of
from semsched.predict.length_registry import PredictorConfig, check_float, check_int, register_length_predictor
from semsched.predict.online import Prompts

CHUNK_ROWS = 256
MAX_NEIGHBOURS = 1_000_000


@dataclass(frozen=True)
class NeighbourConfig(PredictorConfig):
    """The neighbour rule's parameters (module docstring)."""

    threshold: float = field(default=0.8, metadata={"doc": "similarity a neighbour needs, -1 to 1"})
    min_neighbours: int = field(default=5, metadata={"doc": "fewer qualifying rows: add warm-up, then top-k"})
    fallback_k: int = field(default=20, metadata={"doc": "most similar rows used when too few qualify"})

    def __post_init__(self) -> None:
        super().__post_init__()
        check_float("threshold", self.threshold, -1.0, 1.0)
        check_int("min_neighbours", self.min_neighbours, 1, MAX_NEIGHBOURS)
        check_int("fallback_k", self.fallback_k, 1, MAX_NEIGHBOURS)


class NeighbourPredictor:
    """The neighbour rule over a :class:`FinishedHistory` and a warm-up :class:`Corpus`; subclasses say what
    similarity is (:meth:`similarity`: one row per prompt, one column per stored row)."""

    name = "neighbours"

    def __init__(self, config: NeighbourConfig, warmup: Corpus | None = None) -> None:
        self.config = config
        self.history = FinishedHistory(config.capacity)
        self.warmup = warmup if warmup is not None else Corpus.empty()

    def similarity(self, prompts: Prompts, rows: Corpus) -> npt.NDArray[np.float32]:
        raise NotImplementedError

    def observe(self, prompts: Prompts, output_tokens: npt.NDArray[np.int64]) -> None:
        self.history.add(prompts.vectors, prompts.prompt_tokens, output_tokens)

    def predict(self, prompts: Prompts) -> list[LengthDistribution]:
        history = self.history.rows()
        predictions: list[LengthDistribution] = []
        for start in range(0, len(prompts), CHUNK_ROWS):
            chunk = prompts.take(np.arange(start, min(start + CHUNK_ROWS, len(prompts))))
            predictions.extend(self._predict_chunk(chunk, history))
        return predictions

    def _predict_chunk(self, prompts: Prompts, history: Corpus) -> list[LengthDistribution]:
        near_history = self._similarity_or_empty(prompts, history)
        near_warmup = self._similarity_or_empty(prompts, self.warmup)
        return [
            _distribution(lengths)
            for lengths in neighbour_lengths(near_history, history.output_tokens, near_warmup,
                                             self.warmup.output_tokens, self.config)
        ]

    def _similarity_or_empty(self, prompts: Prompts, rows: Corpus) -> npt.NDArray[np.float32]:
        if len(rows) == 0:
            return np.zeros((len(prompts), 0), dtype=np.float32)
        return self.similarity(prompts, rows)


def neighbour_lengths(near_history: npt.NDArray[np.float32], history_lengths: npt.NDArray[np.int64],
                      near_warmup: npt.NDArray[np.float32], warmup_lengths: npt.NDArray[np.int64],
                      config: NeighbourConfig) -> list[npt.NDArray[np.int64] | None]:
    """The output lengths the neighbour rule picks for each prompt (``None``: nothing stored, use the prior).
    ``near_*[i, j]``: similarity of prompt ``i`` to stored row ``j``. Each step of the rule is applied to all
    the prompts it concerns at once."""
    qualify_history = near_history >= config.threshold
    qualify_warmup = near_warmup >= config.threshold
    count_history = qualify_history.sum(axis=1)
    count_both = count_history + qualify_warmup.sum(axis=1)
    history_only = count_history >= config.min_neighbours
    both = ~history_only & (count_both >= config.min_neighbours)
    fallback = ~history_only & ~both
    all_lengths = np.concatenate([history_lengths, warmup_lengths])
    picked: list[npt.NDArray[np.int64] | None] = [None] * len(near_history)
    _put(picked, history_only, qualify_history[history_only], history_lengths)
    if both.any():  # concatenating costs a copy: only for the prompts that need it
        _put(picked, both, np.concatenate([qualify_history[both], qualify_warmup[both]], axis=1), all_lengths)
    if fallback.any() and all_lengths.size:
        near = np.concatenate([near_history[fallback], near_warmup[fallback]], axis=1)
        k = min(config.fallback_k, all_lengths.size)
        nearest = np.argpartition(-near, k - 1, axis=1)[:, :k]
        for row, columns in zip(np.flatnonzero(fallback), nearest, strict=True):
            picked[row] = all_lengths[columns]
    return picked


def _put(picked: list[npt.NDArray[np.int64] | None], rows: npt.NDArray[np.bool_],
         chosen: npt.NDArray[np.bool_], lengths: npt.NDArray[np.int64]) -> None:
    """``picked[r]`` = the lengths of the columns ``chosen`` marks in the r-th of ``rows``."""
    if not rows.any():
        return
    which, columns = np.nonzero(chosen)
    groups = np.split(lengths[columns], np.cumsum(np.bincount(which, minlength=len(chosen)))[:-1])
    for row, group in zip(np.flatnonzero(rows), groups, strict=True):
        picked[row] = group


def _distribution(lengths: npt.NDArray[np.int64] | None) -> LengthDistribution:
    return DEFAULT_PRIOR if lengths is None else distribution_of(lengths)


@register_length_predictor
class SemanticKnnPredictor(NeighbourPredictor):
    """Seed 002's semantic-aware history-based predictor: cosine similarity of the prompts' embeddings (rows are
    L2-normalised, so a dot product). Cold start: the warm-up corpus (rule steps 2-3), else the default prior."""

    name = "semantic-knn"
    summary = "distribution of finished requests with a similar prompt embedding (seed 002)"
    config_cls = NeighbourConfig

    def similarity(self, prompts: Prompts, rows: Corpus) -> npt.NDArray[np.float32]:
        return np.asarray(prompts.vectors @ rows.vectors.T, dtype=np.float32)


@register_length_predictor
class InputLengthPredictor(NeighbourPredictor):
    """Seed 002's semantic-unaware history-based baseline: similarity of prompt lengths,
    ``min(I, I') / max(I, I')``. Cold start: the warm-up corpus (rule steps 2-3), else the default prior."""

    name = "input-length"
    summary = "distribution of finished requests with a similar prompt length (seed 002's baseline)"
    config_cls = NeighbourConfig
    #: reads prompt lengths only: a run (or a trace) without prompt texts can use it
    reads_text = False

    def similarity(self, prompts: Prompts, rows: Corpus) -> npt.NDArray[np.float32]:
        mine = prompts.prompt_tokens.astype(np.float32)[:, None]
        theirs = rows.prompt_tokens.astype(np.float32)[None, :]
        return np.asarray(np.minimum(mine, theirs) / np.maximum(mine, theirs), dtype=np.float32)


@dataclass(frozen=True)
class HistogramConfig(PredictorConfig):
    min_history: int = field(default=5, metadata={"doc": "history rows needed before the warm-up is dropped"})

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("min_history", self.min_history, 1, MAX_NEIGHBOURS)


@register_length_predictor
class HistogramPredictor:
    """Every prompt gets one distribution: the histogram of the history's output lengths once it holds
    ``min_history`` rows (any rows, without a warm-up corpus); before that the warm-up corpus's histogram, and
    the default prior while nothing is known. The distribution is computed once per change of the history."""

    name = "histogram"
    summary = "the global histogram of finished requests' output lengths"
    config_cls = HistogramConfig
    #: reads no prompt at all: a run (or a trace) without prompt texts can use it
    reads_text = False

    def __init__(self, config: HistogramConfig, warmup: Corpus | None = None) -> None:
        self.config = config
        self.history = FinishedHistory(config.capacity)
        self.warmup = warmup if warmup is not None else Corpus.empty()
        self._cached: LengthDistribution | None = None

    def observe(self, prompts: Prompts, output_tokens: npt.NDArray[np.int64]) -> None:
        self.history.add(prompts.vectors, prompts.prompt_tokens, output_tokens)
        self._cached = None

    def predict(self, prompts: Prompts) -> list[LengthDistribution]:
        if self._cached is None:
            self._cached = self._histogram()
        return [self._cached] * len(prompts)

    def _histogram(self) -> LengthDistribution:
        if len(self.history) >= self.config.min_history or (len(self.history) and not len(self.warmup)):
            return distribution_of(self.history.rows().output_tokens)
        if len(self.warmup):
            return distribution_of(self.warmup.output_tokens)
        return DEFAULT_PRIOR
