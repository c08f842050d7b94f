"""Spec-Bench logs as requests, and the spec-bench and mbpp-spec workloads (semsched/workloads/spec_bench.py)."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import semsched.workloads.spec_bench  # noqa: F401  (registers spec-bench and mbpp-spec)
from semsched.sim.acceptance import FittedAcceptance
from semsched.workloads import WorkloadError, build_workload
from semsched.workloads.spec_bench import (
    SHORT_NAMES,
    SpecBenchError,
    load_mbpp,
    load_spec_bench,
    mbpp_acceptance,
    resolve_log,
)

LOG_DIR = "spec_bench/model_answer"
QUESTIONS = "spec_bench/question.jsonl"
MT_BENCH_CATEGORIES = ("writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities")
SPEC_BENCH_CATEGORIES = ("translation", "summarization", "qa", "math_reasoning", "rag")


def logged_rows(path: Path) -> list[dict[str, Any]]:
    """The log's lines, parsed with json alone (independently of the loader)."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


# ---- the real logs -----------------------------------------------------------------------------------------
@pytest.mark.data
@pytest.mark.parametrize("name", sorted(SHORT_NAMES))
def test_every_turn_of_a_real_log_loads_with_its_logged_rounds(real_data_dir: Path, name: str) -> None:
    log = load_spec_bench(name)
    path = real_data_dir / LOG_DIR / SHORT_NAMES[name]
    assert log.method == name and log.path.resolve() == path.resolve()
    expected = []
    for row in logged_rows(path):
        choice = row["choices"][0]
        start = 0
        for index, (steps, tokens) in enumerate(zip(choice["decoding_steps"], choice["new_tokens"], strict=True)):
            expected.append((row["question_id"], row["category"], index, tokens, steps,
                             tuple(choice["accept_lengths"][start:start + steps])))
            start += steps
    got = [(t.question_id, t.category, t.turn, t.output_tokens, t.decoding_steps, t.accept_lengths)
           for t in log.turns]
    assert got == expected and len(got) == 80 * 5 + 10 * 8 * 2
    for turn in log.turns:
        assert len(turn.accept_lengths) == turn.decoding_steps
        assert sum(turn.accept_lengths) == turn.output_tokens
        assert turn.prompt_tokens >= 1 and turn.wall_time_s > 0
    assert log.accept_sequences() == tuple(t.accept_lengths for t in log.turns)


@pytest.mark.data
def test_draft_tokens_are_read_from_the_longest_round() -> None:
    assert {name: load_spec_bench(name).draft_tokens for name in SHORT_NAMES} == {
        "eagle": 5, "sps-68m": 20, "vanilla": 0,
    }
    assert set(load_spec_bench("vanilla").accept_sequences()[0]) == {1}


@pytest.mark.data
def test_a_later_turn_is_fed_the_conversation_so_far(real_data_dir: Path) -> None:
    questions = {q["question_id"]: q["turns"] for q in logged_rows(real_data_dir / QUESTIONS)}
    log = load_spec_bench("eagle", category="coding")
    first, second = log.turns[0], log.turns[1]
    assert (first.question_id, first.turn, second.question_id, second.turn) == (first.question_id, 0,
                                                                                first.question_id, 1)
    answer = next(row for row in logged_rows(log.path) if row["question_id"] == first.question_id)
    asked = questions[first.question_id]
    assert first.prompt_text == asked[0]
    assert second.prompt_text == "\n\n".join([asked[0], answer["choices"][0]["turns"][0], asked[1]])
    assert second.prompt_tokens > first.prompt_tokens + 100  # the answer is in it


@pytest.mark.data
def test_category_and_turn_filters() -> None:
    full = load_spec_bench("sps-68m")
    assert set(full.categories) == set(MT_BENCH_CATEGORIES + SPEC_BENCH_CATEGORIES)
    qa = load_spec_bench("sps-68m", category="qa")
    assert len(qa) == 80 and {t.category for t in qa.turns} == {"qa"}
    coding = load_spec_bench("sps-68m", category="coding")
    assert len(coding) == 20 and Counter(t.turn for t in coding.turns) == {0: 10, 1: 10}
    first = load_spec_bench("sps-68m", category="coding", turns="first")
    assert len(first) == 10 and all(t.turn == 0 for t in first.turns)
    assert len(load_spec_bench("sps-68m", turns="first")) == 480


@pytest.mark.data
def test_an_unknown_category_or_turns_value_is_refused() -> None:
    with pytest.raises(SpecBenchError, match=r"category: 'poetry' is not in .*; its categories: coding, "
                                             r"extraction, humanities, math, math_reasoning, qa"):
        load_spec_bench("eagle", category="poetry")
    with pytest.raises(SpecBenchError, match=r"turns: must be one of all, first \(got 'second'\)"):
        load_spec_bench("eagle", turns="second")
    with pytest.raises(SpecBenchError, match=r"no such Spec-Bench log .*eagle, sps-68m, vanilla"):
        load_spec_bench("medusa")


