"""One model's answers to a benchmark's prompts, as real (prompt, output length) pairs (issue 16, seed 002).

Two file formats, told apart by what the file holds (not by its name):

* **AlpacaEval** ``model_outputs.json``: a JSON list of objects with ``instruction`` and ``output`` (``dataset``
  and ``generator`` are kept when present);
* **MT-Bench** ``model_answer/<model>.jsonl``: one JSON object per line with ``question_id`` and
  ``choices[0].turns``; the prompts are in the benchmark's ``question.jsonl`` (by default two folders up, beside
  ``model_answer/``). The first turn of each question is used: its prompt and the model's first answer.

Output and prompt lengths are Llama-2 token counts (the tokenizer in the shared data folder, special tokens not
counted). Rows whose answer is empty are skipped and counted (``skipped``), never silently: a request needs at
least one output token. Every error names the file, and the row and field where there is one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from semsched.core.errors import SemschedError
from semsched.workloads.traces import data_dir as shared_data_dir

AnswerFormat = Literal["alpaca-eval", "mt-bench"]
TOKENIZER_FILE = "tokenizers/llama2_tinyllama/tokenizer.json"
ALPACA_EVAL_DIR = "alpaca_eval/model_outputs"
MT_BENCH_DIR = "mt_bench/model_answer"


class AnswerDataError(SemschedError):
    """An answer file, its questions or the tokenizer cannot be read or has the wrong format; the message names
    the file (and the row and field)."""


@dataclass(frozen=True)
class AnswerFile:
    """Prompts and one model's real output lengths for them, in file order (``alpaca-eval``) or question order
    (``mt-bench``). ``categories`` is the AlpacaEval ``dataset`` or the MT-Bench ``category`` of each prompt."""

    path: Path
    format: AnswerFormat
    model: str
    prompts: tuple[str, ...]
    categories: tuple[str, ...]
    prompt_tokens: npt.NDArray[np.int64]
    output_tokens: npt.NDArray[np.int64]
    skipped: int

    def __len__(self) -> int:
        return len(self.prompts)


def answer_files(dataset: AnswerFormat, data_dir: str | Path | None = None) -> list[Path]:
    """Every model's answer file of ``dataset`` in the shared data folder, sorted by name."""
    directory = Path(data_dir) if data_dir is not None else shared_data_dir()
    folder, pattern = (ALPACA_EVAL_DIR, "*.json") if dataset == "alpaca-eval" else (MT_BENCH_DIR, "*.jsonl")
    files = sorted((directory / folder).glob(pattern))
    if not files:
        raise AnswerDataError(f"{directory / folder}: no {dataset} answer files (set SEMSCHED_DATA_DIR)")
    return files


def load_answer_file(path: str | Path, *, questions: str | Path | None = None,
                     data_dir: str | Path | None = None) -> AnswerFile:
    """Read one model's answers (format detected from the content, see the module docstring) and count tokens.
    ``questions``: the MT-Bench ``question.jsonl`` (default: ``<path>/../../question.jsonl``); ``data_dir``: where
    the tokenizer is (default: the shared data folder)."""
    path = Path(path)
    if not path.is_file():
        raise AnswerDataError(f"{path}: no such answer file")
    text = read_text(path)
    prompts, answers, categories, model, kind = _parse(path, text, questions)
    tokenizer = _tokenizer(Path(data_dir) if data_dir is not None else shared_data_dir())
    output_counts = _token_counts(tokenizer, answers)
    keep = output_counts > 0
    if not keep.any():
        raise AnswerDataError(f"{path}: every answer is empty")
    kept_prompts = [p for p, k in zip(prompts, keep, strict=True) if k]
    prompt_counts = np.maximum(_token_counts(tokenizer, kept_prompts), 1)
    return AnswerFile(
        path=path, format=kind, model=model, prompts=tuple(kept_prompts),
        categories=tuple(c for c, k in zip(categories, keep, strict=True) if k),
        prompt_tokens=prompt_counts, output_tokens=output_counts[keep], skipped=int((~keep).sum()),
    )


def cached_answer_file(path: str | Path, *, questions: str | Path | None = None) -> AnswerFile:
    """:func:`load_answer_file`, read and tokenized once per process and version of the file (and of its
    questions): a warm-up corpus or a workload read again by every run of an experiment costs nothing after the
    first. The arrays are read-only."""
    path = Path(path)
    question_path = Path(questions) if questions is not None else None
    return _cached(path.resolve(), _version(path), question_path, _version(question_path))


def _version(path: Path | None) -> tuple[int, int] | None:
    if path is None or not path.is_file():
        return None
    stat = path.stat()
    return stat.st_mtime_ns, stat.st_size


@lru_cache(maxsize=128)
def _cached(path: Path, version: tuple[int, int] | None, questions: Path | None,
            questions_version: tuple[int, int] | None) -> AnswerFile:
    answers = load_answer_file(path, questions=questions)
    answers.prompt_tokens.setflags(write=False)
    answers.output_tokens.setflags(write=False)
    return answers


def _parse(path: Path, text: str, questions: str | Path | None
           ) -> tuple[list[str], list[str], list[str], str, AnswerFormat]:
    stripped = text.lstrip()
    if stripped.startswith("["):
        return (*_alpaca_eval(path, text), "alpaca-eval")
    if stripped.startswith("{"):
        question_file = Path(questions) if questions is not None else path.parent.parent / "question.jsonl"
        return (*_mt_bench(path, text, question_file), "mt-bench")
    raise AnswerDataError(
        f"{path}: not an answer file: expected an AlpacaEval model_outputs.json (a JSON list of objects with "
        "instruction and output) or an MT-Bench model_answer .jsonl (one object per line with question_id and "
        "choices[0].turns)"
    )


