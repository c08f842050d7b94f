"""How well online output-length predictors predict real answers, and what a prediction costs (issue 16).

One model's answer file (AlpacaEval ``model_outputs.json`` or MT-Bench ``model_answer/<model>.jsonl``) is the
stream of requests to predict; history files are answers already known. Two modes:

* ``online``: the file's requests in file order. Request ``i`` is predicted with the history files (observed
  first, in one batch, files in the order given) and the file's rows before ``i``; it is observed right after
  its prediction, so no request is ever predicted from itself or a later one.
* ``cross-model``: the history is the *other* models' answers to the same benchmark (the history files, or every
  other file of that benchmark in the shared data when none are given), observed first in name order; then the
  whole file is predicted in one batch, observing nothing of it. Every prompt has been answered by other models.

With the default capacity (10,000 rows) the history keeps the newest rows observed (FIFO), e.g. the last ~12 of
22 AlpacaEval files in cross-model mode.

Per predictor: mean CRPS, bucket log-loss, bucket accuracy and MAE of the mean (:mod:`semsched.predict.scoring`),
and prediction latency per request, *excluding the embedding forward pass* (embeddings are computed once, up
front, and disk-cached): ``batched_ms`` is one ``predict`` of every prompt of the file divided by their number
(online: against the final history), ``single_ms`` the mean time of a one-prompt ``predict`` (online: each step
of the run; cross-model: the first :data:`SINGLE_SAMPLE` prompts one by one); ``observe_s`` is the total time
spent in ``observe`` (refits included). The embedding's own cost is measured apart (:func:`embedding_cost`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from semsched.core.errors import SemschedError
from semsched.core.request import LengthDistribution
from semsched.predict.embed import Embedder
from semsched.predict.history import TextEncoder, prompts_of
from semsched.predict.length_registry import make_length_predictor, parse_length_spec
from semsched.predict.online import OnlineLengthPredictor, Prompts
from semsched.predict.scoring import ScoreBuckets, Scores, score
from semsched.workloads.answers import AnswerFile, answer_files, load_answer_file

Mode = Literal["online", "cross-model"]
MODES: tuple[Mode, ...] = ("online", "cross-model")
DEFAULT_PREDICTORS = ("semantic-knn", "input-length", "histogram", "regressor", "buckets")
SINGLE_SAMPLE = 100
EMBEDDING_BATCH, EMBEDDING_SINGLES = 64, 16


class LengthsEvalError(SemschedError):
    """Bad evaluation settings (mode, predictor list, a history file that is the evaluated file)."""


@dataclass(frozen=True)
class PredictorResult:
    """One predictor's scores and costs over one file (module docstring)."""

    spec: str
    scores: Scores
    batched_ms: float
    single_ms: float
    observe_s: float

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self.scores), "batched_ms_per_request": self.batched_ms,
                "single_ms_per_request": self.single_ms, "observe_s": self.observe_s}


@dataclass(frozen=True)
class EmbeddingCost:
    """The embedding forward pass (uncached): ms per request in batches of ``batch_size`` and one at a time
    (mean over ``singles`` prompts)."""

    batched_ms: float
    single_ms: float
    batch_size: int
    singles: int

    def as_dict(self) -> dict[str, Any]:
        return {"batched_ms_per_request": self.batched_ms, "single_ms_per_request": self.single_ms,
                "batch_size": self.batch_size, "singles": self.singles}


@dataclass(frozen=True)
class LengthsEvalReport:
    data: Path
    model: str
    format: str
    mode: Mode
    requests: int
    history_files: tuple[Path, ...]
    history_rows: int
    results: tuple[PredictorResult, ...]
    embedding: EmbeddingCost | None

    def as_dict(self) -> dict[str, Any]:
        """Predictor spec -> its metrics, plus ``embedding`` (absent costs are ``None``)."""
        document: dict[str, Any] = {result.spec: result.as_dict() for result in self.results}
        document["embedding"] = self.embedding.as_dict() if self.embedding is not None else None
        return document


@dataclass(frozen=True)
class Stream:
    """Prompts (embedded) with their true output lengths."""

    prompts: Prompts
    output_tokens: npt.NDArray[np.int64]

    @classmethod
    def of(cls, answers: Sequence[AnswerFile], encoder: TextEncoder) -> Stream:
        parts = [prompts_of(a, encoder) for a in answers]
        if not parts:
            return cls(Prompts((), np.zeros(0, np.int64), np.zeros((0, 0), np.float32)), np.zeros(0, np.int64))
        texts = tuple(t for p in parts for t in p.texts)
        prompts = Prompts(texts, np.concatenate([p.prompt_tokens for p in parts]),
                          np.concatenate([p.vectors for p in parts]).astype(np.float32, copy=False))
        return cls(prompts, np.concatenate([a.output_tokens for a in answers]))


def history_paths(data: AnswerFile, mode: Mode, given: Sequence[str | Path] | None) -> list[Path]:
    """The history files of a run: those given, else (cross-model) every other file of the benchmark."""
    target = data.path.resolve()
    if given:
        paths = [Path(p) for p in given]
        for path in paths:
            if path.resolve() == target:
                raise LengthsEvalError(f"--history: {path} is the evaluated file itself")
        return paths
    if mode == "online":
        return []
    return [p for p in answer_files(data.format) if p.resolve() != target]