@pytest.mark.data
def test_logs_are_read_once_per_file_version(real_data_dir: Path, tmp_path: Path) -> None:
    assert load_spec_bench("eagle").turns is load_spec_bench("eagle").turns
    source = real_data_dir / LOG_DIR / SHORT_NAMES["eagle"]
    copy = tmp_path / "eagle-copy.jsonl"
    lines = source.read_text(encoding="utf-8").splitlines()
    copy.write_text("\n".join(lines[:3]) + "\n", encoding="utf-8")
    questions = real_data_dir / QUESTIONS
    assert len(load_spec_bench(copy, questions=questions)) == 6
    copy.write_text("\n".join(lines[:4]) + "\n", encoding="utf-8")
    os.utime(copy, ns=(1, 1))  # a new version even within the clock's resolution
    reread = load_spec_bench(copy, questions=questions)
    assert len(reread) == 8 and reread.method == "eagle-copy"
    assert resolve_log(source)[0] == "eagle"


# ---- malformed lines ---------------------------------------------------------------------------------------
def _broken(row: dict[str, Any], how: str) -> str:
    choice = row["choices"][0]
    if how == "bad json":
        return json.dumps(row)[:-5]
    if how == "sum":
        choice["accept_lengths"][3] += 1
    elif how == "missing":
        del choice["decoding_steps"]
    elif how == "zero":
        choice["accept_lengths"][5] = 0
    elif how == "rounds":
        choice["accept_lengths"].pop()
    elif how == "turn sums":  # a token moved from turn 0's first round to turn 1's: the total is unchanged
        choice["accept_lengths"][0] -= 1
        choice["accept_lengths"][choice["decoding_steps"][0]] += 1
    elif how == "type":
        choice["new_tokens"][1] = "952"
    elif how == "question":
        row["question_id"] = 99_999
    return json.dumps(row)


@pytest.mark.data
@pytest.mark.parametrize(("how", "message"), [
    ("bad json", r":4: not JSON"),
    ("sum", r":4: choices\[0\]\.accept_lengths: sums to \d+ but new_tokens sum to \d+"),
    ("missing", r":4: choices\[0\]\.decoding_steps: missing"),
    ("zero", r":4: choices\[0\]\.accept_lengths\[5\]: must be an integer >= 1 \(got 0\)"),
    ("rounds", r":4: choices\[0\]\.accept_lengths: has \d+ rounds but decoding_steps sum to \d+"),
    ("turn sums", r":4: choices\[0\]\.accept_lengths: turn 0's \d+ rounds sum to \d+ but new_tokens\[0\] is \d+"),
    ("type", r":4: choices\[0\]\.new_tokens\[1\]: must be an integer \(got '952'\)"),
    ("question", r":4: question_id: 99999 is not in the questions file"),
])
def test_a_malformed_line_is_named_by_file_and_line(real_data_dir: Path, tmp_path: Path, how: str,
                                                     message: str) -> None:
    source = real_data_dir / LOG_DIR / SHORT_NAMES["eagle"]
    lines = source.read_text(encoding="utf-8").splitlines()[:4]
    lines[3] = _broken(json.loads(lines[3]), how)
    path = tmp_path / f"broken-{how.replace(' ', '-')}.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(SpecBenchError, match=f"^{path}{message}"):
        load_spec_bench(path, questions=real_data_dir / QUESTIONS)


def test_a_log_without_its_questions_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "model_answer" / "x.jsonl"
    path.parent.mkdir()
    path.write_text("{}\n", encoding="utf-8")
    with pytest.raises(SpecBenchError, match=r"x\.jsonl: its questions file .*question\.jsonl does not exist"):
        load_spec_bench(path)


# ---- workloads ---------------------------------------------------------------------------------------------
@pytest.mark.data
def test_spec_bench_requests_are_turns_of_the_log_with_their_rounds() -> None:
    workload = build_workload("spec-bench:log=eagle;category=qa", rate_per_s=4.0, num_requests=200, seed=3)
    assert workload.name == "spec-bench[eagle/qa]" and len(workload) == 200
    turns = {t.prompt_text: t for t in load_spec_bench("eagle", category="qa").turns}
    assert workload.accept_lengths is not None and workload.prompt_text is not None
    for i, text in enumerate(workload.prompt_text):
        turn = turns[text]
        assert workload.accept_lengths[i] == turn.accept_lengths
        assert (int(workload.prompt_tokens[i]), int(workload.output_tokens[i])) == (turn.prompt_tokens,
                                                                                    turn.output_tokens)
    # 200 requests over 80 turns: two shuffled passes, then 40 distinct turns, as mt-bench deals its rows
    assert sorted(Counter(Counter(workload.prompt_text).values()).items()) == [(2, 40), (3, 40)]
    # the arrivals are the other answer workloads' (the same Poisson draw from the same seed)
    poisson = build_workload("azure-conv", rate_per_s=4.0, num_requests=200, seed=3)
    assert workload.arrival_time_s.tolist() == poisson.arrival_time_s.tolist()
    request = workload.to_requests()[0]
    assert request.accept_lengths == workload.accept_lengths[0]


