"""Spec-Bench speculative-decoding logs as requests (seed 004, LAPS-SD): ``spec-bench`` and ``mbpp-spec``.

A Spec-Bench log (``spec_bench/model_answer/<model>-<method>-....jsonl``) holds one JSON object per line: one
question answered by one drafting method, with ``question_id``, ``category`` and ``choices[0]``: ``turns`` (the
answer text per turn), ``decoding_steps``, ``new_tokens`` and ``wall_time`` (per turn) and ``accept_lengths``
(the tokens each verification round emitted, the rounds of all turns concatenated: turn ``t`` owns the next
``decoding_steps[t]`` of them, and they sum to ``new_tokens[t]``). Each turn of each question is one request
(:class:`SpecTurn`). The prompts are in the benchmark's ``question.jsonl`` (by default two folders above the
log). Any log of this format works, so other drafting methods' logs plug in unchanged; the three in the shared
data folder have short names (:data:`SHORT_NAMES`): ``eagle`` (EAGLE, at most 5 drafts a round), ``sps-68m``
(a 68M draft model, at most 20) and ``vanilla`` (no speculation: every round emits 1 token).

A turn's prompt is what the model was fed: the first turn's question; for a later turn, the conversation so
far (each earlier question and the logged answer to it) and then this turn's question, joined by blank lines.
Lengths are Llama-2 token counts (:func:`semsched.workloads.answers.token_counts`), at least 1.

Every malformed line is a :class:`SpecBenchError` naming the file and the 1-based line, then the field:
``.../eagle.jsonl:17: choices[0].accept_lengths: sums to 950 but new_tokens sum to 952``.

Workloads (Poisson arrivals at ``rate_per_s`` and rows dealt as ``mt-bench`` deals them, see
:mod:`semsched.workloads.answer_workloads`):

* ``spec-bench:log=eagle;category=qa;turns=first``: the log's turns with their logged rounds
  (``Workload.accept_lengths``), which the simulator replays;
* ``mbpp-spec:log=eagle;category=coding``: MBPP problems, with no logged rounds (``accept_lengths`` None for
  every request): the simulator draws them from the acceptance model fitted to the named category of the log,
  :func:`mbpp_acceptance`.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from semsched.core.errors import SemschedError
from semsched.sim.acceptance import FittedAcceptance, fit_acceptance
from semsched.workloads.answer_workloads import AnswerConfig, row_indices
from semsched.workloads.answers import AnswerDataError, token_counts
from semsched.workloads.registry import BuildArgs, _poisson_times, parameter, register_workload
from semsched.workloads.traces import data_dir
from semsched.workloads.workload import Workload, WorkloadError

MODEL_ANSWER_DIR = "spec_bench/model_answer"
MBPP_FILE = "mbpp/mbpp.jsonl"
SHORT_NAMES = {
    "eagle": "vicuna-7b-v1.3-eagle-float16-temperature-0.0.jsonl",
    "sps-68m": "vicuna-7b-v1.3-sps-68m-float16-temp-0.0.jsonl",
    "vanilla": "vicuna-7b-v1.3-vanilla-float16-temp-0.0.jsonl",
}
"""The logs in the shared data folder's ``spec_bench/model_answer``, by short name."""
Turns = Literal["all", "first"]
TURNS: tuple[Turns, ...] = ("all", "first")
MBPP_CATEGORY = "coding"
"""The Spec-Bench category whose fitted acceptance MBPP prompts get by default."""
TURN_SEPARATOR = "\n\n"
"""Joins the earlier questions and answers of a conversation, and the turn's question, into one prompt."""


class SpecBenchError(SemschedError):
    """A Spec-Bench log, its questions or an MBPP file is malformed or missing; the message names the file and
    the 1-based line, then the field."""


