"""tiered (seed 003): who may displace whom, victim order, preemption limit, aging, preemption strategy."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from semsched.core.kv import Reservation
from semsched.core.plan import BatchPlan, PreemptionMode, PreemptionReason, StepResult
from semsched.core.policy import SchedulerView, StepBudget
from semsched.core.request import Request, RequestState
from semsched.core.scheduler import Scheduler, SchedulerConfig
from semsched.latency.analytic import AnalyticLatencyModel
from semsched.policies import PolicyError, make_policy
from semsched.policies.tiered import Tiered, decode_step_s, prefill_within
from tests.policies.factories import displaced_by
from tests.support import check_kv, check_plan, make_request, make_scheduler, random_requests

SYSTEM, PREMIUM, STANDARD, BACKGROUND = 0, 1, 2, 3
PROFILE_FILE = Path(__file__).parents[2] / "semsched" / "latency" / "profiles" / "a100-qwen1.5-4b.yaml"


@dataclass
class _View:
    num_free_cpu_blocks: int = 1_000_000
    block_size: int = 16


def _tiered(spec: str = "tiered") -> Tiered:
    policy = make_policy(spec)
    assert isinstance(policy, Tiered)
    return policy


@pytest.mark.parametrize(
    ("arrival_priority", "running_priority", "displaced"),
    [
        (PREMIUM, BACKGROUND, True),
        (PREMIUM, STANDARD, True),
        (STANDARD, BACKGROUND, True),
        (SYSTEM, PREMIUM, False),  # PREMIUM is never displaced by a waiting request
        (PREMIUM, PREMIUM, False),  # only strictly lower tiers
        (BACKGROUND, BACKGROUND, False),
    ],
)
def test_who_may_displace_whom(arrival_priority: int, running_priority: int, displaced: bool) -> None:
    running = [make_request("running", prompt=60, output=10, priority=running_priority)]
    arrival = make_request("arrival", prompt=20, output=4, priority=arrival_priority, arrival=1.0)
    assert displaced_by("tiered", running, arrival, num_gpu_blocks=20) == (["running"] if displaced else [])


def test_background_never_triggers_displacement() -> None:
    # with BACKGROUND's trigger moved up to STANDARD, a STANDARD arrival no longer displaces BACKGROUND work
    running = [make_request("bg", prompt=60, output=10, priority=BACKGROUND)]
    arrival = make_request("std", prompt=20, output=4, priority=STANDARD, arrival=1.0)
    assert displaced_by("tiered:lowest_trigger_priority=1", running, arrival, num_gpu_blocks=20) == []
    lowest = _tiered().victims_for(make_request("bg2", priority=BACKGROUND), [make_request(priority=9)],
                                   view=_View(), now_s=0.0)  # type: ignore[arg-type]
    assert list(lowest) == []


def test_victims_lowest_tier_then_least_progress_then_fewest_preemptions() -> None:
    policy = _tiered()
    standard = make_request("standard", priority=STANDARD)
    far = make_request("bg-far", priority=BACKGROUND)
    near = make_request("bg-near", priority=BACKGROUND)
    near_twice = make_request("bg-near-preempted", priority=BACKGROUND)
    far.num_computed_tokens, near.num_computed_tokens, near_twice.num_computed_tokens = 500, 20, 20
    near_twice.num_preemptions = 2
    premium = make_request("premium", priority=PREMIUM)
    victims = policy.victims_for(make_request("c", priority=PREMIUM), [standard, far, near_twice, near, premium],
                                 view=_View(), now_s=0.0)  # type: ignore[arg-type]
    assert [v.request_id for v in victims] == ["bg-near", "bg-near-preempted", "bg-far", "standard"]


def test_a_request_at_the_limit_is_promoted() -> None:
    policy = _tiered("tiered:preemption_limit=2")
    worn = make_request("worn", priority=BACKGROUND, arrival=0.0)
    worn.num_preemptions = 2
    fresh = make_request("fresh", priority=STANDARD)
    victims = policy.victims_for(make_request("c", priority=PREMIUM), [worn, fresh], view=_View(), now_s=0.0)  # type: ignore[arg-type]
    assert [v.request_id for v in victims] == ["fresh"]
    # it waits with the protected tier's priority, and under KV pressure goes after everyone not promoted
    assert policy.waiting_key(worn, 0.0)[0] == 1.0
    assert max([worn, fresh], key=policy.victim_key) is fresh


def test_aging_lowers_the_effective_priority_up_to_its_cap() -> None:
    policy = _tiered()
    background = make_request("bg", priority=BACKGROUND, arrival=10.0)
    assert policy.waiting_key(background, 10.0) == (3.0, 10.0)
    assert policy.waiting_key(background, 15.0)[0] == pytest.approx(2.5)
    assert policy.waiting_key(background, 1000.0)[0] == pytest.approx(1.5)  # capped: still behind PREMIUM
    assert policy.rekey_interval_s == 1.0
    assert _tiered("tiered:aging_per_s=0").rekey_interval_s is None


def test_aged_background_is_served_before_a_fresh_standard_request() -> None:
    # one sequence at a time: a long first request holds the engine while BACKGROUND ages for ~12 s
    requests = [
        make_request("long", prompt=8, output=1200, priority=SYSTEM, arrival=0.0),
        make_request("bg", prompt=8, output=4, priority=BACKGROUND, arrival=0.5),
        make_request("std", prompt=8, output=4, priority=STANDARD, arrival=11.0),
    ]
    for spec, first in (("tiered", "bg"), ("tiered:aging_per_s=0", "std")):
        scheduler = make_scheduler(spec, max_num_seqs=1, block_size=4, num_gpu_blocks=1000, watermark=0.0)
        copies = [_copy(r) for r in requests]
        _run(scheduler, copies)
        by_first_token = sorted(copies, key=lambda r: r.first_token_time_s or 0.0)
        assert [r.request_id for r in by_first_token][1] == first, spec
        assert all(r.num_preemptions == 0 for r in copies), spec


def test_preemption_strategy() -> None:
    request = make_request(prompt=1000, output=10)
    request.num_computed_tokens = 1000
    assert _tiered().preemption_mode(request, _View()) is PreemptionMode.RECOMPUTE  # type: ignore[arg-type]
    assert _tiered("tiered:preemption=swap").preemption_mode(request, _View()) is PreemptionMode.SWAP  # type: ignore[arg-type]
    fast, slow = _tiered("tiered:preemption=cheapest;link_gb_per_s=1000"), \
        _tiered("tiered:preemption=cheapest;link_gb_per_s=0.01")
    assert fast.preemption_mode(request, _View()) is PreemptionMode.SWAP  # type: ignore[arg-type]
    assert slow.preemption_mode(request, _View()) is PreemptionMode.RECOMPUTE  # type: ignore[arg-type]
    # no room on the host for the whole cache: recompute, whatever the link
    assert fast.preemption_mode(request, _View(num_free_cpu_blocks=10)) is PreemptionMode.RECOMPUTE  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("tiered:preemption_limit=0", "preemption_limit must be an integer from 1"),
        ("tiered:protected_priority=2;lowest_trigger_priority=1", "lowest_trigger_priority (1) must be >="),
        ("tiered:aging_per_s=-1", "aging_per_s must be a number from 0"),
        ("tiered:rekey_s=0", "rekey_s"),
        ("tiered:model=gpt-5", "model must be one of"),
        ("tiered:preemption=teleport", "preemption"),
        ("tiered:preemption=cheapest;profile=no-such-profile", "no-such-profile"),
    ],
)
def test_bad_parameters_name_themselves(spec: str, message: str) -> None:
    with pytest.raises((PolicyError, ValueError), match=message.replace("(", r"\(").replace(")", r"\)")):
        make_policy(spec)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), limit=st.integers(1, 3), blocks=st.integers(60, 200))
def test_invariants_on_random_workloads(seed: int, limit: int, blocks: int) -> None:
    """A waiting request never displaces PREMIUM or SYSTEM work, nor a promoted request, nor is displacement
    triggered by BACKGROUND; every request finishes with all its tokens."""
    requests = random_requests(seed, 40, rate=20.0, max_prompt=120, max_output=60, num_priorities=4)
    scheduler = make_scheduler(f"tiered:preemption_limit={limit}", block_size=4, num_gpu_blocks=blocks,
                               max_num_batched_tokens=64, watermark=0.0)
    def check(plan: BatchPlan) -> None:  # right after the step is formed, before requests move on
        started = [c.request for c in plan.prefill if c.context_tokens == 0]  # admitted (or resumed) this step
        for preemption in plan.preempted:
            if preemption.reason is PreemptionReason.PRIORITY:
                victim = preemption.request
                assert victim.priority > PREMIUM
                assert victim.num_preemptions <= limit  # it was below the limit when displaced
                assert any(r.priority <= STANDARD and r.priority < victim.priority for r in started)

    _run(scheduler, requests, on_plan=check)
    for request in requests:
        assert request.num_output_tokens == request.target_output_tokens, request.request_id


def _copy(request: Request) -> Request:
    return make_request(request.request_id, prompt=request.prompt_tokens, output=request.target_output_tokens,
                        priority=request.priority, arrival=request.arrival_time_s)


def _run(scheduler: object, requests: list[Request], step_s: float = 0.01,
         on_plan: Callable[[BatchPlan], None] | None = None, until_s: float | None = None) -> None:
    """Drive the scheduler step by step with a fixed step time, checking the core's invariants and calling
    ``on_plan`` on every step's plan as soon as it is formed (until ``until_s`` of engine time, if given)."""
    from semsched.core.scheduler import Scheduler

    assert isinstance(scheduler, Scheduler)
    pending = sorted(requests, key=lambda r: r.arrival_time_s)
    now, index, steps = 0.0, 0, 0
    while index < len(pending) or scheduler.has_unfinished():
        if until_s is not None and now >= until_s:
            return
        while index < len(pending) and pending[index].arrival_time_s <= now:
            scheduler.add_request(pending[index], now)
            index += 1
        plan = scheduler.schedule(now)
        check_plan(scheduler, plan)
        if on_plan is not None:
            on_plan(plan)
        if plan.is_empty:
            assert index < len(pending), "stalled with unfinished requests"
            now = max(now, pending[index].arrival_time_s)
            continue
        steps += 1
        now += step_s
        scheduler.update(plan, StepResult(end_time_s=now))
        check_kv(scheduler)
        assert steps < 200_000, "no progress (livelock?)"


