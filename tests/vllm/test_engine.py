"""semsched's scheduler in a real vLLM engine (``vllm.LLM``, tiny model, CPU), against vLLM's own priority policy
on the same workload in the same run."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from tests.vllm.harness import running_llm

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

ADAPTER = "semsched.vllm.Scheduler"
LOW_OUTPUT, HIGH_OUTPUT = 480, 32


def _late_high_priority(llm: Any) -> dict[str, tuple[int, int, str | None, Any]]:
    """Two low-priority requests (priority 5) fill the 32-block KV cache as they grow to 16 blocks each; when
    they are 300 tokens in, two high-priority requests (priority 0) arrive whose 416-token prompts (13 blocks)
    do not fit in what is left. Returns request id -> (finish step, output tokens, finish reason, stop reason)."""
    from vllm import SamplingParams

    engine = llm.llm_engine
    rng = random.Random(0)

    def add(request_id: str, prompt_len: int, max_tokens: int, priority: int, **extra: Any) -> None:
        prompt = {"prompt_token_ids": [rng.randrange(100, 31000) for _ in range(prompt_len)]}
        params = SamplingParams(max_tokens=max_tokens, ignore_eos=True, **extra)
        engine.add_request(request_id, prompt, params, priority=priority)

    for i in range(2):
        add(f"low{i}", 32, LOW_OUTPUT, 5)
    finished: dict[str, tuple[int, int, str | None, Any]] = {}
    produced: dict[str, int] = {}
    step, arrived = 0, False
    while engine.has_unfinished_requests():
        step += 1
        for output in engine.step():
            completion = output.outputs[0]
            produced[output.request_id] = len(completion.token_ids)
            if output.finished:
                finished[output.request_id] = (step, len(completion.token_ids), completion.finish_reason,
                                               completion.stop_reason)
        if not arrived and produced.get("low0", 0) >= 300:
            arrived = True
            for i in range(2):
                add(f"high{i}", 416, HIGH_OUTPUT, 0)
            add("bad", 8, 4, 0, extra_args={"ttft_slo_ms": -1})
    return finished


def test_strict_priority_with_preemption_finishes_high_priority_first_unlike_vllm(tiny_model_dir: Path) -> None:
    runs = {
        "vllm-priority": {"scheduling_policy": "priority"},
        "semsched": {"scheduler_cls": ADAPTER, "env": {"SEMSCHED_POLICY": "priority-preempt:exclusive=true"}},
    }
    order: dict[str, list[str]] = {}
    for name, options in runs.items():
        with running_llm(tiny_model_dir, **options) as llm:
            finished = _late_high_priority(llm)
        completed = {rid: f for rid, f in finished.items() if rid != "bad"}
        assert {rid: f[1] for rid, f in completed.items()} == {
            "low0": LOW_OUTPUT, "low1": LOW_OUTPUT, "high0": HIGH_OUTPUT, "high1": HIGH_OUTPUT
        }
        assert all(f[2] == "length" for f in completed.values())
        order[name] = sorted(completed, key=lambda rid: completed[rid][0])
        if name == "semsched":  # a malformed input ends that request alone, with the reason
            assert finished["bad"][1:3] == (0, "abort")
            assert "vllm_xargs.ttft_slo_ms" in str(finished["bad"][3])
    assert set(order["semsched"][:2]) == {"high0", "high1"}
    # vLLM never displaces running work for a waiting request (vllm issue #40004): a low-priority request that was
    # running when the high-priority ones arrived finishes first
    assert order["vllm-priority"][0].startswith("low")


def test_slide_batching_serves_every_request_in_a_real_engine(tiny_model_dir: Path) -> None:
    """PROSERVE's SlideBatching planning every step of a real engine (per-request SLOs and priorities from
    ``extra_args``, its estimator corrected from the engine's measured steps): every request ends with exactly its
    tokens."""
    from vllm import SamplingParams

    rng = random.Random(1)
    max_tokens = [rng.randrange(4, 48) for _ in range(10)]
    prompts = [{"prompt_token_ids": [rng.randrange(100, 31000) for _ in range(rng.randrange(16, 300))]}
               for _ in max_tokens]
    params = [SamplingParams(max_tokens=k, ignore_eos=True, temperature=0.0,
                             extra_args={"ttft_slo_ms": 500 + 100 * i, "tpot_slo_ms": 50})
              for i, k in enumerate(max_tokens)]
    options = {"scheduler_cls": ADAPTER, "env": {"SEMSCHED_POLICY": "slide-batching:profile=a100-qwen1.5-4b"}}
    with running_llm(tiny_model_dir, **options) as llm:
        outputs = llm.generate(prompts, params, priority=[i % 2 for i in range(len(max_tokens))], use_tqdm=False)
    assert [len(out.outputs[0].token_ids) for out in outputs] == max_tokens
    assert all(out.outputs[0].finish_reason == "length" for out in outputs)


def test_utility_serves_every_request_in_a_real_engine(tiny_model_dir: Path) -> None:
    """``utility`` with its time-dependent layers on (deadlines at risk with displacement, TPOT protection,
    hopeless demotion, a short starvation floor, re-keyed every 50 ms) in a real engine whose KV cache holds only
    some of the requests at once, with tiers (and their SLOs), urgency and predicted lengths from ``extra_args``:
    every request ends with exactly its tokens."""
    from vllm import SamplingParams

    rng = random.Random(3)
    max_tokens = [rng.randrange(4, 64) for _ in range(12)]
    prompts = [{"prompt_token_ids": [rng.randrange(100, 31000) for _ in range(rng.randrange(16, 300))]}
               for _ in max_tokens]
    tiers = ["PREMIUM", "STANDARD", "BACKGROUND"]
    params = [SamplingParams(max_tokens=k, ignore_eos=True, temperature=0.0,
                             extra_args={"tier": tiers[i % 3], "urgency": i % 4,
                                         "predicted_lengths": [max(1, k // 2), 2 * k],
                                         "predicted_probs": [0.5, 0.5]})
              for i, k in enumerate(max_tokens)]
    spec = ("utility:risk_slack=0.5;protect_tpot=true;hopeless=demote;starve_s=0.5;check_s=0.05;"
            "profile=a100-qwen1.5-4b")
    options = {"scheduler_cls": ADAPTER, "env": {"SEMSCHED_POLICY": spec}, "num_gpu_blocks": 24,
               "max_num_seqs": 4}
    with running_llm(tiny_model_dir, **options) as llm:
        outputs = llm.generate(prompts, params, priority=[1 + i % 3 for i in range(len(max_tokens))],
                               use_tqdm=False)
    assert [len(out.outputs[0].token_ids) for out in outputs] == max_tokens
    assert all(out.outputs[0].finish_reason == "length" for out in outputs)
