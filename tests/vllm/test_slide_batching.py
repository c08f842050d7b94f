"""SlideBatching inside vLLM: the adapter runs exactly the plan Algorithm 1 made (its requests, at most their
planned tokens, nothing held back runs), with per-request SLOs from ``vllm_xargs``, and the workload completes;
without SLOs, the plans it keeps while the running set stays are the full plan of every step."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest

import semsched.vllm.scheduler as adapter_module
from semsched.policies.slide_batching import SlideBatching
from semsched.vllm.harness import HarnessConfig, SchedulerHarness
from tests.policies.test_slide_batching_incremental import _checking, _count_deadline_free

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


def test_vllm_deadline_free_plans_are_the_full_plan(tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without SLOs (the scheduler-only benchmark's state) the running-only plans, kept while the running set
    stays, are the full plan of every request at every step."""
    compared: Counter[str] = Counter()
    monkeypatch.setattr(SlideBatching, "_running_plan", _checking(compared))
    monkeypatch.setattr(adapter_module, "time", _TickingClock())
    h = SchedulerHarness("semsched.vllm.Scheduler", tiny_model_dir,
                         HarnessConfig(num_blocks=200, block_size=16, max_num_seqs=6, max_num_batched_tokens=256),
                         env={"SEMSCHED_POLICY": "slide-batching"})
    rng = random.Random(1)
    for i in range(16):
        h.add(f"r{i}", [rng.randrange(100, 31000) for _ in range(rng.randrange(8, 120))], rng.randrange(4, 60),
              priority=i % 3)
    _count_deadline_free(compared, monkeypatch)
    h.run()
    assert compared["running only"] > compared["deadline free"] > 0 and compared["merged"] > 0
