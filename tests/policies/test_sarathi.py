"""sarathi-fcfs / sarathi-priority: decodes first, chunked prefill, the step priced within the TBT SLO."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from semsched.core.plan import BatchPlan, StepResult
from semsched.core.policy import StepBudget
from semsched.core.request import Request
from semsched.core.scheduler import Scheduler
from semsched.latency import AnalyticLatencyModel, LatencyModel, load_profile
from semsched.policies import PolicyError, make_policy
from semsched.policies.sarathi import DEFAULT_PROFILE, TBTBudget
from semsched.policies.vllm_fcfs import in_prompt
from tests.policies.factories import service_order
from tests.support import check_kv, check_plan, make_request, make_scheduler, random_requests


def _plans(scheduler: Scheduler, requests: list[Request], step_s: float = 0.01) -> list[tuple[BatchPlan, bool]]:
    """Every plan, with whether it cut a prefill short (computed before the step changes the requests)."""
    pending = sorted(requests, key=lambda r: r.arrival_time_s)
    now, index, plans = 0.0, 0, []
    while index < len(pending) or scheduler.has_unfinished():
        while index < len(pending) and pending[index].arrival_time_s <= now:
            scheduler.add_request(pending[index], now)
            index += 1
        plan = scheduler.schedule(now)
        check_plan(scheduler, plan)
        check_kv(scheduler)
        if plan.is_empty:
            assert index < len(pending), "stalled with unfinished requests"
            now = pending[index].arrival_time_s
            continue
        plans.append((plan, any(c.num_tokens < c.request.num_uncomputed_tokens for c in plan.prefill)))
        now += step_s
        scheduler.update(plan, StepResult(end_time_s=now))
    return plans


@pytest.mark.parametrize("policy", ["sarathi-fcfs", "sarathi-priority"])
def test_step_time_never_exceeds_the_tbt_slo_but_for_the_one_token_floor(policy: str) -> None:
    slo_s = 0.02
    latency = load_profile(DEFAULT_PROFILE)
    scheduler = make_scheduler(f"{policy}:tbt_slo_ms={slo_s * 1000:g}", block_size=16, num_gpu_blocks=2000,
                               max_num_batched_tokens=2048, max_num_seqs=32, watermark=0.0)
    requests = random_requests(7, 80, rate=25.0, max_prompt=1500, max_output=80)
    plans = _plans(scheduler, requests)
    capped = floor = 0
    for plan, cut in plans:
        prefill = [(c.num_tokens, c.context_tokens) for c in plan.prefill]
        step_s = latency.step_time_s(prefill, len(plan.decode), plan.decode_context_tokens)
        prefill_tokens = sum(c.num_tokens for c in plan.prefill)
        if step_s > slo_s:
            assert prefill_tokens <= 1, (step_s, prefill_tokens, len(plan.decode))
            floor += 1
        # the budget cut a prefill short (the engine's 2048 tokens alone would not have: prompts are shorter)
        capped += cut
    assert capped > 0  # the SLO, not the engine's 2048 tokens, bounded some steps
    assert len(scheduler.finished) == len(requests)
    assert floor < len(plans)


def test_decodes_are_served_before_running_prompts() -> None:
    # "early" arrived first and is decoding; "late" has a long prompt; one token of budget beyond the decode
    scheduler = make_scheduler("sarathi-fcfs:tbt_slo_ms=1000", block_size=4, num_gpu_blocks=500,
                               max_num_batched_tokens=8, watermark=0.0)
    scheduler.add_request(make_request("early", prompt=4, output=50), 0.0)
    plan = scheduler.schedule(0.0)
    scheduler.update(plan, StepResult(end_time_s=0.01))
    scheduler.add_request(make_request("long-prompt", prompt=400, output=5, arrival=0.01), 0.01)
    for step in range(5):
        plan = scheduler.schedule(0.01 * (step + 1))
        assert [r.request_id for r in plan.decode] == ["early"]
        scheduler.update(plan, StepResult(end_time_s=0.01 * (step + 2)))


@pytest.mark.parametrize("policy", ["sarathi-fcfs", "sarathi-priority"])
def test_the_running_order_made_from_kept_splits_and_sorts_is_its_definitions(policy: str) -> None:
    """running_order reuses the split of the running requests its step's step_budget made, and the sorted groups
    of the step before when they hold the same requests: over a whole run it orders them by its definition (decodes
    first, then prompts, each by the victim key, stably), and a split of other requests is not reused."""
    scheduler = make_scheduler(f"{policy}:tbt_slo_ms=20", block_size=16, num_gpu_blocks=600,
                               max_num_batched_tokens=512, max_num_seqs=16, watermark=0.0)
    key = scheduler.policy.victim_key
    asked = reused = 0

    def order(running: list[Request], view: Scheduler, now_s: float) -> object:
        nonlocal asked, reused
        split = scheduler.policy._split  # type: ignore[attr-defined]
        reused += split is not None and split[0] == now_s and split[1] == list(running)
        asked += 1
        ordered = sorted(running, key=key)
        expected = [r for r in ordered if not in_prompt(r)] + [r for r in ordered if in_prompt(r)]
        got = type(scheduler.policy).running_order(scheduler.policy, running, view, now_s)
        assert list(got or ()) == expected
        return got

    scheduler.policy.running_order = order  # type: ignore[method-assign,assignment]
    requests = random_requests(3, 60, rate=30.0, max_prompt=900, max_output=40)
    _plans(scheduler, requests)
    assert asked > 100 and reused == asked  # (the core asks step_budget first at every step)
    assert len(scheduler.finished) == len(requests)
    # a split of other requests is made again
    policy_ = make_policy(policy)
    prompt, decode = make_request("p", prompt=300, output=5), make_request("d", prompt=10, output=5, arrival=1.0)
    decode.num_computed_tokens, decode.num_output_tokens = 10, 1
    scheduler_view = make_scheduler(policy)
    policy_.step_budget(scheduler_view, 1.0)  # (its view holds no request: an empty split)
    assert list(policy_.running_order([decode, prompt], scheduler_view, 1.0) or ()) == [decode, prompt]


def test_tbt_slo_defaults_to_the_tightest_running_tpot_slo() -> None:
    policy = make_policy("sarathi-fcfs")
    budget = policy.budget  # type: ignore[attr-defined]
    running = [make_request("a", tpot_slo_s=0.05), make_request("b", tpot_slo_s=0.03), make_request("c")]
    assert budget.slo_s(running) == 0.03
    assert budget.slo_s([make_request("c")]) == pytest.approx(0.1)  # default_tbt_slo_ms
    assert make_policy("sarathi-fcfs:tbt_slo_ms=40").budget.slo_s(running) == pytest.approx(0.04)  # type: ignore[attr-defined]


def test_priority_variant_orders_waiting_by_priority_then_arrival() -> None:
    def requests() -> list[Request]:
        return [make_request("blocker", output=50), make_request("low", arrival=0.1, priority=2),
                make_request("high-late", arrival=0.3, priority=0), make_request("mid", arrival=0.2, priority=1)]

    assert service_order("sarathi-priority", requests()) == ["blocker", "high-late", "mid", "low"]
    assert service_order("sarathi-fcfs", requests()) == ["blocker", "low", "mid", "high-late"]


@pytest.mark.parametrize(
    ("spec", "field"),
    [("tbt_slo_ms=0", "tbt_slo_ms"), ("default_tbt_slo_ms=-5", "default_tbt_slo_ms"),
     ("tbt_slo_ms=1e9", "tbt_slo_ms")],
)
def test_bad_config_names_the_field(spec: str, field: str) -> None:
    with pytest.raises(PolicyError, match=field):
        make_policy(f"sarathi-fcfs:{spec}")
    assert make_policy("sarathi-priority").describe()["profile"] == DEFAULT_PROFILE


@settings(max_examples=150, deadline=None)
@given(
    contexts=st.lists(st.integers(0, 20_000), max_size=40),
    base_decode=st.integers(0, 30),
    base_context=st.integers(0, 200_000),
    prefill=st.sampled_from([0, 1, 64, 512, 4096]),
    cached=st.sampled_from([0, 100, 8000]),
    pick=st.integers(0, 40),
    nudge=st.sampled_from([-1, 0, 1]),
)
def test_summed_decodes_within_is_the_last_count_the_model_prices_within(
    contexts: list[int], base_decode: int, base_context: int, prefill: int, cached: int, pick: int, nudge: int
) -> None:
    """The priced search (the prefill priced once, the closed form's guess) gives the last count whose step,
    priced by ``step_time_s``, is within the SLO, for an SLO on or one ulp either side of some count's step."""
    budget = TBTBudget(load_profile(DEFAULT_PROFILE), None, 100.0)
    base_context = base_context if base_decode else 0
    added = [0]
    for context in contexts:
        added.append(added[-1] + context)
    chunks = [(prefill, cached)] if prefill else []

    def step_s(count: int) -> float:
        return budget.latency.step_time_s(chunks, base_decode + count, base_context + added[count])

    slo_s = step_s(min(pick, len(contexts)))
    slo_s = math.nextafter(slo_s, math.inf * nudge) if nudge else slo_s
    expected = max((k for k in range(len(contexts) + 1) if step_s(k) <= slo_s), default=0)
    assert budget.summed_decodes_within(slo_s, prefill, cached, base_decode, base_context, added) == expected


@settings(max_examples=200, deadline=None)
@given(
    num_decode=st.integers(0, 40),
    context=st.integers(0, 300_000),
    cached=st.sampled_from([0, 100, 3000, 9000]),
    most=st.integers(1, 700),
    pick=st.integers(1, 700),
    nudge=st.sampled_from([-1, 0, 1]),
    analytic=st.booleans(),
)
def test_prefill_tokens_is_the_largest_prefill_the_model_prices_within(
    num_decode: int, context: int, cached: int, most: int, pick: int, nudge: int, analytic: bool
) -> None:
    """The priced search (the decode part priced once, the closed form's guess) gives the largest prefill in
    [1, most] whose step, priced by ``step_time_s``, is within the SLO (or 1), for an SLO on or one ulp either side
    of some prefill's step; the same for a latency model searched by bisection (the analytic model under another
    type)."""
    latency = load_profile(DEFAULT_PROFILE)
    assert isinstance(latency, AnalyticLatencyModel)
    searched: LatencyModel = _SearchedModel(latency)
    budget = TBTBudget(latency if analytic else searched, None, 100.0)
    context = context if num_decode else 0

    def step_s(tokens: int) -> float:
        return latency.step_time_s([(tokens, cached)], num_decode, context)

    slo_s = step_s(min(pick, most))
    slo_s = math.nextafter(slo_s, math.inf * nudge) if nudge else slo_s
    expected = max((x for x in range(1, most + 1) if step_s(x) <= slo_s), default=1)
    assert budget.prefill_tokens(slo_s, num_decode, context, cached, most) == expected


@dataclass(frozen=True)
class _SearchedModel:
    """The analytic model behind the bare latency-model protocol: :meth:`TBTBudget.prefill_tokens` prices it with
    ``step_time_s`` and searches by bisection."""

    model: AnalyticLatencyModel
    name: str = "searched"

    def step_time_s(self, prefill: Sequence[tuple[int, int]], num_decode: int, context_tokens: int) -> float:
        return self.model.step_time_s(prefill, num_decode, context_tokens)

    def decode_times_s(self, num_decode: int, decode_context_tokens: int, num_steps: int) -> Any:
        return self.model.decode_times_s(num_decode, decode_context_tokens, num_steps)

    def swap_time_s(self, num_tokens: int) -> float:
        return self.model.swap_time_s(num_tokens)


def test_prefill_tokens_names_a_negative_count() -> None:
    budget = TBTBudget(load_profile(DEFAULT_PROFILE), None, 100.0)
    with pytest.raises(ValueError, match="prefill chunk"):
        budget.prefill_tokens(0.05, 2, 100, -1, 50)
    with pytest.raises(ValueError, match="decode_context_tokens must be 0"):
        budget.prefill_tokens(0.05, 0, 100, 0, 50)


def test_the_step_budget_prices_the_tightest_running_tpot_slo() -> None:
    """Without ``tbt_slo_ms``, each step budget: the decodes plus the prefill priced within the tightest TPOT SLO
    among the running requests (:meth:`TBTBudget.slo_s`), step by step over a run where the requests carry
    different SLOs (some none)."""
    scheduler = make_scheduler("sarathi-fcfs", block_size=16, num_gpu_blocks=800, max_num_batched_tokens=1024,
                               max_num_seqs=12, watermark=0.0)
    policy = scheduler.policy
    budget: TBTBudget = policy.budget  # type: ignore[attr-defined]
    requests = random_requests(5, 50, rate=40.0, max_prompt=1200, max_output=30)
    for index, request in enumerate(requests):
        request.tpot_slo_s = (None, 0.004, 0.03, 0.012)[index % 4]
    checked = 0
    step_budget = policy.step_budget

    def budget_of(view: Scheduler, now_s: float) -> object:
        nonlocal checked
        running = view.running_requests()
        decodes = [r for r in running if not in_prompt(r)]
        most = view.budget.max_num_batched_tokens - len(decodes)
        got = step_budget(view, now_s)
        if most > 0:
            cached = max([r.num_computed_tokens for r in running if in_prompt(r)] + [0])
            cached = max(cached, policy._swapped_context())  # type: ignore[attr-defined]
            prefill = budget.prefill_tokens(budget.slo_s(running), len(decodes),
                                            sum(r.num_computed_tokens for r in decodes), cached, most)
            assert got == StepBudget(len(decodes) + prefill, view.budget.max_num_seqs)
            checked += len({r.tpot_slo_s for r in running}) > 2  # (several SLOs, or none, side by side)
        return got

    scheduler._step_budget = budget_of  # type: ignore[attr-defined]
    _plans(scheduler, requests)
    assert checked > 20 and len(scheduler.finished) == len(requests)