def test_reserved_blocks_are_for_the_protected_tiers_only() -> None:
    assert _tiered("tiered:reserve_fraction=0.3").reservations(1000)[0].num_blocks == 300
    assert _tiered().reservations(1000) == ()
    # 20 blocks of 4 tokens, half of them reserved for PREMIUM and SYSTEM
    scheduler = make_scheduler("tiered:reserve_fraction=0.5", block_size=4, num_gpu_blocks=20, watermark=0.0)
    assert sum(r.num_blocks for r in scheduler.kv.reservations) == 10
    background = make_request("bg", prompt=36, output=4, priority=BACKGROUND)  # 10 blocks at its longest
    too_long = make_request("bg-long", prompt=44, output=4, priority=BACKGROUND)  # 12: only with the reserve
    premium = make_request("premium", prompt=36, output=4, priority=PREMIUM, arrival=0.5)
    assert scheduler.add_request(background, 0.0).accepted
    refused = scheduler.add_request(too_long, 0.0)
    assert not refused.accepted and "available to priority 3" in refused.reason
    plan = scheduler.schedule(0.0)
    scheduler.update(plan, StepResult(end_time_s=0.5))
    scheduler.add_request(premium, 0.5)
    plan = scheduler.schedule(0.5)
    # PREMIUM starts in the reserved blocks without displacing the BACKGROUND request
    assert not plan.preempted and premium in [c.request for c in plan.prefill]
    assert scheduler.kv.num_free_gpu_blocks == 20 - scheduler.kv.gpu_blocks_of(background) - \
        scheduler.kv.gpu_blocks_of(premium)


