"""utility (issue 31): weight over expected cost, deadlines at risk, lateness, the starvation floor, victims,
hopeless requests, TPOT protection, its spec, and the same order through the core's walk and vLLM's keys."""

from __future__ import annotations

import random

import pytest

from semsched.core.plan import StepResult
from semsched.core.request import LengthDistribution, Request, RequestState, TokenTimeline
from semsched.metrics.goodput import TIER_WEIGHTS
from semsched.policies import PolicyError, make_policy
from semsched.policies.utility import DEFAULT_WEIGHTS, Utility, tokens_per_round
from tests.policies.factories import displaced_by, service_order
from tests.policies.predicted import check_complete_and_exact
from tests.support import make_request, make_scheduler, run_checked

SYSTEM, PREMIUM, STANDARD, BACKGROUND = 0, 1, 2, 3


class _View:
    """``waiting_order`` reads nothing of the view."""


def _utility(spec: str = "utility") -> Utility:
    policy = make_policy(spec)
    assert isinstance(policy, Utility)
    return policy


def test_the_weights_are_the_tier_weighted_goodputs() -> None:
    assert {p: DEFAULT_WEIGHTS[p] for p in TIER_WEIGHTS} == TIER_WEIGHTS


def _blocked_premium_and_cheap_standard() -> list[Request]:
    """On one slot: a blocker that runs 0.8 s (80 steps of 10 ms), then a long PREMIUM request with a 1 s TTFT
    target and a short STANDARD one, both waiting from the start. By expected cost per weight the STANDARD one
    is far cheaper (4 tokens against 200)."""
    return [
        make_request("blocker", prompt=8, output=80, priority=SYSTEM),
        make_request("premium", prompt=32, output=200, arrival=0.001, priority=PREMIUM, ttft_slo_s=1.0),
        make_request("standard", prompt=32, output=4, arrival=0.002, priority=STANDARD),
    ]


def test_a_premium_request_whose_deadline_is_at_risk_goes_before_a_cheaper_standard_one() -> None:
    # when the blocker ends the PREMIUM request has used 0.8 of its TTFT SLO: at risk with risk_slack 0.5
    assert service_order("utility:risk_slack=0.5;protect_weight=4", _blocked_premium_and_cheap_standard()) == [
        "blocker", "premium", "standard"]
    # without promotion the index order puts the cheaper request first
    assert service_order("utility:risk_slack=0", _blocked_premium_and_cheap_standard()) == [
        "blocker", "standard", "premium"]


def test_a_deadline_not_yet_at_risk_keeps_the_index_order() -> None:
    # risk_slack 0.1: at risk only in the last 0.1 s of the 1 s SLO, which the blocker's 0.8 s does not reach
    assert service_order("utility:risk_slack=0.1;protect_weight=4", _blocked_premium_and_cheap_standard()) == [
        "blocker", "standard", "premium"]


def test_cheaper_expected_cost_goes_first_among_equals_and_reads_the_prediction() -> None:
    def requests(predicted: bool) -> list[Request]:
        made = [make_request("blocker", prompt=8, output=20),
                make_request("long", prompt=32, output=300, arrival=0.001, priority=STANDARD),
                make_request("short", prompt=32, output=10, arrival=0.002, priority=STANDARD)]
        if predicted:  # predictions the other way round from the truth
            made[1].predicted_output = LengthDistribution.point(5)
            made[2].predicted_output = LengthDistribution((100, 400), (0.5, 0.5))
        return made

    assert service_order("utility", requests(predicted=False)) == ["blocker", "short", "long"]
    assert service_order("utility", requests(predicted=True)) == ["blocker", "long", "short"]


def test_weight_raises_rank_against_cost() -> None:
    def requests() -> list[Request]:
        return [make_request("blocker", prompt=8, output=20),
                make_request("background", prompt=32, output=10, arrival=0.001, priority=BACKGROUND),
                make_request("premium", prompt=32, output=25, arrival=0.002, priority=PREMIUM)]

    # PREMIUM weighs 4, BACKGROUND 1: 2.5x the output (about 2.9x the resource cost) still goes first
    assert service_order("utility", requests()) == ["blocker", "premium", "background"]
    assert service_order("utility:weights=1/1/1/1", requests()) == ["blocker", "background", "premium"]