def _alpaca_eval(path: Path, text: str) -> tuple[list[str], list[str], list[str], str]:
    try:
        rows = json.loads(text)
    except json.JSONDecodeError as error:
        raise AnswerDataError(f"{path}: not JSON (line {error.lineno}: {error.msg})") from error
    if not isinstance(rows, list) or not rows:
        raise AnswerDataError(f"{path}: must hold a non-empty JSON list of outputs")
    prompts, answers, categories, models = [], [], [], set()
    for index, row in enumerate(rows):
        prompts.append(json_field(row, ["instruction"], path, f"row {index}", str))
        answers.append(json_field(row, ["output"], path, f"row {index}", str))
        categories.append(str(row.get("dataset", "")))
        models.add(str(row.get("generator", "")))
    model = models.pop() if len(models) == 1 and "" not in models else path.stem
    return prompts, answers, categories, model


def _mt_bench(path: Path, text: str, question_file: Path) -> tuple[list[str], list[str], list[str], str]:
    if not question_file.is_file():
        raise AnswerDataError(f"{path}: its questions file {question_file} does not exist (give questions=PATH)")
    questions: dict[int, tuple[str, str]] = {}
    for number, row in parse_jsonl(question_file, read_text(question_file)):
        qid = json_field(row, ["question_id"], question_file, f"row {number}", int)
        prompt = json_field(row, ["turns", 0], question_file, f"row {number}", str)
        questions[qid] = (prompt, str(row.get("category", "")))
    prompts, answers, categories, models = [], [], [], set()
    for number, row in parse_jsonl(path, text):
        qid = json_field(row, ["question_id"], path, f"row {number}", int)
        if qid not in questions:
            raise AnswerDataError(f"{path}: row {number}: question_id {qid} is not in {question_file}")
        prompt, category = questions[qid]
        prompts.append(prompt)
        categories.append(category)
        answers.append(json_field(row, ["choices", 0, "turns", 0], path, f"row {number}", str))
        models.add(str(row.get("model_id", "")))
    if not prompts:
        raise AnswerDataError(f"{path}: holds no answers")
    model = models.pop() if len(models) == 1 and "" not in models else path.stem
    return prompts, answers, categories, model


# ---- reading helpers (shared with semsched.predict.length) -----------------------------------------------
def read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as error:
        raise AnswerDataError(f"{path}: cannot read it ({error.strerror or error})") from error
    except UnicodeDecodeError as error:
        raise AnswerDataError(f"{path}: not UTF-8 text ({error.reason})") from error


def read_json(path: Path) -> Any:
    try:
        return json.loads(read_text(path))
    except json.JSONDecodeError as error:
        raise AnswerDataError(f"{path}: not JSON (line {error.lineno}: {error.msg})") from error


def parse_jsonl(path: Path, text: str) -> list[tuple[int, Any]]:
    """(line number, parsed object) of every non-blank line of ``text`` (read from ``path``)."""
    rows = []
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            try:
                rows.append((number, json.loads(line)))
            except json.JSONDecodeError as error:
                raise AnswerDataError(f"{path}: row {number}: not JSON ({error.msg})") from error
    return rows


def json_field(row: Any, keys: list[str | int], path: Path, where: str, kind: type) -> Any:
    """``row[k0][k1]...`` checked to be a ``kind``; the error names the file, the row and the field."""
    value = row
    for key in keys:
        try:
            value = value[key]
        except (KeyError, IndexError, TypeError):
            value = None
            break
    if not isinstance(value, kind) or isinstance(value, bool):
        name = "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in keys).lstrip(".")
        raise AnswerDataError(f"{path}: {where}: field {name} must be a {kind.__name__} (got {value!r:.60})")
    return value


@lru_cache(maxsize=4)
def _tokenizer_at(path: Path) -> Any:
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(path))


def _tokenizer(directory: Path) -> Any:
    path = directory / TOKENIZER_FILE
    if not path.is_file():
        raise AnswerDataError(f"{path}: the Llama-2 tokenizer is missing (set SEMSCHED_DATA_DIR to the data "
                              "folder)")
    return _tokenizer_at(path)


def tokenizer(data_dir: str | Path | None = None) -> Any:
    """The Llama-2 tokenizer of the shared data folder (loaded once per process)."""
    return _tokenizer(Path(data_dir) if data_dir is not None else shared_data_dir())


def _token_counts(tokenizer: Any, texts: list[str]) -> npt.NDArray[np.int64]:
    """Llama-2 token count of each text (special tokens not counted; blank text counts 0)."""
    counts = np.zeros(len(texts), dtype=np.int64)
    nonblank = [i for i, text in enumerate(texts) if text.strip()]
    encodings = tokenizer.encode_batch([texts[i] for i in nonblank], add_special_tokens=False)
    for i, encoding in zip(nonblank, encodings, strict=True):
        counts[i] = len(encoding.ids)
    return counts


def token_counts(texts: list[str], data_dir: str | Path | None = None) -> npt.NDArray[np.int64]:
    """Llama-2 token count of each text (special tokens not counted; blank text counts 0)."""
    return _token_counts(tokenizer(data_dir), texts)