@dataclass
class _BudgetView:
    running: list[Request]
    budget: StepBudget = StepBudget(2048, 256)
    num_waiting: int = 0  # (unlike what the policy was told: it checks every waiting request it knows)

    def running_requests(self) -> list[Request]:
        return self.running


def _decoding(request_id: str, *, priority: int, context: int, tpot_slo_s: float | None) -> Request:
    request = make_request(request_id, prompt=context, output=100, priority=priority, tpot_slo_s=tpot_slo_s)
    request.num_computed_tokens = context
    return request


def _largest_prefill(aim_s: float, decode_s: float) -> int:
    """The largest P with alpha1*P^2 + alpha2*P + decode_s <= aim_s (the analytic profile, solved by hand)."""
    c = {k: float(v) for k, v in yaml.safe_load(PROFILE_FILE.read_text())["coefficients"].items()}
    a, b, rest = c["alpha1"], c["alpha2"], aim_s - decode_s
    return math.floor((-b + math.sqrt(b * b + 4 * a * rest)) / (2 * a))


def test_tpot_protection_caps_prefill_to_the_tightest_protected_target() -> None:
    policy = _tiered("tiered:protect_tpot=true;tpot_margin=0.2")
    premium = _decoding("premium", priority=PREMIUM, context=1000, tpot_slo_s=0.03)
    standard = _decoding("standard", priority=STANDARD, context=3000, tpot_slo_s=0.08)
    c = {k: float(v) for k, v in yaml.safe_load(PROFILE_FILE.read_text())["coefficients"].items()}
    decode_s = c["gamma1"] * 4000 + c["gamma2"]
    budget = policy.step_budget(_BudgetView([premium, standard]), now_s=0.0)  # type: ignore[arg-type]
    assert budget is not None and budget.max_num_seqs == 256
    assert budget.max_num_batched_tokens == 2 + _largest_prefill(0.03 * 0.8, decode_s)
    # only STANDARD decodes: not protected, the engine's budget
    assert policy.step_budget(_BudgetView([standard]), now_s=0.0) is None  # type: ignore[arg-type]
    off = _tiered("tiered:protect_tpot=false")
    assert off.step_budget(_BudgetView([premium]), now_s=0.0) is None  # type: ignore[arg-type]


def test_tpot_protection_lets_a_request_spend_what_it_banked() -> None:
    policy = _tiered("tiered:protect_tpot=true;tpot_margin=0")
    premium = _decoding("premium", priority=PREMIUM, context=1000, tpot_slo_s=0.03)
    premium.num_output_tokens = 1  # its first token came at the end of the step before 10.0
    policy.step_budget(_BudgetView([premium]), now_s=10.0)  # type: ignore[arg-type]
    premium.num_output_tokens = 11  # 10 gaps in 0.1 s: 0.2 s banked against 30 ms each
    premium.num_computed_tokens += 10  # its KV holds the prompt and the first 10 generated tokens
    c = {k: float(v) for k, v in yaml.safe_load(PROFILE_FILE.read_text())["coefficients"].items()}
    decode_s = c["gamma1"] * 1010 + c["gamma2"]
    budget = policy.step_budget(_BudgetView([premium]), now_s=10.1)  # type: ignore[arg-type]
    assert budget is not None
    assert budget.max_num_batched_tokens == 1 + _largest_prefill(0.03 * 11 - 0.1, decode_s)
    # nothing banked once it fell behind: the target itself
    late = policy.step_budget(_BudgetView([premium]), now_s=20.0)  # type: ignore[arg-type]
    assert late is not None and late.max_num_batched_tokens == 1 + _largest_prefill(0.03, decode_s)