# ---- the data ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SpecTurn:
    """One request: turn ``turn`` (0-based) of question ``question_id``, as one drafting method ran it.

    ``prompt_text`` is what the model was fed (see the module docstring) and ``prompt_tokens`` its Llama-2 token
    count (>= 1); ``output_tokens`` is the log's ``new_tokens`` of the turn, ``accept_lengths`` its
    ``decoding_steps`` verification rounds (each >= 1, summing to ``output_tokens``), ``wall_time_s`` the time
    the run took."""

    question_id: int
    category: str
    turn: int
    prompt_text: str
    prompt_tokens: int
    output_tokens: int
    decoding_steps: int
    accept_lengths: tuple[int, ...]
    wall_time_s: float


@dataclass(frozen=True)
class SpecBenchLog:
    """One drafting method's log (``method``: its short name, else the file's stem) read from ``path``: its
    turns in file order (a question's turns in turn order)."""

    method: str
    path: Path
    turns: tuple[SpecTurn, ...]

    def __len__(self) -> int:
        return len(self.turns)

    @property
    def categories(self) -> tuple[str, ...]:
        """The categories of the turns, sorted."""
        return tuple(sorted({turn.category for turn in self.turns}))

    @property
    def draft_tokens(self) -> int:
        """The drafts a round proposed, as the log shows it: the longest round's tokens minus the bonus token
        (0 for a log without speculation)."""
        return max(max(turn.accept_lengths) for turn in self.turns) - 1

    def accept_sequences(self) -> tuple[tuple[int, ...], ...]:
        """Each turn's rounds (tokens per verification round), in order."""
        return tuple(turn.accept_lengths for turn in self.turns)

    def filtered(self, category: str | None = None, turns: str = "all") -> SpecBenchLog:
        """The turns of ``category`` (None: every category); ``turns="first"``: only each question's first."""
        _check_turns(turns)
        if category is not None and category not in self.categories:
            raise SpecBenchError(
                f"category: {category!r} is not in {self.path}; its categories: {', '.join(self.categories)}"
            )
        if category is None and turns == "all":
            return self
        kept = tuple(
            turn for turn in self.turns
            if (category is None or turn.category == category) and (turns == "all" or turn.turn == 0)
        )
        return SpecBenchLog(self.method, self.path, kept)


def _check_turns(turns: str) -> None:
    if turns not in TURNS:
        raise SpecBenchError(f"turns: must be one of {', '.join(TURNS)} (got {turns!r})")


# ---- loading -------------------------------------------------------------------------------------------------
def resolve_log(log: str | Path) -> tuple[str, Path]:
    """``(method, path)`` of a log given by short name (:data:`SHORT_NAMES`, in the data folder's
    ``spec_bench/model_answer``) or by path; the method is the short name of a known file, else its stem."""
    if isinstance(log, str) and log in SHORT_NAMES:
        return log, data_dir() / MODEL_ANSWER_DIR / SHORT_NAMES[log]
    path = Path(log)
    names = {file: name for name, file in SHORT_NAMES.items()}
    return names.get(path.name, path.stem), path


def load_spec_bench(
    log: str | Path, *, category: str | None = None, turns: str = "all", questions: str | Path | None = None
) -> SpecBenchLog:
    """Read a Spec-Bench log (a path, or a short name of :data:`SHORT_NAMES`) and its questions
    (``questions``, default ``question.jsonl`` two folders above the log), keeping the turns of ``category``
    (None: all; an unknown one is an error listing the log's categories) and, with ``turns="first"``, only
    each question's first turn.

    Logs are read and tokenized once per process and file version (path, modification time and size of the
    log and of its questions). Raises :class:`SpecBenchError` naming the file, line and field of any problem."""
    _check_turns(turns)
    method, path = resolve_log(log)
    if not path.is_file():
        known = ", ".join(SHORT_NAMES)
        raise SpecBenchError(f"{path}: no such Spec-Bench log (give a path or one of the short names {known})")
    question_file = Path(questions) if questions is not None else path.parent.parent / "question.jsonl"
    if not question_file.is_file():
        where = "given as questions" if questions is not None else "Spec-Bench's layout: question.jsonl two " \
            "folders above model_answer/*.jsonl"
        raise SpecBenchError(f"{path}: its questions file {question_file} does not exist ({where})")
    full = _cached_log(method, path.resolve(), _version(path), question_file.resolve(), _version(question_file))
    return full.filtered(category, turns)


