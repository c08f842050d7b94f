"""What an online length predictor remembers (issue 16, seed 002 §3.1): finished requests and warm-up corpora.

* :class:`FinishedHistory`: the last ``capacity`` finished requests (prompt embedding, prompt tokens, output
  tokens) in preallocated numpy ring buffers. Inserting is O(1) per request and evicts the oldest (FIFO); a
  request is in the history only once :meth:`FinishedHistory.add` was called for it, i.e. once it finished.
* :class:`Corpus`: a fixed set of (embedding, prompt tokens, output tokens) rows that never changes: the paper's
  "public datasets" a predictor falls back on while its own history is thin. :func:`load_corpus` builds one from
  AlpacaEval / MT-Bench answer files (:mod:`semsched.workloads.answers`), embedded once (disk-cached).
* :data:`DEFAULT_PRIOR`: the distribution every predictor returns when it has seen nothing at all.
"""

from __future__ import annotations

import glob
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
import numpy.typing as npt

from semsched.core.errors import SemschedError
from semsched.core.request import LengthDistribution
from semsched.predict.embed import Embedder
from semsched.predict.online import Prompts
from semsched.workloads.answers import AnswerFile, cached_answer_file

DEFAULT_CAPACITY = 10_000
MAX_CAPACITY = 10_000_000
SMALL_SAMPLE = 256
PATH_SEPARATOR = "+"
"""Joins several warm-up paths in one spec value (``warmup=a.json+b.json``); each may be a glob."""

DEFAULT_PRIOR = LengthDistribution(tuple(range(50, 1000, 100)), (0.1,) * 10)
"""The cold-start distribution of a predictor with neither history nor warm-up corpus: uniform over the centres of
ten 100-token buckets (50, 150, ..., 950 tokens). A deliberately flat guess; anything observed replaces it."""


class TextEncoder(Protocol):
    """What embeds prompts: :class:`~semsched.predict.embed.Embedder` (tests pass stand-ins)."""

    def encode(self, texts: Sequence[str]) -> np.ndarray: ...


def distribution_of(lengths: npt.NDArray[np.int64]) -> LengthDistribution:
    """The empirical distribution of observed output lengths (at least one)."""
    if len(lengths) <= SMALL_SAMPLE:  # a Counter is ~2x faster than np.unique on a few values: the hot path
        counts = sorted(Counter(lengths.tolist()).items())
        return LengthDistribution(tuple(n for n, _ in counts), tuple(c / len(lengths) for _, c in counts))
    values, totals = np.unique(lengths, return_counts=True)
    return LengthDistribution(tuple(values.tolist()), tuple((totals / totals.sum()).tolist()))


class HistoryError(SemschedError):
    """A history or corpus is used wrongly (wrong shapes, non-positive lengths, a warm-up path that matches
    nothing); the message names the argument."""


@dataclass(frozen=True)
class Corpus:
    """Fixed rows of known answers: ``vectors[i]`` (float32, L2-normalised) embeds a prompt of
    ``prompt_tokens[i]`` tokens whose answer had ``output_tokens[i]`` tokens."""

    vectors: npt.NDArray[np.float32]
    prompt_tokens: npt.NDArray[np.int64]
    output_tokens: npt.NDArray[np.int64]

    def __post_init__(self) -> None:
        _check_rows(self.vectors, self.prompt_tokens, self.output_tokens)

    def __len__(self) -> int:
        return len(self.output_tokens)

    @classmethod
    def empty(cls, dimensions: int = 0) -> Corpus:
        return cls(np.zeros((0, dimensions), dtype=np.float32), np.zeros(0, np.int64), np.zeros(0, np.int64))

    @classmethod
    def concat(cls, parts: Sequence[Corpus]) -> Corpus:
        if not parts:
            return cls.empty()
        return cls(np.concatenate([p.vectors for p in parts]).astype(np.float32, copy=False),
                   np.concatenate([p.prompt_tokens for p in parts]),
                   np.concatenate([p.output_tokens for p in parts]))


def _check_rows(vectors: npt.NDArray[np.float32], prompt_tokens: npt.NDArray[np.int64],
                output_tokens: npt.NDArray[np.int64]) -> None:
    if vectors.ndim != 2 or not len(vectors) == len(prompt_tokens) == len(output_tokens):
        raise HistoryError(f"rows: vectors (n, d), prompt_tokens (n,) and output_tokens (n,) must agree (got "
                           f"{vectors.shape}, {np.shape(prompt_tokens)} and {np.shape(output_tokens)})")
    if len(output_tokens) and (np.min(output_tokens) < 1 or np.min(prompt_tokens) < 1):
        raise HistoryError("rows: prompt_tokens and output_tokens must be >= 1")


