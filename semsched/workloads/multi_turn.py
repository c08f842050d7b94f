"""``mt-bench-turns``: two-turn MT-Bench conversations, the second turn repeating the first as its prefix
(issue 32).

Each conversation is one MT-Bench question answered by one model (``model_answer/<model>.jsonl``): turn 1's prompt
is the question's first turn and its output the model's first answer; turn 2's prompt is turn 1's prompt, that
answer and the question's second turn, its output the model's second answer. Lengths are Llama-2 tokens (the
shared tokenizer, special tokens not counted, no chat template: the turns' tokens are concatenated), and every
request carries ``prefix_hashes`` over its prompt and its replayed answer in ``block_size``-token blocks, so a
second turn shares its first turn's blocks (prompt and answer) and an engine with prefix caching can skip them.

Conversations start as a Poisson process at half of ``rate_per_s`` (two requests each, so requests arrive at
about ``rate_per_s``); turn 2 arrives ``token_s`` seconds per token of the first answer after turn 1 (the time
to stream it) plus an exponential think time of mean ``think_s``. The arrivals are open-loop: under overload a
second turn may arrive before its first has finished, and then finds less (or none) of it cached. Which (model,
question) each conversation takes: shuffled passes over every model's 80 conversations, from the seed. Data is
read from the shared data folder (``answers``: '+'-separated answer files, default every model's).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from semsched.core.prefix import token_block_hashes
from semsched.workloads.answer_workloads import PART_SEPARATOR, row_indices
from semsched.workloads.answers import (
    AnswerDataError,
    answer_files,
    json_field,
    parse_jsonl,
    read_text,
    tokenizer,
)
from semsched.workloads.registry import BuildArgs, PoissonConfig, _poisson_times, parameter, register_workload
from semsched.workloads.workload import Workload, WorkloadError


@dataclass(frozen=True)
class MtBenchTurnsConfig(PoissonConfig):
    """Two-turn MT-Bench conversations: turn 2's prompt holds turn 1 and its answer."""

    answers: str = parameter("", "MT-Bench model_answer/<model>.jsonl files, '+'-separated (default: every "
                                 "model's in the shared data folder)")
    questions: str = parameter("", "the MT-Bench question.jsonl (default: ../../question.jsonl from the answers)")
    think_s: float = parameter(5.0, "mean think time between turn 1's answer and turn 2 (exponential, seconds)")
    token_s: float = parameter(0.02, "seconds per token of turn 1's answer before turn 2 can start (its stream)")
    block_size: int = parameter(16, "tokens per prefix-hash block (the engine's --block-size)")

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("think_s", "token_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < float("inf"):
                raise WorkloadError(f"{name}: must be a finite number >= 0 (got {value!r})")
        if isinstance(self.block_size, bool) or not isinstance(self.block_size, int) or self.block_size < 1:
            raise WorkloadError(f"block_size: must be an integer >= 1 (got {self.block_size!r})")

    def answer_paths(self) -> list[Path]:
        if not self.answers:
            return answer_files("mt-bench")
        return [Path(p.strip()) for p in self.answers.split(PART_SEPARATOR)]


@dataclass(frozen=True)
class Conversation:
    """One model's two answers to one question, as token ids."""

    question: tuple[int, ...]
    answer: tuple[int, ...]
    follow_up: tuple[int, ...]
    second_answer: tuple[int, ...]
    texts: tuple[str, str, str]


def read_conversations(path: Path, questions: Path | None = None) -> tuple[Conversation, ...]:
    """Every two-turn conversation of one MT-Bench answer file whose answers are both non-empty, tokenized;
    errors name the file and the row (:class:`WorkloadError`)."""
    if not path.is_file():
        raise WorkloadError(f"answers: answer file {path} not found")
    question_file = questions if questions is not None else path.parent.parent / "question.jsonl"
    if not question_file.is_file():
        raise WorkloadError(f"questions: question file {question_file} not found")
    version = (path.stat().st_mtime_ns, question_file.stat().st_mtime_ns)
    try:
        return _read_cached(path.resolve(), question_file.resolve(), version)
    except AnswerDataError as error:
        raise WorkloadError(f"answers: {error}") from None


@functools.lru_cache(maxsize=64)
def _read_cached(path: Path, question_file: Path, version: tuple[int, int]) -> tuple[Conversation, ...]:
    turns: dict[int, tuple[str, str]] = {}
    for number, row in parse_jsonl(question_file, read_text(question_file)):
        qid = json_field(row, ["question_id"], question_file, f"row {number}", int)
        turns[qid] = (json_field(row, ["turns", 0], question_file, f"row {number}", str),
                      json_field(row, ["turns", 1], question_file, f"row {number}", str))
    texts: list[tuple[str, str, str, str]] = []
    for number, row in parse_jsonl(path, read_text(path)):
        qid = json_field(row, ["question_id"], path, f"row {number}", int)
        if qid not in turns:
            raise AnswerDataError(f"{path}: row {number}: question_id {qid} is not in {question_file}")
        first = json_field(row, ["choices", 0, "turns", 0], path, f"row {number}", str)
        second = json_field(row, ["choices", 0, "turns", 1], path, f"row {number}", str)
        texts.append((turns[qid][0], first, turns[qid][1], second))
    encoder = tokenizer()
    conversations = []
    for parts in texts:
        ids = [tuple(e.ids) for e in encoder.encode_batch(list(parts), add_special_tokens=False)]
        if all(ids):  # an empty turn or answer: no request can be made of it
            conversations.append(Conversation(ids[0], ids[1], ids[2], ids[3], (parts[0], parts[1], parts[2])))
    return tuple(conversations)


@register_workload("mt-bench-turns", MtBenchTurnsConfig)
def _mt_bench_turns(config: MtBenchTurnsConfig, args: BuildArgs, rng: np.random.Generator) -> Workload:
    """Two-turn MT-Bench conversations (turn 2 repeats turn 1 and its answer): prefix hashes for prefix caching."""
    questions = Path(config.questions) if config.questions else None
    pool = [c for path in config.answer_paths() for c in read_conversations(path, questions)]
    if not pool:
        raise WorkloadError("answers: no conversation with two non-empty answers")
    half = BuildArgs(args.rate_per_s / 2, args.duration_s,
                     None if args.num_requests is None else -(-args.num_requests // 2))
    starts_s = _poisson_times(half, rng)
    picked = row_indices(len(pool), starts_s.size, "shuffle", rng)
    think_s = rng.exponential(config.think_s, starts_s.size) if config.think_s > 0 else np.zeros(starts_s.size)
    rows: list[tuple[float, int, int, str, tuple[int, ...]]] = []
    for start_s, index, think in zip(starts_s, picked, think_s, strict=True):
        c = pool[int(index)]
        first_prompt = c.question
        second_prompt = c.question + c.answer + c.follow_up
        rows.append((float(start_s), len(first_prompt), len(c.answer), c.texts[0], first_prompt + c.answer))
        second_s = float(start_s) + config.token_s * len(c.answer) + float(think)
        rows.append((second_s, len(second_prompt), len(c.second_answer), "\n".join(c.texts),
                     second_prompt + c.second_answer))
    rows.sort(key=lambda row: row[0])
    if args.num_requests is not None:
        rows = rows[:args.num_requests]
    if args.duration_s is not None:
        rows = [row for row in rows if row[0] < args.duration_s]
    workload = Workload.untiered("mt-bench-turns", [r[0] for r in rows], [r[1] for r in rows],
                                 [r[2] for r in rows])
    hashes = [token_block_hashes(r[4], config.block_size) for r in rows]
    return workload.with_prompt_text([r[3] for r in rows]).with_prefix_hashes(hashes, config.block_size)