def _version(path: Path) -> tuple[int, int]:
    stat = path.stat()
    return stat.st_mtime_ns, stat.st_size


@functools.lru_cache(maxsize=16)
def _cached_log(method: str, path: Path, version: tuple[int, int], questions: Path,
                questions_version: tuple[int, int]) -> SpecBenchLog:
    prompts = _read_questions(questions)
    rows = [_LoggedTurn.parse(line, prompts) for line in _lines(path)]
    turns = [turn for row in rows for turn in row]
    if not turns:
        raise SpecBenchError(f"{path}: holds no answers")
    counts = _token_counts([turn.prompt_text for turn in turns])
    return SpecBenchLog(method, path, tuple(turn.request(int(count)) for turn, count in zip(turns, counts,
                                                                                               strict=True)))


def _token_counts(texts: list[str]) -> list[int]:
    try:
        return [max(int(count), 1) for count in token_counts(texts)]
    except AnswerDataError as error:
        raise SpecBenchError(str(error)) from None


# ---- one line, checked -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Line:
    """One non-blank line of a JSON-lines file, parsed; errors name the file and the 1-based line."""

    path: Path
    number: int
    row: Any

    def error(self, field: str, message: str) -> SpecBenchError:
        return SpecBenchError(f"{self.path}:{self.number}: {field}: {message}")

    def get(self, container: Any, key: str | int, name: str, kind: type | tuple[type, ...]) -> Any:
        """``container[key]`` (named ``name``) checked to be a ``kind`` (never a bool)."""
        try:
            value = container[key]
        except (KeyError, IndexError, TypeError):
            raise self.error(name, "missing") from None
        if not isinstance(value, kind) or isinstance(value, bool):
            kinds = kind if isinstance(kind, tuple) else (kind,)
            what = " or ".join(_KIND_NAMES.get(k, k.__name__) for k in kinds)
            raise self.error(name, f"must be {what} (got {value!r:.60})")
        return value

    def items(self, container: Any, key: str, name: str, kind: type | tuple[type, ...],
              count: int | None = None) -> list[Any]:
        """``container[key]``: a list of ``count`` (any number when None, at least one) ``kind`` values."""
        values = self.get(container, key, name, list)
        if (count is None and not values) or (count is not None and len(values) != count):
            need = "at least 1" if count is None else str(count)
            raise self.error(name, f"must hold {need} item(s), one per turn (got {len(values)})")
        return [self.get(values, i, f"{name}[{i}]", kind) for i in range(len(values))]


_KIND_NAMES = {int: "an integer", float: "a number", str: "a string", list: "a list", dict: "an object"}


def _lines(path: Path) -> Iterator[_Line]:
    """Every non-blank line of a JSON-lines file, parsed (a line that is not a JSON object is an error)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise SpecBenchError(f"{path}: cannot read it ({error})") from None
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            raise SpecBenchError(f"{path}:{number}: not JSON ({error.msg}, column {error.colno})") from None
        if not isinstance(row, dict):
            raise SpecBenchError(f"{path}:{number}: must be a JSON object (got {type(row).__name__})")
        yield _Line(path, number, row)


def _read_questions(path: Path) -> dict[int, tuple[str, ...]]:
    """Each question's turns (prompt text per turn), by question id."""
    questions = {}
    for line in _lines(path):
        qid = line.get(line.row, "question_id", "question_id", int)
        questions[qid] = tuple(line.items(line.row, "turns", "turns", str))
    return questions