def test_urgency_raises_rank() -> None:
    def requests() -> list[Request]:
        return [make_request("blocker", prompt=8, output=20),
                make_request("calm", prompt=32, output=10, arrival=0.001, priority=STANDARD, urgency=2),
                make_request("urgent", prompt=32, output=25, arrival=0.002, priority=STANDARD, urgency=0)]

    assert service_order("utility", requests()) == ["blocker", "urgent", "calm"]
    assert service_order("utility:urgency_factor=1", requests()) == ["blocker", "calm", "urgent"]


def test_hard_tiers_put_every_premium_request_before_standard_ones() -> None:
    def requests() -> list[Request]:
        return [make_request("blocker", prompt=8, output=20),
                make_request("premium", prompt=32, output=400, arrival=0.001, priority=PREMIUM),
                make_request("standard", prompt=32, output=4, arrival=0.002, priority=STANDARD)]

    assert service_order("utility", requests()) == ["blocker", "standard", "premium"]
    assert service_order("utility:hard_tiers=true", requests()) == ["blocker", "premium", "standard"]


def test_a_late_request_goes_after_those_still_in_time() -> None:
    # when the 0.8 s blocker ends, "late" (cheaper, but its 0.5 s TTFT target has passed) goes after "in_time"
    requests = [make_request("blocker", prompt=8, output=80),
                make_request("late", prompt=32, output=4, arrival=0.001, priority=STANDARD, ttft_slo_s=0.5),
                make_request("in_time", prompt=32, output=30, arrival=0.002, priority=STANDARD, ttft_slo_s=5.0)]
    assert service_order("utility", requests) == ["blocker", "in_time", "late"]


def _stream(duration_s: float) -> list[Request]:
    """On one slot (10 ms steps): short SYSTEM requests arriving faster than they are served, and one long
    BACKGROUND request just after the first."""
    shorts = [make_request(f"s{i}", prompt=8, output=5, arrival=i * 0.04, priority=SYSTEM)
              for i in range(int(duration_s / 0.04))]
    return [shorts[0], make_request("long", prompt=32, output=50, arrival=0.001, priority=BACKGROUND), *shorts[1:]]


@pytest.mark.parametrize("every", [1, 4])
def test_the_starvation_floor_bounds_the_wait(every: int) -> None:
    requests = _stream(6.0)
    scheduler = make_scheduler(f"utility:starve_s=1;starve_every={every}", max_num_seqs=1, block_size=4,
                               num_gpu_blocks=1000, watermark=0.0)
    run_checked(scheduler, requests)
    long = next(r for r in requests if r.request_id == "long")
    assert long.first_scheduled_time_s is not None
    # starved at 1 s; then it takes the next admission (every=1) or one of the next four, each a short request
    # of 5 steps plus a prefill step held at most 60 ms
    assert long.first_scheduled_time_s - long.arrival_time_s <= 1.0 + every * 0.06 + 0.02


def test_without_the_floor_the_long_request_waits_for_the_stream() -> None:
    requests = _stream(6.0)
    scheduler = make_scheduler("utility:starve_s=0", max_num_seqs=1, block_size=4, num_gpu_blocks=1000,
                               watermark=0.0)
    run_checked(scheduler, requests)
    long = next(r for r in requests if r.request_id == "long")
    assert long.first_scheduled_time_s is not None and long.first_scheduled_time_s > 5.0


def test_victims_lose_the_least_weighted_work_and_spare_those_at_the_preemption_limit() -> None:
    policy = _utility("utility:preemption_limit=2")
    heavy_fresh = make_request("heavy_fresh", priority=PREMIUM)
    light_advanced = make_request("light_advanced", priority=BACKGROUND)
    limited = make_request("limited", priority=BACKGROUND)
    for request in (heavy_fresh, light_advanced, limited):
        policy.on_arrival(request, 0.0)
    heavy_fresh.num_computed_tokens, light_advanced.num_computed_tokens, limited.num_computed_tokens = 10, 30, 0
    limited.num_preemptions = 2
    # weighted work lost: 4 * 10 = 40 against 1 * 30; the limited request, with none to lose, goes last
    order = sorted([heavy_fresh, light_advanced, limited], key=policy.victim_key, reverse=True)
    assert [r.request_id for r in order] == ["light_advanced", "heavy_fresh", "limited"]


