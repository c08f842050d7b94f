"""Workloads of real prompts with one model's real output lengths (issue 16, seed 002): ``alpaca-eval``,
``mt-bench`` and ``mixed``.

Each reads answer files with :func:`semsched.workloads.answers.load_answer_file` (AlpacaEval
``model_outputs.json``, MT-Bench ``model_answer/<model>.jsonl``; prompt and output lengths in Llama-2 tokens)
and keeps every request's prompt in ``Workload.prompt_text``, so an online length predictor can read it:

* ``alpaca-eval:outputs=PATH``: one model's AlpacaEval outputs;
* ``mt-bench:answers=PATH`` (optional ``questions=PATH``, default ``question.jsonl`` two folders above the
  answers): one model's first-turn MT-Bench answers;
* ``mixed:parts=PATH+PATH+...``: several answer files of either format (told apart by their content), their rows
  pooled, so each row is equally likely and a file's share of the requests is its share of the rows; ``+``
  separates the paths (``/`` is inside paths, ``,`` separates specs). ``questions=PATH`` applies to every
  MT-Bench part.

Arrivals are Poisson at ``rate_per_s``, as in ``azure-conv``, until ``duration_s`` and/or the request count.
Which row each request takes (``order``): ``shuffle`` (default) deals the rows in shuffled passes drawn from the
workload's seed: every row once, in random order, before any row comes again, so rows of different files or
datasets are interleaved at random and a long run repeats each prompt about equally often; ``file`` takes them
in file order, cycling (``mixed`` always shuffles: its point is interleaving). The arrivals are drawn before the
rows, so a seed's arrival times are the same whichever ``order`` is chosen.

Answer files are read and tokenized once per process and file version. Every error names the parameter and the
file.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import numpy.typing as npt

from semsched.workloads.answers import AnswerDataError, AnswerFile, AnswerFormat, load_answer_file
from semsched.workloads.registry import (
    BuildArgs,
    PoissonConfig,
    _poisson_times,
    parameter,
    register_workload,
)
from semsched.workloads.workload import Workload, WorkloadError

PART_SEPARATOR = "+"
"""Separates the answer files of ``mixed:parts=...``."""
MAX_PARTS = 64
Order = Literal["shuffle", "file"]
ORDERS: tuple[Order, ...] = ("shuffle", "file")


# ---- configs ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class AnswerConfig(PoissonConfig):
    """What every answer workload takes besides its files: the row ``order``."""

    order: Order = parameter("shuffle", "shuffle: rows in shuffled passes drawn from the seed; file: file order")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.order not in ORDERS:
            raise WorkloadError(f"order: must be one of {', '.join(ORDERS)} (got {self.order!r})")


@dataclass(frozen=True)
class AlpacaEvalConfig(AnswerConfig):
    """One model's AlpacaEval outputs."""

    outputs: str = parameter("", "an AlpacaEval model_outputs.json (required)")

    def __post_init__(self) -> None:
        super().__post_init__()
        _require("outputs", self.outputs, "an AlpacaEval model_outputs.json")


@dataclass(frozen=True)
class MtBenchConfig(AnswerConfig):
    """One model's MT-Bench answers (first turns) and the questions they answer."""

    answers: str = parameter("", "an MT-Bench model_answer/<model>.jsonl (required)")
    questions: str = parameter("", "the MT-Bench question.jsonl (default: ../../question.jsonl from answers)")

    def __post_init__(self) -> None:
        super().__post_init__()
        _require("answers", self.answers, "an MT-Bench model_answer/<model>.jsonl")


@dataclass(frozen=True)
class MixedConfig(PoissonConfig):
    """Several answer files, their rows pooled and interleaved at random with the seed."""

    parts: str = parameter("", "answer files of either format, '+'-separated (required)")
    questions: str = parameter("", "the question.jsonl of every MT-Bench part (default: each part's own)")

    def __post_init__(self) -> None:
        super().__post_init__()
        _require("parts", self.parts, f"answer files joined by {PART_SEPARATOR!r}")
        paths = self.part_paths()
        if any(not p for p in paths):
            raise WorkloadError(f"parts: an empty path in {self.parts!r} (join paths with {PART_SEPARATOR!r})")
        if len(paths) > MAX_PARTS:
            raise WorkloadError(f"parts: at most {MAX_PARTS} files (got {len(paths)})")
        if len(set(paths)) != len(paths):
            raise WorkloadError(f"parts: a file is given twice in {self.parts!r}")

    def part_paths(self) -> list[str]:
        return [p.strip() for p in self.parts.split(PART_SEPARATOR)]


def _require(name: str, value: str, what: str) -> None:
    if not value:
        raise WorkloadError(f"{name}: required, {what}")