@dataclass(frozen=True)
class _LoggedTurn:
    """One turn of a log line, checked, before its prompt is tokenized."""

    question_id: int
    category: str
    turn: int
    prompt_text: str
    output_tokens: int
    accept_lengths: tuple[int, ...]
    wall_time_s: float

    def request(self, prompt_tokens: int) -> SpecTurn:
        return SpecTurn(
            question_id=self.question_id, category=self.category, turn=self.turn, prompt_text=self.prompt_text,
            prompt_tokens=prompt_tokens, output_tokens=self.output_tokens,
            decoding_steps=len(self.accept_lengths), accept_lengths=self.accept_lengths,
            wall_time_s=self.wall_time_s,
        )

    @classmethod
    def parse(cls, line: _Line, questions: dict[int, tuple[str, ...]]) -> list[_LoggedTurn]:
        """The turns of one log line, every field checked (see the module docstring)."""
        qid = line.get(line.row, "question_id", "question_id", int)
        category = line.get(line.row, "category", "category", str)
        choice = line.get(line.get(line.row, "choices", "choices", list), 0, "choices[0]", dict)
        answers = line.items(choice, "turns", "choices[0].turns", str)
        steps = _positive(line, line.items(choice, "decoding_steps", "choices[0].decoding_steps", int,
                                           len(answers)), "choices[0].decoding_steps")
        new_tokens = _positive(line, line.items(choice, "new_tokens", "choices[0].new_tokens", int, len(answers)),
                               "choices[0].new_tokens")
        wall_times = line.items(choice, "wall_time", "choices[0].wall_time", (int, float), len(answers))
        for t, seconds in enumerate(wall_times):
            if not (math.isfinite(seconds) and seconds >= 0):
                raise line.error(f"choices[0].wall_time[{t}]", f"must be a finite number >= 0 (got {seconds!r})")
        rounds = _split_rounds(line, choice, steps, new_tokens)
        prompts = _prompts(line, questions, qid, answers)
        return [
            cls(qid, category, t, prompts[t], new_tokens[t], rounds[t], float(wall_times[t]))
            for t in range(len(answers))
        ]


def _positive(line: _Line, values: list[int], name: str) -> list[int]:
    for i, value in enumerate(values):
        if value < 1:
            raise line.error(f"{name}[{i}]", f"must be an integer >= 1 (got {value})")
    return values


def _split_rounds(line: _Line, choice: Any, steps: list[int], new_tokens: list[int]) -> list[tuple[int, ...]]:
    """``accept_lengths`` cut into each turn's rounds, checked against ``decoding_steps`` and ``new_tokens``."""
    name = "choices[0].accept_lengths"
    values = line.get(choice, "accept_lengths", name, list)
    for k, value in enumerate(values):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise line.error(f"{name}[{k}]", f"must be an integer >= 1 (got {value!r:.60})")
    if len(values) != sum(steps):
        raise line.error(name, f"has {len(values)} rounds but decoding_steps sum to {sum(steps)}")
    if sum(values) != sum(new_tokens):
        raise line.error(name, f"sums to {sum(values)} but new_tokens sum to {sum(new_tokens)}")
    bounds = np.concatenate([[0], np.cumsum(steps)])
    rounds = [tuple(values[int(bounds[t]):int(bounds[t + 1])]) for t in range(len(steps))]
    for t, turn in enumerate(rounds):
        if sum(turn) != new_tokens[t]:
            raise line.error(name, f"turn {t}'s {len(turn)} rounds sum to {sum(turn)} but new_tokens[{t}] is "
                                   f"{new_tokens[t]}")
    return rounds


def _prompts(line: _Line, questions: dict[int, tuple[str, ...]], qid: int, answers: list[str]) -> list[str]:
    """What the model was fed at each turn: the conversation so far, then the turn's question."""
    asked = questions.get(qid)
    if asked is None:
        raise line.error("question_id", f"{qid} is not in the questions file")
    if len(asked) < len(answers):
        raise line.error("choices[0].turns", f"{len(answers)} answers but question {qid} has {len(asked)} turns")
    conversation = [part for t in range(len(answers)) for part in (asked[t], answers[t])]
    return [TURN_SEPARATOR.join(conversation[: 2 * t + 1]) for t in range(len(answers))]