def evaluate(data: str | Path, *, mode: Mode = "online", history: Sequence[str | Path] | None = None,
             predictors: Sequence[str] = DEFAULT_PREDICTORS, encoder: TextEncoder | None = None,
             embedding_encoder: TextEncoder | None = None, buckets: ScoreBuckets | None = None
             ) -> LengthsEvalReport:
    """Score every predictor on one answer file (module docstring). ``encoder`` embeds the prompts (default: a
    disk-cached :class:`Embedder`); ``embedding_encoder``, when given, is timed uncached (:func:`embedding_cost`).
    A file of the wrong format is an :class:`~semsched.workloads.answers.AnswerDataError` naming it."""
    check_settings(mode, predictors)
    target = load_answer_file(data)
    paths = history_paths(target, mode, history)
    return evaluate_loaded(target, [load_answer_file(p) for p in paths], mode=mode, predictors=predictors,
                           encoder=encoder, embedding_encoder=embedding_encoder, buckets=buckets)


def check_settings(mode: str, predictors: Sequence[str]) -> None:
    """The mode and every predictor spec (parsed, nothing built), so that a typo fails before any file is read."""
    if mode not in MODES:
        raise LengthsEvalError(f"mode: must be one of {', '.join(MODES)} (got {mode!r})")
    if not predictors:
        raise LengthsEvalError("predictors: give at least one")
    for spec in predictors:
        parse_length_spec(spec)


def evaluate_loaded(target: AnswerFile, known: Sequence[AnswerFile], *, mode: Mode = "online",
                    predictors: Sequence[str] = DEFAULT_PREDICTORS, encoder: TextEncoder | None = None,
                    embedding_encoder: TextEncoder | None = None, buckets: ScoreBuckets | None = None
                    ) -> LengthsEvalReport:
    """:func:`evaluate` on answer files already loaded (``known``: the history files, observed in that order)."""
    check_settings(mode, predictors)
    encoder = encoder or Embedder()
    stream, past = Stream.of([target], encoder), Stream.of(known, encoder)
    results = tuple(_run(spec, mode, stream, past, encoder, buckets) for spec in predictors)
    cost = embedding_cost(target.prompts, embedding_encoder) if embedding_encoder is not None else None
    return LengthsEvalReport(data=target.path, model=target.model, format=target.format, mode=mode,
                             requests=len(target), history_files=tuple(a.path for a in known),
                             history_rows=len(past.output_tokens), results=results, embedding=cost)


def _run(spec: str, mode: Mode, stream: Stream, past: Stream, encoder: TextEncoder,
         buckets: ScoreBuckets | None) -> PredictorResult:
    predictor = make_length_predictor(spec, encoder)
    start = time.perf_counter()
    if len(past.output_tokens):
        predictor.observe(past.prompts, past.output_tokens)
    observe_s = time.perf_counter() - start
    if mode == "online":
        predictions, single_s, online_observe_s = run_online(predictor, stream)
        observe_s += online_observe_s
        batched_s = _timed_batch(predictor, stream.prompts)[1]
    else:
        predictions, batched_s = _timed_batch(predictor, stream.prompts)
        single_s = _timed_singles(predictor, stream.prompts, SINGLE_SAMPLE)
    n = len(stream.output_tokens)
    return PredictorResult(spec=spec, scores=score(predictions, stream.output_tokens, buckets),
                           batched_ms=batched_s * 1e3 / n, single_ms=single_s * 1e3, observe_s=observe_s)


def run_online(predictor: OnlineLengthPredictor, stream: Stream
               ) -> tuple[list[LengthDistribution], float, float]:
    """Predict each request alone, then observe it: the predictions, the mean seconds per predict and the total
    seconds spent observing."""
    predictions: list[LengthDistribution] = []
    predict_s = observe_s = 0.0
    for i in range(len(stream.output_tokens)):
        one = stream.prompts.take([i])
        start = time.perf_counter()
        predictions.extend(predictor.predict(one))
        middle = time.perf_counter()
        predictor.observe(one, stream.output_tokens[i:i + 1])
        predict_s += middle - start
        observe_s += time.perf_counter() - middle
    return predictions, predict_s / max(len(predictions), 1), observe_s


def _timed_batch(predictor: OnlineLengthPredictor, prompts: Prompts) -> tuple[list[LengthDistribution], float]:
    start = time.perf_counter()
    predictions = predictor.predict(prompts)
    return predictions, time.perf_counter() - start


def _timed_singles(predictor: OnlineLengthPredictor, prompts: Prompts, sample: int) -> float:
    """Mean seconds of a one-prompt predict over the first ``sample`` prompts."""
    count = min(sample, len(prompts))
    singles = [prompts.take([i]) for i in range(count)]
    start = time.perf_counter()
    for one in singles:
        predictor.predict(one)
    return (time.perf_counter() - start) / max(count, 1)


def embedding_cost(texts: Sequence[str], encoder: TextEncoder, *, batch_size: int = EMBEDDING_BATCH,
                   singles: int = EMBEDDING_SINGLES) -> EmbeddingCost:
    """Time ``encoder`` (give it uncached): one batch of the first ``batch_size`` texts, then the first
    ``singles`` texts one at a time; one untimed call first loads the model."""
    encoder.encode(texts[:1])
    batch = list(texts[:batch_size])
    start = time.perf_counter()
    encoder.encode(batch)
    batched_s = (time.perf_counter() - start) / len(batch)
    chosen = list(texts[:singles])
    start = time.perf_counter()
    for text in chosen:
        encoder.encode([text])
    single_s = (time.perf_counter() - start) / len(chosen)
    return EmbeddingCost(batched_ms=batched_s * 1e3, single_ms=single_s * 1e3, batch_size=len(batch),
                         singles=len(chosen))
