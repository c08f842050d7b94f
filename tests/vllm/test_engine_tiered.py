"""seed 003's ``tiered`` policy in a real vLLM engine (``vllm.LLM``, tiny model, CPU), against vLLM's own FCFS
scheduler on the same workload in the same run (issue 14, "Inside vLLM").

Times are engine steps, counted by the test: exact and the same on any machine, where wall-clock TTFTs on a
shared 2-core machine are not.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.vllm.harness import running_llm

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

ADAPTER = "semsched.vllm.Scheduler"
POLICY = "tiered"  # the article's defaults: preemption limit 3 (then promoted), aging, victims of lower tiers only
PREEMPTION_LIMIT = 3
# Four long requests of the two lower tiers take all four sequence slots and would grow to 14 blocks each (56 in
# all) in a 32-block KV cache: more demand than capacity. Short PREMIUM requests arrive while they run.
LONG_OUTPUT, LONG_PROMPT = 400, 32
PREMIUM_OUTPUT, PREMIUM_PROMPT = 8, 64
PREMIUM_ARRIVAL_STEPS = (30, 60, 90, 120, 150)
#: PREMIUM's time-to-first-token target here, in engine steps from the step it arrives before
TTFT_TARGET_STEPS = 4
SHAPE = {"max_num_seqs": 4, "num_gpu_blocks": 32, "max_model_len": 512}


@dataclass
class _Outcome:
    tier: str
    arrived_step: int
    first_token_step: int | None = None
    tokens: int = 0
    finish_reason: str | None = None
    stop_reason: Any = None
    most_preemptions: int = 0  # the most times vLLM had preempted it (vLLM counts on its own request object)


def _mixed_tiers(llm: Any) -> dict[str, _Outcome]:
    """Run the workload step by step; per request: arrival and first-token steps, tokens, finish and stop
    reasons, and the most times vLLM had preempted it."""
    from vllm import SamplingParams

    engine = llm.llm_engine
    scheduler = engine.engine_core.engine_core.scheduler  # in-process engine core (conftest)
    rng = random.Random(0)
    outcomes: dict[str, _Outcome] = {}

    def add(request_id: str, tier: str, priority: int, prompt_len: int, max_tokens: int, step: int) -> None:
        prompt = {"prompt_token_ids": [rng.randrange(100, 31000) for _ in range(prompt_len)]}
        params = SamplingParams(max_tokens=max_tokens, ignore_eos=True, extra_args={"tier": tier})
        engine.add_request(request_id, prompt, params, priority=priority)
        outcomes[request_id] = _Outcome(tier, step)

    for i in range(2):
        add(f"background{i}", "BACKGROUND", 3, LONG_PROMPT, LONG_OUTPUT, 0)
        add(f"standard{i}", "STANDARD", 2, LONG_PROMPT, LONG_OUTPUT, 0)
    arrivals = list(PREMIUM_ARRIVAL_STEPS)
    step = 0
    while engine.has_unfinished_requests() or arrivals:
        while arrivals and arrivals[0] <= step:
            add(f"premium{len(PREMIUM_ARRIVAL_STEPS) - len(arrivals)}", "PREMIUM", 1, PREMIUM_PROMPT,
                PREMIUM_OUTPUT, step)
            arrivals.pop(0)
        step += 1
        for output in engine.step():
            outcome, completion = outcomes[output.request_id], output.outputs[0]
            outcome.tokens = len(completion.token_ids)
            if outcome.tokens and outcome.first_token_step is None:
                outcome.first_token_step = step
            if output.finished:
                outcome.finish_reason, outcome.stop_reason = completion.finish_reason, completion.stop_reason
        for engine_id, request in scheduler.requests.items():
            outcome = outcomes[engine_id.rsplit("-", 1)[0]]  # the engine core adds a suffix to each id
            outcome.most_preemptions = max(outcome.most_preemptions, request.num_preemptions)
        assert step < 20_000, "no progress"
    return outcomes


def _ttft_steps(outcome: _Outcome) -> int:
    assert outcome.first_token_step is not None
    return outcome.first_token_step - outcome.arrived_step


def test_tiered_meets_premium_ttft_that_fcfs_misses_with_bounded_preemptions(tiny_model_dir: Path) -> None:
    runs = {
        "vllm-fcfs": {"scheduling_policy": "fcfs"},
        "tiered": {"scheduler_cls": ADAPTER, "env": {"SEMSCHED_POLICY": POLICY}},
    }
    results: dict[str, dict[str, _Outcome]] = {}
    for name, options in runs.items():
        with running_llm(tiny_model_dir, **SHAPE, **options) as llm:
            results[name] = _mixed_tiers(llm)
    for name, outcomes in results.items():  # every request of every tier finishes whole: nothing lost
        for request_id, outcome in outcomes.items():
            expected = PREMIUM_OUTPUT if outcome.tier == "PREMIUM" else LONG_OUTPUT
            assert (outcome.tokens, outcome.finish_reason) == (expected, "length"), (name, request_id, outcome)
    premium = {name: [_ttft_steps(o) for o in outcomes.values() if o.tier == "PREMIUM"]
               for name, outcomes in results.items()}
    assert all(steps <= TTFT_TARGET_STEPS for steps in premium["tiered"]), premium
    assert all(steps > TTFT_TARGET_STEPS for steps in premium["vllm-fcfs"]), premium
    tiered = results["tiered"]
    assert any(o.most_preemptions for o in tiered.values())  # PREMIUM displaced lower tiers to start
    assert all(o.most_preemptions <= PREEMPTION_LIMIT for o in tiered.values()), {
        rid: o.most_preemptions for rid, o in tiered.items()}
    assert all(o.most_preemptions == 0 for o in tiered.values() if o.tier == "PREMIUM")