def test_tpot_protection_always_lets_some_prefill_through() -> None:
    policy = _tiered("tiered:protect_tpot=true;min_prefill_tokens=100")
    huge = _decoding("huge", priority=PREMIUM, context=10_000_000, tpot_slo_s=0.03)  # decode alone is too slow
    budget = policy.step_budget(_BudgetView([huge]), now_s=0.0)  # type: ignore[arg-type]
    assert budget is not None and budget.max_num_batched_tokens == 1 + 100


def test_tpot_protection_does_not_hold_back_protected_prompts() -> None:
    """A protected request still in its prompt gets its prompt's tokens whatever the TPOT cap, and less
    important requests in their prompts wait (compute nothing) until the protected prompts are done."""
    policy = _tiered("tiered:protect_tpot=true;pace_e2e=false")
    premium = _decoding("premium", priority=PREMIUM, context=1000, tpot_slo_s=0.03)
    standard = _decoding("standard", priority=STANDARD, context=3000, tpot_slo_s=0.08)
    prompt = make_request("new-premium", prompt=900, output=10, priority=PREMIUM)
    prompt.num_computed_tokens = 100  # 800 prompt tokens to go
    standard_prompt = make_request("new-standard", prompt=900, output=10, priority=STANDARD)
    c = {k: float(v) for k, v in yaml.safe_load(PROFILE_FILE.read_text())["coefficients"].items()}
    decode_s = c["gamma1"] * 4000 + c["gamma2"]
    assert _largest_prefill(0.03 * 0.8, decode_s) < 800  # the cap alone would hold it back
    view = _BudgetView([premium, standard, prompt, standard_prompt])
    budget = policy.step_budget(view, now_s=0.0)  # type: ignore[arg-type]
    assert budget is not None and budget.max_num_batched_tokens == 2 + 800
    order = policy.running_order(view.running, view, now_s=0.0)  # type: ignore[arg-type]
    assert order == [premium, prompt, standard]  # most protected first; STANDARD's prompt waits
    # a protected request waiting to start counts too, until it runs
    policy = _tiered("tiered:protect_tpot=true;pace_e2e=false")
    waiting = make_request("waiting-premium", prompt=500, output=10, priority=PREMIUM)
    policy.on_arrival(waiting, now_s=0.0)
    view = _BudgetView([premium, standard, standard_prompt])
    assert policy.step_budget(view, now_s=0.0).max_num_batched_tokens == 2 + 500  # type: ignore[arg-type,union-attr]
    assert policy.running_order(view.running, view, now_s=0.0) == [premium, standard]  # type: ignore[arg-type]
    waiting.state = RequestState.RUNNING  # admitted in that step: the next one holds nothing back
    assert policy.running_order(view.running, view, now_s=0.01) is None  # type: ignore[arg-type]


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), blocks=st.integers(40, 160), abort_every=st.integers(3, 12))
def test_protected_waiting_prompt_tokens_are_kept_as_a_walk_would_count_them(
    seed: int, blocks: int, abort_every: int
) -> None:
    """The protected waiting prompt tokens that TPOT protection keeps as a running sum (arrivals, preemptions,
    starts, finishes) equal, at every step, a walk over the scheduler's waiting queue; waiting requests aborted
    now and then (no policy hook hears of that) included."""
    requests = random_requests(seed, 60, rate=40.0, max_prompt=120, max_output=40, num_priorities=4,
                               with_slos=True)
    scheduler = make_scheduler("tiered:protect_tpot=true;preemption_limit=1", block_size=4,
                               num_gpu_blocks=blocks, max_num_batched_tokens=64, watermark=0.0)
    policy = scheduler.policy
    assert isinstance(policy, Tiered)
    steps = 0

    def check(plan: BatchPlan) -> None:
        nonlocal steps
        steps += 1
        now_s = plan.time_s
        if steps % abort_every == 0 and scheduler.num_waiting:
            scheduler.abort(scheduler.waiting_requests()[-1].request_id, now_s)
        walked = sum(r.prompt_tokens + r.num_output_tokens - r.num_computed_tokens
                     for r in scheduler.waiting_requests()
                     if r.priority <= PREMIUM or r.num_preemptions >= 1)
        kept = policy._waiting_prompt_tokens(scheduler.running_requests(), scheduler)
        assert kept == walked

    _run(scheduler, requests, on_plan=check)
    assert steps


@settings(max_examples=200, deadline=None)
@given(target_ms=st.floats(0.0, 400.0), num_decode=st.integers(0, 256), context=st.integers(0, 400_000),
       most=st.integers(2, 8192), low=st.integers(1, 64))
def test_the_closed_form_prefill_cap_is_the_binary_searchs(
    target_ms: float, num_decode: int, context: int, most: int, low: int
) -> None:
    """On the analytic profile the largest prefill within a step target comes from the quadratic's root, then the
    model's own step times: the same number as a binary search over them (the boundary included)."""
    policy = _tiered()
    latency = policy._latency
    assert isinstance(latency, AnalyticLatencyModel)
    context = context if num_decode else 0
    low = min(low, most - 1)
    target_s = target_ms / 1e3

    def fits(prefill: int) -> bool:
        return latency.step_time_s([(prefill, 0)], num_decode, context) <= target_s

    searched_low, high = low, most
    while high - searched_low > 1:
        middle = (searched_low + high) // 2
        searched_low, high = (middle, high) if fits(middle) else (searched_low, middle)
    assert Tiered._analytic_prefill_within(latency, target_s, num_decode, context, low, most) == searched_low