# ---- MBPP ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class MbppProblems:
    """MBPP problems as requests: each prompt (:func:`mbpp_prompt`), its Llama-2 token count and the token count
    of the reference solution (``code``) as the output length, both at least 1."""

    path: Path
    task_ids: tuple[int, ...]
    prompts: tuple[str, ...]
    prompt_tokens: tuple[int, ...]
    output_tokens: tuple[int, ...]

    def __len__(self) -> int:
        return len(self.prompts)


def mbpp_prompt(text: str, tests: Sequence[str]) -> str:
    """The MBPP paper's prompt (Austin et al., 2021, without its few-shot examples): the task, then the tests
    the code must pass, one per line."""
    return (f"You are an expert Python programmer, and here is your task: {text} Your code should pass these "
            "tests:\n\n" + "\n".join(tests))


def load_mbpp(path: str | Path | None = None) -> MbppProblems:
    """Read MBPP (``text``, ``code``, ``task_id``, ``test_list`` per line; default: ``mbpp/mbpp.jsonl`` in the
    data folder), read and tokenized once per process and file version. Errors name the file, line and field."""
    file = Path(path) if path is not None else data_dir() / MBPP_FILE
    if not file.is_file():
        raise SpecBenchError(f"{file}: no such MBPP file (set SEMSCHED_DATA_DIR or give its path)")
    return _cached_mbpp(file.resolve(), _version(file))


@functools.lru_cache(maxsize=4)
def _cached_mbpp(path: Path, version: tuple[int, int]) -> MbppProblems:
    task_ids, prompts, codes = [], [], []
    for line in _lines(path):
        task_ids.append(line.get(line.row, "task_id", "task_id", int))
        tests = line.items(line.row, "test_list", "test_list", str)
        prompts.append(mbpp_prompt(line.get(line.row, "text", "text", str), tests))
        codes.append(line.get(line.row, "code", "code", str))
    if not prompts:
        raise SpecBenchError(f"{path}: holds no problems")
    return MbppProblems(path, tuple(task_ids), tuple(prompts), tuple(_token_counts(prompts)),
                        tuple(_token_counts(codes)))


def mbpp_acceptance(log: str | Path = "eagle", category: str = MBPP_CATEGORY, *,
                    draft_tokens: int | None = None) -> FittedAcceptance:
    """The acceptance model MBPP prompts get: :func:`semsched.sim.acceptance.fit_acceptance` on the rounds of
    every turn of ``category`` in ``log`` (a path or a short name), with ``draft_tokens`` (default: the log's,
    its longest round minus one, taken over all its categories). Each MBPP request then draws its base
    acceptance rate from that category's fitted rates and its rounds from the fitted AR(1) model.

    Why ``coding``: the paper remarks that MBPP has higher acceptance rates than chat, and Spec-Bench's
    ``coding`` turns (MT-Bench coding questions) are the nearest to MBPP's short Python tasks, with one of the
    highest mean accept lengths of the logs: 4.51 tokens a round for EAGLE (the highest of its categories),
    3.14 for SPS-68M (second to ``extraction``, 3.38). MBPP's own acceptance is logged nowhere in the data
    folder. Fitted once per process and set of rounds."""
    method, path = resolve_log(log)
    full = load_spec_bench(log)
    drafts = full.draft_tokens if draft_tokens is None else draft_tokens
    if drafts < 1:
        raise SpecBenchError(
            f"log: {method} ({path}) never accepted a draft (every round emitted 1 token): no speculation to fit"
        )
    return _fitted(full.filtered(category).accept_sequences(), drafts)  # an unknown category: an error


@functools.lru_cache(maxsize=16)
def _fitted(sequences: tuple[tuple[int, ...], ...], draft_tokens: int) -> FittedAcceptance:
    return fit_acceptance(sequences, draft_tokens)