# ---- reading ---------------------------------------------------------------------------------------------
def read_answers(parameter_name: str, path: str, *, expected: AnswerFormat | None,
                 questions: str = "") -> AnswerFile:
    """The answer file at ``path`` (of format ``expected``, if given), read once per process and file version;
    any problem is a :class:`WorkloadError` naming ``parameter_name`` and the file."""
    file = Path(path)
    if not file.is_file():
        raise WorkloadError(f"{parameter_name}: answer file {path} not found (looked at {file.resolve()})")
    question_file = Path(questions).resolve() if questions else None
    if question_file is not None and not question_file.is_file():
        raise WorkloadError(f"questions: question file {questions} not found (looked at {question_file})")
    try:
        answers = _read_cached(file.resolve(), *_version(file), question_file, _version_or_none(question_file))
    except AnswerDataError as error:
        raise WorkloadError(f"{parameter_name}: {error}") from None
    if expected is not None and answers.format != expected:
        right = "alpaca-eval:outputs" if answers.format == "alpaca-eval" else "mt-bench:answers"
        raise WorkloadError(
            f"{parameter_name}: {path} is an {answers.format} answer file, not {expected} (use {right}={path})"
        )
    return answers


def _version(path: Path) -> tuple[int, int]:
    stat = path.stat()
    return stat.st_mtime_ns, stat.st_size


def _version_or_none(path: Path | None) -> tuple[int, int] | None:
    return None if path is None else _version(path)


@functools.lru_cache(maxsize=16)
def _read_cached(path: Path, mtime_ns: int, size: int, questions: Path | None,
                 questions_version: tuple[int, int] | None) -> AnswerFile:
    return load_answer_file(path, questions=questions)


@dataclass(frozen=True)
class _Rows:
    """The rows a workload draws from: prompt text, prompt and output tokens (several files concatenated)."""

    texts: tuple[str, ...]
    prompt_tokens: npt.NDArray[np.int64]
    output_tokens: npt.NDArray[np.int64]

    @classmethod
    def of(cls, files: list[AnswerFile]) -> _Rows:
        return cls(
            texts=tuple(text for file in files for text in file.prompts),
            prompt_tokens=np.concatenate([file.prompt_tokens for file in files]),
            output_tokens=np.concatenate([file.output_tokens for file in files]),
        )


# ---- building --------------------------------------------------------------------------------------------
def row_indices(num_rows: int, count: int, order: Order, rng: np.random.Generator) -> npt.NDArray[np.int64]:
    """Which row each of ``count`` requests takes: shuffled passes over the rows (``shuffle``: each pass a fresh
    permutation from ``rng``), or the rows in file order, cycling (``file``)."""
    passes = -(-count // num_rows)
    if order == "file":
        return np.tile(np.arange(num_rows, dtype=np.int64), passes)[:count]
    return np.concatenate([rng.permutation(num_rows) for _ in range(passes)])[:count].astype(np.int64)


def _answer_workload(name: str, rows: _Rows, order: Order, args: BuildArgs,
                     rng: np.random.Generator) -> Workload:
    times_s = _poisson_times(args, rng)
    picked = row_indices(len(rows.texts), times_s.size, order, rng)
    workload = Workload.untiered(name, times_s, rows.prompt_tokens[picked], rows.output_tokens[picked])
    return workload.with_prompt_text([rows.texts[int(i)] for i in picked])


@register_workload("alpaca-eval", AlpacaEvalConfig)
def _alpaca_eval(config: AlpacaEvalConfig, args: BuildArgs, rng: np.random.Generator) -> Workload:
    """AlpacaEval prompts with one model's real output lengths (outputs=PATH); Poisson arrivals at the rate."""
    answers = read_answers("outputs", config.outputs, expected="alpaca-eval")
    return _answer_workload("alpaca-eval", _Rows.of([answers]), config.order, args, rng)


@register_workload("mt-bench", MtBenchConfig)
def _mt_bench(config: MtBenchConfig, args: BuildArgs, rng: np.random.Generator) -> Workload:
    """MT-Bench first-turn prompts with one model's real output lengths (answers=PATH); Poisson arrivals."""
    answers = read_answers("answers", config.answers, expected="mt-bench", questions=config.questions)
    return _answer_workload("mt-bench", _Rows.of([answers]), config.order, args, rng)


@register_workload("mixed", MixedConfig)
def _mixed(config: MixedConfig, args: BuildArgs, rng: np.random.Generator) -> Workload:
    """Several answer files (parts=PATH+PATH), rows pooled and interleaved at random; Poisson arrivals."""
    paths = config.part_paths()
    files = [read_answers("parts", path, expected=None, questions=config.questions) for path in paths]
    return _answer_workload("mixed", _Rows.of(files), "shuffle", args, rng)