@settings(max_examples=300, deadline=None)
@given(target_ms=st.floats(0.0, 400.0), num_decode=st.integers(0, 256), context=st.integers(0, 400_000),
       most=st.integers(-4, 8192), floor=st.integers(1, 300), subclass=st.booleans())
def test_the_prefill_cap_is_a_binary_search_over_the_models_step_times(
    target_ms: float, num_decode: int, context: int, most: int, floor: int, subclass: bool
) -> None:
    """:func:`prefill_within` prices the analytic model's steps itself (the decode part once): its answer is the
    one a binary search over the model's own ``step_time_s`` gives, the floor and the whole budget included,
    and so is the step-time path's (a subclass of the model); ``decode_step_s`` is the step time of decodes
    alone, to the bit."""
    latency = _tiered()._latency
    assert isinstance(latency, AnalyticLatencyModel)
    if subclass:
        latency = _PricedAlike(latency.config, latency.name)
    context = context if num_decode else 0
    target_s = target_ms / 1e3

    def fits(prefill: int) -> bool:
        return latency.step_time_s([(prefill, 0)], num_decode, context) <= target_s

    low = min(floor, max(most, 0))
    if low >= most:
        expected = max(most, low)
    elif fits(most):
        expected = most
    else:
        high = most
        while high - low > 1:
            middle = (low + high) // 2
            low, high = (middle, high) if fits(middle) else (low, middle)
        expected = low
    assert prefill_within(latency, target_s, num_decode, context, most, floor) == expected
    if num_decode:
        decode_s = decode_step_s(latency, num_decode, context)
        assert decode_s.hex() == latency.step_time_s([], num_decode, context).hex()


class _PricedAlike(AnalyticLatencyModel):
    """The analytic model under another type: :func:`prefill_within` asks its ``step_time_s``."""


@settings(max_examples=300, deadline=None)
@given(priority=st.integers(0, 4), arrival=st.floats(0.0, 100.0), waited=st.floats(-5.0, 100.0),
       preemptions=st.integers(0, 4), computed=st.integers(0, 5000), limit=st.integers(1, 3),
       aging=st.sampled_from([0.0, 0.1, 0.37]), cap=st.sampled_from([0.0, 1.5, 2.0, 7.0]))
def test_the_written_out_keys_are_the_builtins_formulas(
    priority: int, arrival: float, waited: float, preemptions: int, computed: int, limit: int, aging: float,
    cap: float
) -> None:
    """The waiting key and the victim key write out ``max``, ``min`` and ``promoted``: the same values, of the
    same types (a promoted request's effective priority is the protected tier's int), as the builtins give."""
    policy = _tiered(f"tiered:preemption_limit={limit};aging_per_s={aging};max_age_boost={cap}")
    request = make_request("r", prompt=6000, output=10, priority=priority, arrival=arrival)
    request.num_preemptions, request.num_computed_tokens = preemptions, computed
    now_s = arrival + waited
    cfg = policy.config
    effective = priority - min(max(now_s - arrival, 0.0) * aging, cap)
    if preemptions >= limit:
        effective = min(effective, cfg.protected_priority)
    key = policy.waiting_key(request, now_s)
    assert key == (effective, arrival) and type(key[0]) is type(effective)
    assert policy.effective_priority(request, now_s) == effective
    assert policy.victim_key(request) == (0.0 if policy.promoted(request) else 1.0, priority, -computed,
                                          -preemptions, arrival)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), blocks=st.integers(40, 160), abort_every=st.integers(3, 12))
def test_step_budget_counts_the_protected_prompt_tokens_as_a_walk_would(
    seed: int, blocks: int, abort_every: int
) -> None:
    """The protected prompt tokens step_budget counts in its own pass (the running requests' prompts, plus the
    waiting sum once the requests that started have left it) equal, at every step, a walk over the running
    and waiting requests before it; waiting requests aborted now and then included."""
    requests = random_requests(seed, 60, rate=40.0, max_prompt=120, max_output=40, num_priorities=4,
                               with_slos=True)
    policy = _tiered("tiered:protect_tpot=true;preemption_limit=1")
    scheduler = Scheduler(SchedulerConfig(block_size=4, num_gpu_blocks=blocks, max_num_batched_tokens=64,
                                          watermark=0.0), policy)
    step_budget = policy.step_budget
    counted = 0

    def walk() -> int:
        return sum(r.prompt_tokens + r.num_output_tokens - r.num_computed_tokens
                   for r in (*scheduler.waiting_requests(), *scheduler.running_requests())
                   if r.state is not RequestState.RUNNING or r.prompt_tokens + r.num_output_tokens
                   - r.num_computed_tokens > 1
                   if r.priority <= PREMIUM or r.num_preemptions >= 1)

    def checked(view: SchedulerView, now_s: float) -> StepBudget | None:
        nonlocal counted
        fresh = policy._prompt_work[0] != now_s
        walked = walk()
        budget = step_budget(view, now_s)
        if fresh:
            counted += 1
            assert policy._prompt_work == (now_s, walked)
        return budget

    scheduler._step_budget = checked  # (the hook the scheduler calls before each step)

    steps = 0

    def abort_some(plan: BatchPlan) -> None:
        nonlocal steps
        steps += 1
        if steps % abort_every == 0 and scheduler.num_waiting:
            scheduler.abort(scheduler.waiting_requests()[-1].request_id, plan.time_s)

    _run(scheduler, requests, on_plan=abort_some)
    assert counted


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000), blocks=st.integers(60, 200))
def test_tpot_protection_serves_protected_prompts_first_and_finishes_everything(seed: int, blocks: int) -> None:
    """With targets on every tier: in a step that starts a protected request, no less important running request
    computes prompt tokens (the step's budget was raised for the protected prompt and goes to it), and every
    request still finishes with all its tokens."""
    requests = random_requests(seed, 40, rate=20.0, max_prompt=120, max_output=60, num_priorities=4,
                               with_slos=True)
    scheduler = make_scheduler("tiered:protect_tpot=true", block_size=4, num_gpu_blocks=blocks,
                               max_num_batched_tokens=64, watermark=0.0)

    started = 0

    def check(plan: BatchPlan) -> None:
        nonlocal started
        if any(c.request.priority <= PREMIUM for c in plan.prefill if c.context_tokens == 0):
            started += 1
            # a prompt's last token alone costs what a decode does: the policy lets it run (``running_order``)
            continuing = [c.request for c in plan.prefill if c.context_tokens > 0 and c.num_tokens > 1]
            assert all(r.priority <= PREMIUM or r.num_preemptions >= 3 for r in continuing), continuing

    _run(scheduler, requests, on_plan=check)
    assert started
    for request in requests:
        assert request.num_output_tokens == request.target_output_tokens, request.request_id