# ---- workloads -----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SpecBenchConfig(AnswerConfig):
    """A Spec-Bench log's turns with their logged rounds."""

    log: str = parameter("eagle", f"a Spec-Bench model_answer .jsonl, or {', '.join(SHORT_NAMES)}")
    category: str | None = parameter(None, "only this category's turns (default: every category)")
    turns: Turns = parameter("all", "all: every turn is a request; first: only each question's first turn")

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_log_and_category(self.log, self.category)
        if self.turns not in TURNS:
            raise WorkloadError(f"turns: must be one of {', '.join(TURNS)} (got {self.turns!r})")


@dataclass(frozen=True)
class MbppSpecConfig(AnswerConfig):
    """MBPP problems whose rounds the simulator draws from a log category's fitted acceptance model."""

    log: str = parameter("eagle", f"the Spec-Bench log fitted: a model_answer .jsonl, or {', '.join(SHORT_NAMES)}")
    category: str = parameter(MBPP_CATEGORY, "the log's category whose fitted acceptance MBPP prompts get")
    mbpp: str = parameter("", f"the MBPP .jsonl (default: {MBPP_FILE} in the data folder)")

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_log_and_category(self.log, self.category)


def _check_log_and_category(log: str, category: str | None) -> None:
    if not log:
        raise WorkloadError(f"log: required, a Spec-Bench log path or one of {', '.join(SHORT_NAMES)}")
    if category is not None and not category:
        raise WorkloadError("category: must not be empty (leave it out for every category)")


def _read_log(config: SpecBenchConfig | MbppSpecConfig, turns: str) -> SpecBenchLog:
    """The configured log, its file problems named by ``log`` and a bad category by ``category``."""
    try:
        full = load_spec_bench(config.log)
    except SpecBenchError as error:
        raise WorkloadError(f"log: {error}") from None
    try:
        return full.filtered(config.category, turns)
    except SpecBenchError as error:
        raise WorkloadError(str(error)) from None


def _picked(count: int, config: AnswerConfig, args: BuildArgs, rng: np.random.Generator
            ) -> tuple[np.ndarray, list[int]]:
    """Poisson arrival times, then which row each request takes (as ``mt-bench`` draws them)."""
    times_s = _poisson_times(args, rng)
    return times_s, [int(i) for i in row_indices(count, times_s.size, config.order, rng)]


@register_workload("spec-bench", SpecBenchConfig)
def _spec_bench(config: SpecBenchConfig, args: BuildArgs, rng: np.random.Generator) -> Workload:
    """Spec-Bench turns with their logged speculative-decoding rounds (log=eagle|sps-68m|vanilla|PATH)."""
    log = _read_log(config, config.turns)
    times_s, picked = _picked(len(log), config, args, rng)
    rows = [log.turns[i] for i in picked]
    parts = [log.method] + ([config.category] if config.category is not None else [])
    parts += ["first"] if config.turns == "first" else []
    workload = Workload.untiered(f"spec-bench[{'/'.join(parts)}]", times_s, [r.prompt_tokens for r in rows],
                                 [r.output_tokens for r in rows])
    return workload.with_prompt_text([r.prompt_text for r in rows]).with_accept_lengths(
        [r.accept_lengths for r in rows]
    )


@register_workload("mbpp-spec", MbppSpecConfig)
def _mbpp_spec(config: MbppSpecConfig, args: BuildArgs, rng: np.random.Generator) -> Workload:
    """MBPP prompts; rounds drawn by the simulator from a log category's fitted acceptance (mbpp_acceptance)."""
    log = _read_log(config, "all")
    try:
        problems = load_mbpp(config.mbpp or None)
    except SpecBenchError as error:
        raise WorkloadError(f"mbpp: {error}") from None
    times_s, picked = _picked(len(problems), config, args, rng)
    workload = Workload.untiered(
        f"mbpp-spec[{log.method}/{config.category}]", times_s, [problems.prompt_tokens[i] for i in picked],
        [problems.output_tokens[i] for i in picked],
    )
    return workload.with_prompt_text([problems.prompts[i] for i in picked]).with_accept_lengths(
        [None] * len(picked)
    )