class FinishedHistory:
    """The last ``capacity`` finished requests, oldest evicted first.

    Rows live in preallocated ring buffers (allocated at the first :meth:`add`, when the embedding's dimension is
    known); :meth:`rows` is a view of the filled part in *slot* order, which is all a similarity search needs
    (it does not care about age). :meth:`ordered` gives the rows oldest first, for tests and inspection."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        if not isinstance(capacity, int) or isinstance(capacity, bool) or not 1 <= capacity <= MAX_CAPACITY:
            raise HistoryError(f"capacity: must be an integer from 1 to {MAX_CAPACITY} (got {capacity!r})")
        self.capacity = capacity
        self._vectors = np.zeros((0, 0), dtype=np.float32)
        self._prompt_tokens = np.zeros(capacity, dtype=np.int64)
        self._output_tokens = np.zeros(capacity, dtype=np.int64)
        self._next = 0  # the slot the next row goes to (the oldest row's slot once full)
        self._size = 0
        self.observed = 0  # rows ever added, evicted ones included

    def __len__(self) -> int:
        return self._size

    def add(self, vectors: npt.NDArray[np.float32], prompt_tokens: npt.NDArray[np.int64],
            output_tokens: npt.NDArray[np.int64]) -> None:
        """Append finished requests in finishing order; beyond ``capacity`` the oldest are overwritten."""
        vectors = np.asarray(vectors, dtype=np.float32)
        prompt_tokens = np.asarray(prompt_tokens, dtype=np.int64)
        output_tokens = np.asarray(output_tokens, dtype=np.int64)
        _check_rows(vectors, prompt_tokens, output_tokens)
        if self._vectors.shape[1] != vectors.shape[1]:
            if self._size:
                raise HistoryError(f"vectors: {vectors.shape[1]} dimensions, the history holds "
                                   f"{self._vectors.shape[1]}")
            self._vectors = np.zeros((self.capacity, vectors.shape[1]), dtype=np.float32)
        count = len(output_tokens)
        self.observed += count
        if count > self.capacity:  # only the newest ``capacity`` rows can survive
            vectors, prompt_tokens = vectors[-self.capacity:], prompt_tokens[-self.capacity:]
            output_tokens, count = output_tokens[-self.capacity:], self.capacity
        slots = (self._next + np.arange(count)) % self.capacity
        self._vectors[slots] = vectors
        self._prompt_tokens[slots] = prompt_tokens
        self._output_tokens[slots] = output_tokens
        self._next = int((self._next + count) % self.capacity)
        self._size = min(self._size + count, self.capacity)

    def rows(self) -> Corpus:
        """The filled slots as views (no copy), in slot order."""
        n = self._size
        return Corpus(self._vectors[:n], self._prompt_tokens[:n], self._output_tokens[:n])

    def ordered(self) -> Corpus:
        """The rows oldest first (a copy)."""
        start = self._next if self._size == self.capacity else 0
        order = (start + np.arange(self._size)) % self.capacity
        return Corpus(self._vectors[order], self._prompt_tokens[order], self._output_tokens[order])


def resolve_paths(spec: str) -> list[Path]:
    """The files a warm-up value names: ``+``-separated paths, each a file or a glob matching at least one file
    (sorted). A path or glob that matches nothing is a :class:`HistoryError` naming it."""
    paths: list[Path] = []
    for part in filter(None, (p.strip() for p in spec.split(PATH_SEPARATOR))):
        matches = sorted(glob.glob(part)) if glob.has_magic(part) else [part]
        files = [Path(m) for m in matches if Path(m).is_file()]
        if not files:
            raise HistoryError(f"warmup: {part!r} matches no file")
        paths.extend(files)
    if not paths:
        raise HistoryError(f"warmup: no path given (got {spec!r})")
    return paths


def prompts_of(answers: AnswerFile, embedder: TextEncoder) -> Prompts:
    """An answer file's prompts with their token counts and embeddings (disk-cached)."""
    vectors = np.asarray(embedder.encode(answers.prompts), dtype=np.float32)
    return Prompts(answers.prompts, answers.prompt_tokens, vectors)


def corpus_of(answers: AnswerFile, embedder: TextEncoder) -> Corpus:
    prompts = prompts_of(answers, embedder)
    return Corpus(prompts.vectors, prompts.prompt_tokens, answers.output_tokens)


def load_corpus(paths: Sequence[str | Path], embedder: TextEncoder | None = None) -> Corpus:
    """Every row of the given answer files (AlpacaEval or MT-Bench, see :func:`load_answer_file`) as one corpus."""
    embedder = embedder or Embedder()
    return Corpus.concat([corpus_of(cached_answer_file(path), embedder) for path in paths])