def test_tpot_protection_keeps_the_pace_an_e2e_target_needs() -> None:
    """A protected decode with 5 s left for at most 200 more tokens needs 25 ms steps: that, less the margin,
    caps the prefill (tighter than its 30 ms TPOT target); a request that cannot make it any more holds nothing
    back."""
    c = {k: float(v) for k, v in yaml.safe_load(PROFILE_FILE.read_text())["coefficients"].items()}
    decode_s = c["gamma1"] * 1000 + c["gamma2"]
    premium = make_request("premium", prompt=1000, output=200, priority=PREMIUM, tpot_slo_s=0.03, e2e_slo_s=10.0)
    premium.num_computed_tokens, premium.num_output_tokens = 1000, 0  # decoding its first token
    for spec, aim_s in (("tiered:tpot_margin=0.2", 5.0 / 200 * 0.8), ("tiered:tpot_margin=0.2;pace_e2e=false",
                                                                         0.03 * 0.8)):
        budget = _tiered(spec).step_budget(_BudgetView([premium]), now_s=5.0)  # type: ignore[arg-type]
        assert budget is not None and budget.max_num_batched_tokens == 1 + _largest_prefill(aim_s, decode_s)
    late = _tiered("tiered:tpot_margin=0.2").step_budget(_BudgetView([premium]), now_s=9.99)  # type: ignore[arg-type]
    assert late is not None and late.max_num_batched_tokens == 1 + _largest_prefill(0.03 * 0.8, decode_s)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000), limit=st.integers(1, 2))
def test_with_drop_at_the_limit_no_request_is_preempted_beyond_it(seed: int, limit: int) -> None:
    """Every request either finishes with all its tokens or is dropped with an explicit reason; none is ever
    preempted more than the limit (KV pressure included)."""
    requests = random_requests(seed, 40, rate=30.0, max_prompt=120, max_output=60, num_priorities=4)
    scheduler = make_scheduler(f"tiered:preemption_limit={limit};on_limit=drop", block_size=4, num_gpu_blocks=60,
                               max_num_batched_tokens=64, watermark=0.0)
    dropped: list[Request] = []

    def check(plan: BatchPlan) -> None:
        for preemption in plan.preempted:
            assert preemption.request.num_preemptions <= limit
            if preemption.mode is PreemptionMode.DROP:
                dropped.append(preemption.request)

    _run(scheduler, requests, on_plan=check)
    dropped_ids = {r.request_id for r in dropped}
    for request in requests:
        assert request.num_preemptions <= limit
        if request.request_id in dropped_ids:
            reason = request.finish_reason or ""
            assert request.state is RequestState.DROPPED
            assert reason.startswith("dropped: ") and f"preempted {limit} times" in reason
        else:
            assert request.state is RequestState.FINISHED
            assert request.num_output_tokens == request.target_output_tokens, request.request_id


def test_drop_ends_the_request_and_frees_its_blocks() -> None:
    # two BACKGROUND requests, each already preempted once (the limit): the KV cache fills as they decode, and
    # the engine drops one rather than preempt it a second time
    scheduler = make_scheduler("tiered:preemption_limit=1;on_limit=drop", block_size=4, num_gpu_blocks=16,
                               watermark=0.0)
    first = make_request("first", prompt=16, output=40, priority=BACKGROUND)
    second = make_request("second", prompt=16, output=40, priority=BACKGROUND, arrival=0.001)
    for request in (first, second):
        request.num_preemptions = 1
    plans: list[BatchPlan] = []
    _run(scheduler, [first, second], on_plan=plans.append)
    drops = [p for plan in plans for p in plan.preempted]
    assert [(p.request.request_id, p.mode, p.reason) for p in drops] == [
        ("second", PreemptionMode.DROP, PreemptionReason.KV_PRESSURE)]
    assert second.state is RequestState.DROPPED and "KV cache full" in (second.finish_reason or "")
    assert first.state is RequestState.FINISHED and first.num_output_tokens == 40
    assert scheduler.kv.num_free_gpu_blocks == 16


