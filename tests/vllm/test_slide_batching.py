"""SlideBatching inside vLLM: the adapter runs exactly the plan Algorithm 1 made (its requests, at most their
planned tokens, nothing held back runs), with per-request SLOs from ``vllm_xargs``, and the workload completes."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

import semsched.vllm.scheduler as adapter_module
from semsched.policies.slide_batching import SlideBatching
from semsched.vllm.harness import HarnessConfig, SchedulerHarness

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


class _TickingClock:
    """``time.time()`` advancing 2 ms per call: deterministic, and deadlines come and go within the run."""

    def __init__(self) -> None:
        self.now_s = 1_000.0

    def time(self) -> float:
        self.now_s += 0.002
        return self.now_s


@pytest.mark.parametrize("async_scheduling", [False, True], ids=["sync", "async"])
def test_vllm_runs_the_slide_batching_plan(tiny_model_dir: Path, async_scheduling: bool,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    clock = _TickingClock()
    monkeypatch.setattr(adapter_module, "time", clock)
    h = SchedulerHarness(
        "semsched.vllm.Scheduler", tiny_model_dir,
        HarnessConfig(num_blocks=200, block_size=16, max_num_seqs=16, max_num_batched_tokens=512,
                      async_scheduling=async_scheduling),
        env={"SEMSCHED_POLICY": "slide-batching:eta_ms=20"},
    )
    policy = h.scheduler.semsched_policy
    assert isinstance(policy, SlideBatching)
    rng = random.Random(0)
    outputs = {}
    for i in range(12):
        request_id = f"r{i}"
        outputs[request_id] = rng.randrange(4, 40)
        h.add(request_id, [rng.randrange(100, 31000) for _ in range(rng.randrange(20, 400))], outputs[request_id],
              priority=i % 2, arrival_time=clock.time(),
              extra_args={"ttft_slo_ms": 200 + 50 * i, "tpot_slo_ms": 30})
    checked = 0
    while h.has_work():
        record = h.step()  # (the plan of the batch this call scheduled is the policy's latest)
        plan = policy.last_plan
        if not record.num_scheduled_tokens or plan is None:
            continue
        chosen = dict(plan.chosen)
        for request_id, tokens in record.num_scheduled_tokens.items():
            assert request_id in chosen, f"step {record.step}: {request_id} ran outside the plan {plan.chosen}"
            assert tokens <= chosen[request_id]
        checked += 1
    assert checked > 10
    assert h.scheduler.has_requests() is False
    assert h.output_tokens == outputs  # every request finished with all its tokens
    assert policy.estimator.stats().num_steps > 0  # the adapter's measured steps reached the estimator
