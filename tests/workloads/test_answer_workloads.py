"""alpaca-eval, mt-bench and mixed: real prompts with one model's real output lengths (answer_workloads.py)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from semsched.workloads import WorkloadError, build_workload
from semsched.workloads.answer_workloads import row_indices
from semsched.workloads.answers import load_answer_file

ALPACA = "alpaca_eval/model_outputs/Meta-Llama-3-8B-Instruct.json"
MT_BENCH = "mt_bench/model_answer/claude-v1.jsonl"


def _pairs(path: Path) -> set[tuple[str, int, int]]:
    """(prompt, prompt tokens, output tokens) of every row of an answer file."""
    answers = load_answer_file(path)
    return set(zip(answers.prompts, answers.prompt_tokens.tolist(), answers.output_tokens.tolist(), strict=True))


def _rows(workload_prompts: tuple[str, ...] | None, prompt_tokens: np.ndarray,
          output_tokens: np.ndarray) -> list[tuple[str, int, int]]:
    assert workload_prompts is not None
    return list(zip(workload_prompts, prompt_tokens.tolist(), output_tokens.tolist(), strict=True))


# ---- real files ------------------------------------------------------------------------------------------
@pytest.mark.data
def test_alpaca_eval_requests_are_rows_of_the_file_with_poisson_arrivals(real_data_dir: Path) -> None:
    path = real_data_dir / ALPACA
    workload = build_workload(f"alpaca-eval:outputs={path}", rate_per_s=5.0, duration_s=120.0, seed=3)
    rows = _rows(workload.prompt_text, workload.prompt_tokens, workload.output_tokens)
    assert set(rows) <= _pairs(path)
    assert len(set(rows)) == len(rows) > 500  # fewer requests than rows: no row twice
    # the arrivals are azure-conv's (the same Poisson draw from the same seed), whatever the lengths
    poisson = build_workload("azure-conv", rate_per_s=5.0, duration_s=120.0, seed=3)
    assert workload.arrival_time_s.tolist() == poisson.arrival_time_s.tolist()
    assert workload.name == "alpaca-eval"


@pytest.mark.data
def test_mt_bench_with_default_and_explicit_questions(real_data_dir: Path) -> None:
    path = real_data_dir / MT_BENCH
    default = build_workload(f"mt-bench:answers={path}", rate_per_s=2.0, num_requests=200, seed=1)
    questions = real_data_dir / "mt_bench" / "question.jsonl"
    explicit = build_workload(f"mt-bench:answers={path};questions={questions}", rate_per_s=2.0,
                              num_requests=200, seed=1)
    assert len(default) == 200
    assert default.prompt_text == explicit.prompt_text
    rows = _rows(default.prompt_text, default.prompt_tokens, default.output_tokens)
    assert set(rows) <= _pairs(path)
    # 200 requests over 80 rows: two whole shuffled passes, then 40 distinct rows of a third
    counts = Counter(rows)
    assert len(counts) == 80 and sorted(Counter(counts.values()).items()) == [(2, 40), (3, 40)]


@pytest.mark.data
def test_file_order_cycles_through_the_file(real_data_dir: Path) -> None:
    path = real_data_dir / MT_BENCH
    workload = build_workload(f"mt-bench:answers={path};order=file", rate_per_s=2.0, num_requests=100, seed=0)
    answers = load_answer_file(path)
    expected = [answers.prompts[i % len(answers)] for i in range(100)]
    assert list(workload.prompt_text or ()) == expected


@pytest.mark.data
def test_caps_and_request_count_are_respected(real_data_dir: Path) -> None:
    path = real_data_dir / ALPACA
    spec = f"alpaca-eval:outputs={path};max_output_tokens=64;max_prompt_tokens=32"
    workload = build_workload(spec, rate_per_s=50.0, duration_s=100.0, num_requests=300, seed=0)
    assert len(workload) == 300
    assert workload.output_tokens.max() == 64 and workload.prompt_tokens.max() == 32


@pytest.mark.data
def test_mixed_interleaves_the_parts_at_random_with_the_seed(real_data_dir: Path) -> None:
    alpaca, mt_bench = real_data_dir / ALPACA, real_data_dir / MT_BENCH
    spec = f"mixed:parts={mt_bench}+{alpaca}"
    workload = build_workload(spec, rate_per_s=4.0, duration_s=200.0, seed=5)
    texts = list(workload.prompt_text or ())
    mt_bench_prompts = set(load_answer_file(mt_bench).prompts)
    from_mt_bench = [text in mt_bench_prompts for text in texts]
    assert 0 < sum(from_mt_bench) < len(texts)
    first_alpaca = from_mt_bench.index(False)
    assert any(from_mt_bench[first_alpaca:])  # not one part after the other: interleaved
    rows = set(_rows(workload.prompt_text, workload.prompt_tokens, workload.output_tokens))
    assert rows <= _pairs(mt_bench) | _pairs(alpaca)
    again = build_workload(spec, rate_per_s=4.0, duration_s=200.0, seed=5)
    other = build_workload(spec, rate_per_s=4.0, duration_s=200.0, seed=6)
    assert again.prompt_text == workload.prompt_text and other.prompt_text != workload.prompt_text


# ---- errors ----------------------------------------------------------------------------------------------
@pytest.mark.data
def test_a_file_of_the_wrong_format_is_refused_naming_it(
    real_data_dir: Path, write_file: Callable[[str, str], Path]
) -> None:
    bogus = write_file("outputs.json", '"just a string"\n')
    with pytest.raises(WorkloadError, match=rf"outputs: {bogus}: not an answer file"):
        build_workload(f"alpaca-eval:outputs={bogus}", rate_per_s=1.0, duration_s=10.0, seed=0)
    mt_bench = real_data_dir / MT_BENCH
    with pytest.raises(WorkloadError, match=rf"outputs: {mt_bench} is an mt-bench answer file.*mt-bench:answers"):
        build_workload(f"alpaca-eval:outputs={mt_bench}", rate_per_s=1.0, duration_s=10.0, seed=0)
    with pytest.raises(WorkloadError, match=rf"parts: {bogus}"):
        build_workload(f"mixed:parts={mt_bench}+{bogus}", rate_per_s=1.0, duration_s=10.0, seed=0)


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "nothing.jsonl"
    with pytest.raises(WorkloadError, match=rf"answers: answer file {missing} not found"):
        build_workload(f"mt-bench:answers={missing}", rate_per_s=1.0, duration_s=10.0, seed=0)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("alpaca-eval", "outputs: required"),
        ("mt-bench", "answers: required"),
        ("mixed", "parts: required"),
        ("mixed:parts=a.json++b.json", "parts: an empty path"),
        ("mixed:parts=a.json+a.json", "parts: a file is given twice"),
        ("alpaca-eval:outputs=a.json;order=random", "order: must be one of shuffle, file"),
    ],
)
def test_bad_specs_name_the_parameter(spec: str, message: str) -> None:
    with pytest.raises(WorkloadError, match=message):
        build_workload(spec, rate_per_s=1.0, duration_s=10.0, seed=0)


# ---- row order -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("count", [1, 7, 10, 23])
def test_shuffled_passes_deal_every_row_before_any_repeats(count: int) -> None:
    picked = row_indices(10, count, "shuffle", np.random.default_rng(0))
    assert picked.shape == (count,)
    for start in range(0, count, 10):
        chunk = picked[start:start + 10].tolist()
        assert len(set(chunk)) == len(chunk) and set(chunk) <= set(range(10))