def test_the_slo_guard_is_wired_only_when_asked_for() -> None:
    plain, guarded = _tiered("tiered:protect_tpot=false"), _tiered("tiered:shedding=true;protect_tpot=false")
    assert not any(plain.uses_hook(h) for h in ("on_tokens", "admit", "on_arrival", "on_finish", "step_budget"))
    assert all(guarded.uses_hook(h) for h in ("on_tokens", "admit", "on_arrival", "on_preempt", "on_finish"))
    assert not guarded.uses_hook("step_budget") and guarded.uses_hook("victims_for")
    assert _tiered("tiered:max_waiting=0/0/5").uses_hook("admit")


def test_shedding_rejects_less_important_tiers_explicitly_under_overload() -> None:
    # far more than the engine can serve, tiers drawn at random: PREMIUM misses its TTFT, so the guard sheds
    requests = [
        make_request(str(i), prompt=200, output=50, priority=(SYSTEM, PREMIUM, STANDARD, BACKGROUND)[i % 4],
                     arrival=i * 0.02, tier=("SYSTEM", "PREMIUM", "STANDARD", "BACKGROUND")[i % 4],
                     ttft_slo_s=(None, 0.2, 0.5, None)[i % 4], tpot_slo_s=(None, 0.03, 0.08, None)[i % 4])
        for i in range(600)
    ]
    scheduler = make_scheduler("tiered:shedding=true;slo_window_s=5", block_size=16, num_gpu_blocks=200,
                               max_num_seqs=8, max_num_batched_tokens=256, watermark=0.0)
    _run(scheduler, requests, step_s=0.05)
    rejected = [r for r in requests if r.state is RequestState.REJECTED]
    assert rejected and all((r.finish_reason or "").startswith("shed: ") for r in rejected)
    assert {r.priority for r in rejected} <= {STANDARD, BACKGROUND}
    assert all(r.state is RequestState.FINISHED for r in requests if r.priority <= PREMIUM)


def test_bad_guard_parameters_name_themselves() -> None:
    with pytest.raises((PolicyError, ValueError), match="resume_headroom"):
        make_policy("tiered:shedding=true;shed_headroom=0.5;resume_headroom=0.1")
    with pytest.raises((PolicyError, ValueError), match="max_waiting"):
        make_policy("tiered:max_waiting=1/-2")


def test_fair_share_bounds_how_long_background_waits_under_sustained_premium_load() -> None:
    """PREMIUM arrives at twice what the engine serves for 15 s; one BACKGROUND request every 2 s. Without a
    share BACKGROUND waits until the PREMIUM backlog is gone; with 10 % it starts within the bound the policy
    states: share_window_s + rekey_s + 2 * L * t (here 2 + 1 + 2 * 5 * 0.01 = 3.1 s)."""
    step_s, longest_output, window_s, rekey_s = 0.01, 5, 2.0, 1.0

    def workload() -> list[Request]:
        # 2 slots, one prefill step and 5 decode steps of 10 ms each: ~33 req/s served, 66 req/s arrive
        premium = [make_request(f"p{i}", prompt=16, output=longest_output, priority=PREMIUM, arrival=i * 0.015)
                   for i in range(1000)]
        background = [make_request(f"b{i}", prompt=16, output=longest_output, priority=BACKGROUND,
                                   arrival=2.0 + 2.0 * i) for i in range(6)]
        return premium + background

    waits = {}
    for spec in ("tiered:aging_per_s=0",
                 f"tiered:aging_per_s=0;fair_shares=0/0/0/0.1;share_window_s={window_s};rekey_s={rekey_s}"):
        requests = workload()
        scheduler = make_scheduler(spec, max_num_seqs=2, block_size=16, num_gpu_blocks=1000, watermark=0.0)
        _run(scheduler, requests, step_s=step_s)
        assert all(r.state is RequestState.FINISHED for r in requests)
        waits[spec] = [r.first_scheduled_time_s - r.arrival_time_s for r in requests  # type: ignore[operator]
                       if r.priority == BACKGROUND]
    unfair, fair = waits.values()
    assert min(unfair) > 5.0  # starved while the PREMIUM backlog lasts
    assert max(fair) <= window_s + rekey_s + 2 * longest_output * step_s


def test_fair_share_serves_a_saturating_class_about_its_share() -> None:
    """PREMIUM and BACKGROUND both arrive faster than the engine serves: BACKGROUND gets about its 20 % of the
    output tokens (not nothing, as under strict priority, and not much more: the boost stops once it has it;
    the queue learns it only at a re-key, so the share overshoots by up to about rekey_s / share_window_s)."""
    step_s, output = 0.01, 5
    served: dict[int, int] = {}

    def count(plan: BatchPlan) -> None:
        for request in plan.decode:
            served[request.priority] = served.get(request.priority, 0) + 1

    for spec, lowest, highest in (("tiered:aging_per_s=0", 0.0, 0.0),
                                  ("tiered:aging_per_s=0;fair_shares=0/0/0/0.2;share_window_s=10", 0.18, 0.27)):
        served.clear()
        requests = [make_request(f"{name}{i}", prompt=16, output=output, priority=priority, arrival=i * 0.01)
                    for i in range(3000) for name, priority in (("p", PREMIUM), ("b", BACKGROUND))]
        scheduler = make_scheduler(spec, max_num_seqs=2, block_size=16, num_gpu_blocks=1000, watermark=0.0)
        _run(scheduler, requests, step_s=step_s, until_s=30.0, on_plan=count)
        share = served.get(BACKGROUND, 0) / sum(served.values())
        assert lowest <= share <= highest, (spec, share)


