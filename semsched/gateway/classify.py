"""What the gateway predicts from a prompt: its token count, its urgency and its output-length distribution.

:class:`Classifier` batches prompts: a request awaits :meth:`Classifier.classify`; one worker task collects the
prompts that arrive within ``max_wait_ms`` (up to ``max_batch``) and runs the models on the batch in a thread,
so the event loop keeps serving while they run. Waiting prompts are taken most important first (the request's
priority, then arrival), so a burst of BACKGROUND prompts never holds a PREMIUM one back; at most
``max_queued`` wait, and when one more comes the least important of them all goes on at once without a
classification. A classification that takes longer than ``timeout_ms`` (or fails) is not waited for: the
request goes on with what the gateway knows without it (counted, never the request's failure). Finished
requests feed the length predictor's history through :meth:`observe`, applied by the same worker between
batches: off every request's path.

Urgency models (``classifier.urgency``):

* ``keywords``: a word list (``classifier.keywords``: word -> level, 0 most urgent); the most urgent word found
  in the lower-cased prompt wins; none found: no urgency.
* ``ktas:PATH``: a triage model saved by ``semsched urgency train`` (seed 000), given the prompt as the chief
  complaint and nothing else (vital signs unknown: imputed as in training). KTAS level k becomes urgency k - 1.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from semsched.core.errors import SemschedError
from semsched.core.request import LengthDistribution
from semsched.gateway.config import ClassifierConfig, GatewayConfigError
from semsched.gateway.metrics import GatewayMetrics

log = logging.getLogger("semsched.gateway")

#: the most points a predicted distribution may have in ``vllm_xargs`` (``semsched.vllm.xargs``)
MAX_POINTS = 64
#: length predictors that work without prompt embeddings
NO_EMBEDDING_PREDICTORS = frozenset({"input-length", "histogram"})


class _Skipped(Exception):
    """A prompt left unclassified: ``max_queued`` more important prompts were waiting."""


@dataclass(frozen=True)
class Prediction:
    """What the classifier says of one prompt (``None``: no model, or it was not waited for)."""

    prompt_tokens: int
    urgency: int | None = None
    predicted_output: LengthDistribution | None = None


class TokenCounter:
    """Prompt tokens: a ``tokenizer.json`` when configured, else one token per 4 characters."""

    def __init__(self, path: str | None) -> None:
        self._tokenizer: Any = None
        if path is not None:
            from tokenizers import Tokenizer

            try:
                self._tokenizer = Tokenizer.from_file(path)
            except Exception as error:  # tokenizers raises a bare Exception for a bad file
                raise GatewayConfigError(f"classifier.tokenizer: cannot load {path}: {error}") from None

    def count(self, texts: Sequence[str]) -> list[int]:
        if self._tokenizer is None:
            return [max(1, math.ceil(len(text) / 4)) for text in texts]
        return [max(1, len(e.ids)) for e in self._tokenizer.encode_batch(list(texts))]


def compress(distribution: LengthDistribution, points: int = MAX_POINTS) -> LengthDistribution:
    """At most ``points`` support points: each length's probability moves up to the next of ``points`` quantiles
    (so no prediction gets shorter)."""
    if len(distribution.lengths) <= points:
        return distribution
    lengths = np.asarray(distribution.lengths)
    cdf = np.cumsum(distribution.probs)
    positions = np.minimum(np.searchsorted(cdf, (np.arange(points) + 1) / points - 1e-12), len(lengths) - 1)
    cut = sorted({int(n) for n in lengths[positions]} | {int(lengths[-1])})
    mass = np.zeros(len(cut))
    np.add.at(mass, np.searchsorted(cut, lengths), distribution.probs)
    keep = mass > 0
    kept = np.asarray(cut)[keep]
    probs = mass[keep] / mass[keep].sum()
    return LengthDistribution(tuple(int(n) for n in kept), tuple(float(p) for p in probs))


def clip(distribution: LengthDistribution, limit: int) -> LengthDistribution:
    """``distribution`` cut at ``limit`` (the request's ``max_tokens``): the probability of every longer length
    moves to ``limit``, which no output exceeds."""
    if distribution.lengths[-1] <= limit:
        return distribution
    kept = [(n, p) for n, p in zip(distribution.lengths, distribution.probs, strict=True) if n < limit]
    cut = 1.0 - sum(p for _, p in kept)
    lengths = tuple(n for n, _ in kept) + (limit,)
    probs = [p for _, p in kept] + [cut]
    total = sum(probs)
    return LengthDistribution(lengths, tuple(p / total for p in probs))


class _Urgency:
    def __init__(self, config: ClassifierConfig) -> None:
        self.kind = config.urgency
        self.keywords = {word.lower(): level for word, level in config.keywords.items()}
        if self.kind == "keywords" and not self.keywords:
            raise GatewayConfigError("classifier.keywords: urgency `keywords` needs at least one word")
        for word, level in self.keywords.items():
            if not 0 <= level <= 100:
                raise GatewayConfigError(f"classifier.keywords.{word}: must be from 0 to 100 (got {level})")
        self.model: Any = None
        if self.kind.startswith("ktas:"):
            from semsched.predict.urgency import UrgencyClassifier

            try:
                self.model = UrgencyClassifier.load(self.kind.removeprefix("ktas:"))
            except (OSError, SemschedError) as error:
                raise GatewayConfigError(f"classifier.urgency: {error}") from None

    def levels(self, texts: Sequence[str]) -> list[int | None]:
        if self.kind == "keywords":
            return [self._keyword_level(text) for text in texts]
        if self.model is None:
            return [None] * len(texts)
        from semsched.predict.ktas import CATEGORICAL_COLUMNS, NUMERIC_COLUMNS, TriageRecords

        n = len(texts)
        records = TriageRecords(
            tuple(texts), tuple(texts), np.full((n, len(NUMERIC_COLUMNS)), np.nan),
            tuple(("",) * len(CATEGORICAL_COLUMNS) for _ in range(n)), np.ones(n, dtype=np.int64),
            np.ones(n, dtype=np.int64))
        return [int(level) - 1 for level in self.model.predict(records)]

    def _keyword_level(self, text: str) -> int | None:
        lowered = text.lower()
        found = [level for word, level in self.keywords.items() if word in lowered]
        return min(found) if found else None


class _Lengths:
    def __init__(self, spec: str | None) -> None:
        self.predictor: Any = None
        self.embedder: Any = None
        if spec is None:
            return
        from semsched.predict.length_registry import make_length_predictor, parse_length_spec

        try:
            cls, _ = parse_length_spec(spec)
            if cls.name not in NO_EMBEDDING_PREDICTORS:
                from semsched.predict.embed import Embedder

                self.embedder = Embedder(cache=False)
            self.predictor = make_length_predictor(spec, self.embedder)
        except SemschedError as error:
            raise GatewayConfigError(f"classifier.length: {error}") from None

    def prompts(self, texts: Sequence[str], tokens: Sequence[int]) -> Any:
        from semsched.predict.online import Prompts

        vectors = (self.embedder.encode(texts).astype(np.float32) if self.embedder is not None
                   else np.zeros((len(texts), 1), dtype=np.float32))
        return Prompts(tuple(texts), np.asarray(tokens, dtype=np.int64), vectors)

    def predict(self, texts: Sequence[str], tokens: Sequence[int]) -> list[LengthDistribution | None]:
        if self.predictor is None:
            return [None] * len(texts)
        return [compress(d) for d in self.predictor.predict(self.prompts(texts, tokens))]

    def observe(self, rows: Sequence[tuple[str, int, int]]) -> None:
        if self.predictor is None or not rows:
            return
        texts, tokens, outputs = zip(*rows, strict=True)
        self.predictor.observe(self.prompts(texts, tokens), np.asarray(outputs, dtype=np.int64))


@dataclass(order=True)
class _Pending:
    key: tuple[int, int]  # (priority, arrival sequence): the most important, then the earliest, first
    text: str = field(compare=False)
    future: asyncio.Future[Prediction] = field(compare=False)
    queued_at: float = field(compare=False)


class Classifier:
    """Batched prompt classification (``start`` the worker in the serving loop, ``stop`` it at shutdown)."""

    def __init__(self, config: ClassifierConfig, metrics: GatewayMetrics | None = None) -> None:
        self.config = config
        self.metrics = metrics
        self.tokens = TokenCounter(config.tokenizer)
        self.urgency = _Urgency(config)
        self.lengths = _Lengths(config.length)
        self._heap: list[_Pending] = []
        self._seq = itertools.count()
        self._wakeup: asyncio.Event | None = None
        self._observed: list[tuple[str, int, int]] = []
        self._worker: asyncio.Task[None] | None = None

    @property
    def has_models(self) -> bool:
        """Whether anything beyond the token count is predicted (else :meth:`classify` answers at once)."""
        return self.urgency.kind != "none" or self.lengths.predictor is not None

    @property
    def queued(self) -> int:
        """Prompts waiting for a batch (including those whose request stopped waiting, until the worker sees
        them)."""
        return len(self._heap)

    async def start(self) -> None:
        self._wakeup = asyncio.Event()
        self._worker = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._worker is not None:
            self._worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._worker

    def count_tokens(self, text: str) -> int:
        return self.tokens.count([text])[0]

    async def classify(self, text: str, prompt_tokens: int | None = None, *, priority: int = 0) -> Prediction:
        """The prediction for ``text``; only its token count when there are no models, when they are too slow
        (``timeout_ms``) or when ``max_queued`` more important prompts wait. ``priority``: the request's (lower
        is more important), the order in which waiting prompts are classified."""
        counted = prompt_tokens if prompt_tokens is not None else self.count_tokens(text)
        if not self.has_models or self._wakeup is None:
            return Prediction(counted)
        start = time.perf_counter()
        future: asyncio.Future[Prediction] = asyncio.get_running_loop().create_future()
        self._enqueue(_Pending((priority, next(self._seq)), text, future, start))
        try:
            result = await asyncio.wait_for(asyncio.shield(future), self.config.timeout_ms / 1000)
        except (TimeoutError, Exception) as error:  # a model failure is the classifier's, not the request's
            if not isinstance(error, TimeoutError | _Skipped):
                log.warning("classification failed: %s", error)
            if self.metrics:
                self.metrics.classifier_timeouts.inc()
            return Prediction(counted)
        finally:
            if not future.done():
                future.cancel()  # the worker drops it unclassified
        if self.metrics:
            self.metrics.classifier.labels("total").observe(time.perf_counter() - start)
        return Prediction(counted, result.urgency, result.predicted_output)

    def _enqueue(self, item: _Pending) -> None:
        """Queue ``item``; past ``max_queued`` the least important waiting prompt (maybe ``item``) goes on
        unclassified."""
        assert self._wakeup is not None
        if len(self._heap) >= self.config.max_queued:  # forget those whose request stopped waiting first
            self._heap = [p for p in self._heap if not p.future.done()]
            heapq.heapify(self._heap)
        if len(self._heap) >= self.config.max_queued:
            worst = max(self._heap)
            if item < worst:
                self._heap.remove(worst)
                heapq.heapify(self._heap)
                worst.future.set_exception(_Skipped())
            else:
                item.future.set_exception(_Skipped())
                return
        heapq.heappush(self._heap, item)
        self._wakeup.set()

    def observe(self, text: str, prompt_tokens: int, output_tokens: int) -> None:
        """A finished request's real output length, for the length predictor's history (applied later)."""
        if self.lengths.predictor is not None and output_tokens >= 1:
            self._observed.append((text, prompt_tokens, output_tokens))

    async def _next_batch(self) -> list[_Pending]:
        """Up to ``max_batch`` waiting prompts, most important first, after at most ``max_wait_ms`` for the
        batch to fill."""
        assert self._wakeup is not None
        while not self._heap:
            self._wakeup.clear()
            await self._wakeup.wait()
        deadline = time.perf_counter() + self.config.max_wait_ms / 1000
        while len(self._heap) < self.config.max_batch:
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                break
            self._wakeup.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wakeup.wait(), remaining)
        batch: list[_Pending] = []
        while self._heap and len(batch) < self.config.max_batch:
            item = heapq.heappop(self._heap)
            if not item.future.done():
                batch.append(item)
        return batch

    async def _run(self) -> None:
        while True:
            batch = await self._next_batch()
            if not batch:
                continue
            observed, self._observed = self._observed, []
            started = time.perf_counter()
            try:
                predictions = await asyncio.to_thread(self._predict, [item.text for item in batch], observed)
            except Exception as error:  # noqa: BLE001 - reported to each waiting request, the worker goes on
                for item in batch:
                    if not item.future.done():
                        item.future.set_exception(error)
                continue
            if self.metrics:
                self.metrics.classifier.labels("predict").observe(time.perf_counter() - started)
            for item, prediction in zip(batch, predictions, strict=True):
                if self.metrics:
                    self.metrics.classifier.labels("queue").observe(started - item.queued_at)
                if not item.future.done():
                    item.future.set_result(prediction)

    def _predict(self, texts: list[str], observed: list[tuple[str, int, int]]) -> list[Prediction]:
        self.lengths.observe(observed)
        tokens = self.tokens.count(texts)
        levels = self.urgency.levels(texts)
        lengths = self.lengths.predict(texts, tokens)
        return [Prediction(t, u, d) for t, u, d in zip(tokens, levels, lengths, strict=True)]