def test_a_request_at_risk_displaces_lighter_work_below_the_limit_only() -> None:
    def running() -> list[Request]:
        return [make_request("system", prompt=40, output=20, priority=SYSTEM),
                make_request("background", prompt=40, output=20, priority=BACKGROUND)]

    def arrival() -> Request:  # risk_slack=1: at risk from its arrival on
        return make_request("premium", prompt=40, output=4, arrival=1.0, priority=PREMIUM, ttft_slo_s=1.0)

    at_risk = "utility:risk_slack=1;protect_weight=4"  # (PREMIUM, weight 4, protected)
    assert displaced_by(at_risk, running(), arrival(), num_gpu_blocks=30) == ["background"]
    assert displaced_by("utility:risk_slack=0", running(), arrival(), num_gpu_blocks=30) == []
    at_limit = running()
    at_limit[1].num_preemptions = 3
    assert displaced_by(at_risk, at_limit, arrival(), num_gpu_blocks=30) == []


def test_hopeless_requests_are_rejected_with_the_slo_or_demoted() -> None:
    def hopeless() -> Request:  # a 2,000-token prompt cannot be prefilled within 10 ms
        return make_request("hopeless", prompt=2000, output=4, ttft_slo_s=0.01, priority=PREMIUM)

    scheduler = make_scheduler("utility:hopeless=reject", num_gpu_blocks=4096)
    request = hopeless()
    decision = scheduler.add_request(request, 0.0)
    assert not decision.accepted and request.state is RequestState.REJECTED
    assert decision.reason.startswith("hopeless:") and "ttft_slo of 0.01 s" in decision.reason
    assert make_scheduler("utility", num_gpu_blocks=4096).add_request(hopeless(), 0.0).accepted  # off by default
    # demoted: after a later, costlier request that can still meet its targets
    requests = [make_request("blocker", prompt=8, output=20), hopeless(),
                make_request("fine", prompt=32, output=200, arrival=0.01, priority=STANDARD)]
    requests[1].arrival_time_s = 0.005
    assert service_order("utility:hopeless=demote", requests) == ["blocker", "fine", "hopeless"]


def test_tpot_protection_caps_prefill_beside_protected_decodes() -> None:
    def prefill_beside_a_premium_decode(spec: str, urgency: int | None = 0) -> int:
        scheduler = make_scheduler(spec, block_size=16, num_gpu_blocks=4096)
        premium = make_request("premium", prompt=32, output=500, priority=PREMIUM, tpot_slo_s=0.03,
                               urgency=urgency)
        scheduler.add_request(premium, 0.0)
        now = 0.0
        for _ in range(3):  # its prompt, then decodes
            plan = scheduler.schedule(now)
            now += 0.02
            scheduler.update(plan, StepResult(end_time_s=now))
        scheduler.add_request(make_request("standard", prompt=6000, output=4, arrival=now, priority=STANDARD), now)
        plan = scheduler.schedule(now)
        assert [r.request_id for r in plan.decode] == ["premium"]
        return sum(chunk.num_tokens for chunk in plan.prefill)

    # by default the urgent requests are protected (weight 4 x 100 >= protect_weight 100), a calm PREMIUM one not
    capped = prefill_beside_a_premium_decode("utility")
    assert 64 <= capped < prefill_beside_a_premium_decode("utility:protect_tpot=false") == 2047
    assert prefill_beside_a_premium_decode("utility", urgency=None) == 2047
    assert 64 <= prefill_beside_a_premium_decode("utility:protect_weight=4", urgency=None) < 2047


def _preempted_for_a_short_arrival(spec: str, num_cpu_blocks: int) -> list[str]:
    """On one slot: a long request runs, then a short one of the same tier arrives; the ids preempted for it."""
    scheduler = make_scheduler(spec, max_num_seqs=1, block_size=4, num_gpu_blocks=1000,
                               num_cpu_blocks=num_cpu_blocks, watermark=0.0)
    scheduler.add_request(make_request("long", prompt=40, output=400), 0.0)
    scheduler.update(scheduler.schedule(0.0), StepResult(end_time_s=1.0))
    scheduler.add_request(make_request("short", prompt=40, output=4, arrival=1.0), 1.0)
    return [p.request.request_id for p in scheduler.schedule(1.0).preempted]


def test_a_cheaper_request_displaces_running_work_only_where_its_kv_is_swapped() -> None:
    # with host blocks the long request is swapped out for the short one (SRPT's preemption, seed 004's engine)
    assert _preempted_for_a_short_arrival("utility", num_cpu_blocks=1000) == ["long"]
    assert _preempted_for_a_short_arrival("utility:swap_displace=false", num_cpu_blocks=1000) == []
    assert _preempted_for_a_short_arrival("utility:preemption=recompute", num_cpu_blocks=1000) == []
    # without them it would be recomputed: it keeps running
    assert _preempted_for_a_short_arrival("utility", num_cpu_blocks=0) == []