@pytest.mark.data
def test_spec_bench_defaults_and_first_turns() -> None:
    workload = build_workload("spec-bench", rate_per_s=2.0, duration_s=60.0, seed=0)
    assert workload.name == "spec-bench[eagle]"
    first = build_workload("spec-bench:log=sps-68m;turns=first", rate_per_s=2.0, num_requests=600, seed=0)
    assert first.name == "spec-bench[sps-68m/first]"
    for built in (workload, first):
        assert built.accept_lengths is not None and all(r is not None for r in built.accept_lengths)
        assert built.prompt_tokens.min() >= 1 and built.output_tokens.min() >= 1
        sums = [sum(r or ()) for r in built.accept_lengths]
        assert sums == built.output_tokens.tolist()


@pytest.mark.data
def test_workload_errors_name_the_parameter() -> None:
    with pytest.raises(WorkloadError, match=r"category: 'poetry' is not in .*; its categories: coding"):
        build_workload("spec-bench:category=poetry", rate_per_s=1.0, num_requests=5, seed=0)
    with pytest.raises(WorkloadError, match=r"log: .*nope\.jsonl: no such Spec-Bench log"):
        build_workload("spec-bench:log=/nope.jsonl", rate_per_s=1.0, num_requests=5, seed=0)
    with pytest.raises(WorkloadError, match=r"turns: must be one of all, first"):
        build_workload("spec-bench:turns=last", rate_per_s=1.0, num_requests=5, seed=0)
    with pytest.raises(WorkloadError, match=r"category: 'poetry' is not in"):
        build_workload("mbpp-spec:category=poetry", rate_per_s=1.0, num_requests=5, seed=0)
    with pytest.raises(WorkloadError, match=r"mbpp: .*missing\.jsonl: no such MBPP file"):
        build_workload("mbpp-spec:mbpp=/missing.jsonl", rate_per_s=1.0, num_requests=5, seed=0)


@pytest.mark.data
def test_mbpp_spec_requests_are_mbpp_problems_without_logged_rounds(real_data_dir: Path) -> None:
    workload = build_workload("mbpp-spec", rate_per_s=5.0, num_requests=300, seed=1)
    assert workload.name == "mbpp-spec[eagle/coding]" and len(workload) == 300
    assert workload.accept_lengths == (None,) * 300
    assert workload.prompt_tokens.min() >= 1 and workload.output_tokens.min() >= 1
    rows = logged_rows(real_data_dir / "mbpp" / "mbpp.jsonl")
    problems = load_mbpp()
    assert len(problems) == len(rows) == 974
    row = rows[0]
    task = f"You are an expert Python programmer, and here is your task: {row['text']}"
    assert problems.prompts[0].startswith(task)
    assert problems.prompts[0].endswith("\n".join(row["test_list"]))
    assert set(workload.prompt_text or ()) <= set(problems.prompts)
    assert build_workload("mbpp-spec:log=sps-68m", rate_per_s=5.0, num_requests=3, seed=1).name == (
        "mbpp-spec[sps-68m/coding]"
    )


@pytest.mark.data
def test_mbpp_acceptance_is_the_fit_to_the_coding_turns() -> None:
    fitted = mbpp_acceptance("eagle")
    assert isinstance(fitted, FittedAcceptance)
    assert fitted.draft_tokens == 5 and fitted.base_rates.size == 20  # 10 coding questions, 2 turns each
    coding = load_spec_bench("eagle", category="coding").accept_sequences()
    assert fitted.log_mean_yield == pytest.approx(sum(map(sum, coding)) / sum(map(len, coding)))
    everything = load_spec_bench("eagle").accept_sequences()
    assert fitted.log_mean_yield > sum(map(sum, everything)) / sum(map(len, everything)) + 0.5
    assert mbpp_acceptance("eagle") is fitted  # fitted once
    sps = mbpp_acceptance("sps-68m")
    assert sps.draft_tokens == 20 and sps.log_mean_yield == pytest.approx(3.14, abs=0.01)
    rounds = sps.rounds(np.random.default_rng(0), 500)
    assert sum(rounds) >= 500 and max(rounds) <= 21
    with pytest.raises(SpecBenchError, match=r"log: vanilla .* never accepted a draft"):
        mbpp_acceptance("vanilla")
    with pytest.raises(SpecBenchError, match=r"category: 'poetry' is not in"):
        mbpp_acceptance("eagle", "poetry")


@pytest.mark.data
def test_coding_has_the_highest_eagle_acceptance() -> None:
    """Why MBPP prompts get the coding category's model (see mbpp_acceptance)."""
    log = load_spec_bench("eagle")

    def mean(category: str) -> float:
        turns = log.filtered(category).turns
        return sum(t.output_tokens for t in turns) / sum(t.decoding_steps for t in turns)

    means = {category: mean(category) for category in log.categories}
    assert max(means, key=means.__getitem__) == "coding"
    assert means["coding"] == pytest.approx(4.51, abs=0.01)