def test_a_tier_table_gives_shares_reserves_and_slos(tmp_path: Path) -> None:
    table = tmp_path / "tiers.yaml"
    table.write_text("tiers:\n"
                     "  - {name: GOLD, priority: 0, weight: 0.3, ttft_slo_ms: 300, reserve_fraction: 0.2}\n"
                     "  - {name: SILVER, priority: 1, weight: 0.3, ttft_slo_ms: 900, reserve_fraction: 0.1}\n"
                     "  - {name: BULK, priority: 2, weight: 0.4, e2e_slo_ms: 60000, fair_share: 0.25}\n")
    policy = _tiered(f"tiered:tier_table={table}")
    assert policy.tier_table is not None and [t.name for t in policy.tier_table] == ["GOLD", "SILVER", "BULK"]
    # each tier's reserve is kept for it and the tiers more important than it
    assert policy.reservations(1000) == (Reservation(0, 200), Reservation(1, 100))
    assert policy.uses_hook("on_tokens") and policy.rekey_interval_s == policy.config.rekey_s  # fair share on
    assert _tiered().tier_table is None


def test_a_tier_table_is_checked_when_the_policy_is_built(tmp_path: Path) -> None:
    with pytest.raises((PolicyError, ValueError), match="tier_table: tier table .*cannot read it"):
        make_policy(f"tiered:tier_table={tmp_path / 'missing.yaml'}")
    table = tmp_path / "tiers.yaml"
    table.write_text("tiers:\n  - {name: GOLD, priority: 0, fair_share: 0.5}\n")
    with pytest.raises((PolicyError, ValueError), match="set them there, not also"):
        make_policy(f"tiered:tier_table={table};reserve_fraction=0.1")


def test_a_prompt_is_not_held_back_for_protected_requests_that_cannot_start() -> None:
    """TPOT protection holds less important prompts back while a protected request waits, so that its prompt gets
    the step. When those prompts are all that would run and no protected request can start, holding them back
    leaves the engine idle with work it could run: here the one sequence slot holds a BACKGROUND prompt that its
    fair share shields from displacement. Found by tests/sim/test_stress.py's sustained stream (issue 28)."""
    spec = "tiered:aging_per_s=0;fair_shares=0/0/0/0.1;share_window_s=4;rekey_s=1"
    # PREMIUM is served first (so BACKGROUND is short of its share), then the long prompt takes the slot
    premium = [make_request(f"p{i}", prompt=64, output=4, priority=PREMIUM, arrival=0.05 * i) for i in range(5)]
    long = make_request("long", prompt=4000, output=20, priority=BACKGROUND, arrival=0.041)
    scheduler = make_scheduler(spec, max_num_seqs=1, num_gpu_blocks=1000, watermark=0.0)
    _run(scheduler, [long, *premium])  # asserts that no step comes out empty while work is left
    assert all(r.state is RequestState.FINISHED for r in [long, *premium])


def test_a_prompt_is_not_held_back_behind_an_aged_request_that_cannot_start() -> None:
    """The same hold-back with a protected request that could start, but behind the queue's head: aging (here
    unbounded, as ``max_age_boost=1000`` in ``semsched reproduce tiers``) ranks an earlier BACKGROUND request ahead
    of the PREMIUM one, the head's prompt does not fit in the free blocks, admission stops there, and the
    BACKGROUND prompt that holds the blocks was held back: an empty plan with work left (the full tiers grid
    stalled so at t=474 s, 32 BACKGROUND prompts holding the blocks). The prompts must run."""
    spec = "tiered:aging_per_s=100;max_age_boost=1000;rekey_s=0.001"
    running = [make_request(f"b{i}", prompt=1500, output=4, priority=BACKGROUND, arrival=0.0) for i in range(2)]
    head = make_request("head", prompt=1500, output=4, priority=BACKGROUND, arrival=0.001)
    premium = make_request("premium", prompt=32, output=4, priority=PREMIUM, arrival=0.03)
    scheduler = make_scheduler(spec, max_num_seqs=4, num_gpu_blocks=100, watermark=0.0,
                               max_num_batched_tokens=1024)
    seen = []

    def on_plan(plan: BatchPlan) -> None:
        assert not (plan.is_empty and scheduler.num_running), "an empty plan with requests running"
        seen.append(premium.state is RequestState.WAITING and head.state is RequestState.WAITING
                    and any(r.state is RequestState.RUNNING and r.num_computed_tokens < r.prompt_tokens
                            for r in running))

    _run(scheduler, [*running, head, premium], on_plan=on_plan)
    assert any(seen), "the stall's state (a prompt running, the head and PREMIUM waiting) never came"
    assert all(r.state is RequestState.FINISHED for r in [*running, head, premium])