def test_tokens_per_round_counts_the_steps_a_request_emitted_in() -> None:
    request = make_request(output=10)
    assert tokens_per_round(request) == 1.0
    request.token_step_ranges = [[0, 4]]  # one token per step
    request.num_output_tokens = 4
    assert tokens_per_round(request) == 1.0
    request.token_step_ranges = [[0, 2], [1, 2], [1, 3], [2, 3]]  # rounds at steps 0, 1, 2: 1, 2 and 2 tokens...
    request.num_output_tokens = 6
    assert tokens_per_round(request) == pytest.approx(6 / 3)


def test_tokens_per_round_reads_rounds_as_the_scheduler_records_them() -> None:
    """The scheduler records a round's extra tokens in ``round_extras`` (its steps form one range): the same
    tokens per round as when each token is recorded by a call of its own."""
    timeline = TokenTimeline()
    timeline.extend([0.1, 0.2, 0.3, 0.4, 0.5])
    by_round, by_token = make_request(output=20), make_request(output=20)
    for step, count in [(0, 1), (1, 3), (2, 2), (4, 4)]:
        by_round.record_round(timeline, step, count)
        for _ in range(count):
            by_token.record_tokens(timeline, step, 1)
    for request in (by_round, by_token):
        request.num_output_tokens = 10
    assert len(by_round.token_step_ranges) == 2 and by_round.round_extras
    assert tokens_per_round(by_round) == tokens_per_round(by_token) == pytest.approx(10 / 4)
    # one range of consecutive rounds: still rounds, not a token per step
    single = make_request(output=20)
    for step, count in [(0, 2), (1, 3)]:
        single.record_round(timeline, step, count)
    single.num_output_tokens = 5
    assert len(single.token_step_ranges) == 1 and tokens_per_round(single) == pytest.approx(5 / 2)


def test_the_core_walk_and_the_vllm_keys_give_the_same_order() -> None:
    """The core asks ``waiting_order`` (the policy's heaps and lines); the vLLM adapter sorts by ``waiting_key``.
    On random requests with tiers, SLOs, urgency and predictions, at several instants, both give one order."""
    rng = random.Random(7)
    for trial in range(20):
        spec = rng.choice(["utility", "utility:risk_slack=0.5;protect_weight=4",
                           "utility:hard_tiers=true;hard_urgency=true;risk_slack=0.3;starve_s=2;starve_every=1;"
                           "protect_weight=4"])
        requests = [
            make_request(f"r{i}", prompt=rng.randrange(8, 400), output=rng.randrange(1, 300),
                         arrival=rng.uniform(0.0, 5.0), priority=rng.randrange(4),
                         urgency=rng.choice([None, 0, 1, 2]), ttft_slo_s=rng.choice([None, 0.5, 2.0]),
                         e2e_slo_s=rng.choice([None, 4.0]))
            for i in range(40)
        ]
        walked, keyed = _utility(spec), _utility(spec)
        for request in sorted(requests, key=lambda r: r.arrival_time_s):
            walked.on_arrival(request, request.arrival_time_s)
        now = 5.0 + rng.uniform(0.0, 3.0)
        by_key = sorted(requests, key=lambda r: keyed.waiting_key(r, now))
        by_walk = []
        order = iter(walked.waiting_order(_View(), now))
        for request in order:  # admit each, as the core does before it asks for the next
            by_walk.append(request)
            request.state = RequestState.RUNNING
        assert [r.request_id for r in by_walk] == [r.request_id for r in by_key], f"trial {trial}: {spec}"


def test_every_request_finishes_alike_in_both_simulator_modes() -> None:
    assert check_complete_and_exact("utility:risk_slack=0.5;protect_weight=4;hopeless=demote") >= 0
    check_complete_and_exact("utility")


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ("utility:risk_slack=1.5", "risk_slack"),
        ("utility:weights=0/1", "weights[0]"),
        ("utility:starve_s=-1", "starve_s"),
        ("utility:starve_every=0", "starve_every"),
        ("utility:hopeless=maybe", "hopeless"),
        ("utility:preemption_limit=0", "preemption_limit"),
        ("utility:model=gpt-9", "model"),
        ("utility:cost=tokens", "cost"),
        ("utility:profile=no-such-profile", "profile"),
    ],
)
def test_bad_parameters_name_the_field(spec: str, field: str) -> None:
    with pytest.raises(PolicyError, match=field.replace("[", r"\[").replace("]", r"\]")):
        make_policy(spec)
