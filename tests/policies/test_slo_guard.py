"""slo_guard (seed 003 §3.2): rolling monitor, graded shedding with hysteresis, queue limits, hopeless requests."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from semsched.core.plan import Admission
from semsched.core.policy import Policy, SchedulerView
from semsched.core.request import LengthDistribution, Request, RequestState
from semsched.core.scheduler import Scheduler, SchedulerConfig
from semsched.core.tiers import DEFAULT_TIERS, TierSpec
from semsched.latency import load_profile
from semsched.policies.registry import PolicyError, build_config
from semsched.policies.slo_guard import (
    FIRST_TOKEN_KEY,
    HOPELESS,
    QUEUE_FULL,
    SHED,
    RollingSamples,
    SLOGuard,
    SLOGuardConfig,
    SLOGuardError,
    SLOMonitor,
    guard_rejection_kind,
)
from tests.support import make_request, run_checked

SYSTEM, PREMIUM, STANDARD, BACKGROUND = 0, 1, 2, 3
PREMIUM_TTFT_S = next(t.ttft_slo_s for t in DEFAULT_TIERS if t.priority == PREMIUM) or 0.0
PROFILE_FILE = Path(__file__).parents[2] / "semsched" / "latency" / "profiles" / "a100-qwen1.5-4b.yaml"


def linear_quantile(values: Sequence[float], q: float) -> float:
    """The definition: sort, position ``q·(n-1)``, interpolate linearly between its two order statistics."""
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (position - low) * (ordered[high] - ordered[low])


class Feeder:
    """Drives a guard through the callbacks an engine makes, one request at a time."""

    def __init__(self, guard: SLOGuard) -> None:
        self.guard = guard
        self._ids = itertools.count()

    def request(self, priority: int, arrival_s: float, **fields: Any) -> Request:
        return make_request(f"r{next(self._ids)}", priority=priority, arrival=arrival_s, **fields)

    def arrive(self, priority: int, now_s: float, **fields: Any) -> tuple[Request, Admission]:
        request = self.request(priority, now_s, **fields)
        decision = self.guard.admit(request, now_s)
        if decision.accepted:
            self.guard.on_arrival(request, now_s)
        return request, decision

    def probe(self, priority: int, now_s: float) -> Admission:
        """The guard's answer to an arrival that, if admitted, ends at once (so it never waits for a token)."""
        request, decision = self.arrive(priority, now_s)
        if decision.accepted:
            request.state = RequestState.FINISHED
            self.guard.on_finish(request, now_s)
        return decision

    def serve(self, priority: int, *, first_token_s: float, ttft_s: float, tpot_s: float | None = None,
              tokens: int = 1) -> Request:
        """A request admitted ``ttft_s`` before ``first_token_s`` that emits its first token then and, with a
        ``tpot_s``, its other ``tokens - 1`` tokens at that pace before finishing."""
        request = self.request(priority, first_token_s - ttft_s, output=max(tokens, 1))
        self.guard.on_arrival(request, request.arrival_time_s)
        request.state = RequestState.RUNNING
        request.num_output_tokens = 1
        self.guard.on_tokens(request, 1, first_token_s)
        if tpot_s is not None:
            request.num_output_tokens = tokens
            self.guard.on_tokens(request, tokens - 1, first_token_s + tpot_s * (tokens - 1))
            request.state = RequestState.FINISHED
            self.guard.on_finish(request, first_token_s + tpot_s * (tokens - 1))
        return request

    def ttfts(self, priority: int, ttft_s: float, *, at_s: float, count: int) -> None:
        for _ in range(count):
            self.serve(priority, first_token_s=at_s, ttft_s=ttft_s)


def make_guard(**config: Any) -> SLOGuard:
    """A guard that judges at every arrival, without dwell time, on few samples unless told otherwise."""
    settings_ = {"evaluate_every_s": 0.0, "hold_s": 0.0, "min_samples": 5, **config}
    return SLOGuard(SLOGuardConfig(**settings_))


# ---- the monitor ---------------------------------------------------------------------------------------------
def test_rolling_samples_forget_by_time_and_by_count() -> None:
    samples = RollingSamples(window_s=5.0, max_samples=100)
    for t in range(10):
        samples.add(float(t), 10.0 * t)
    samples.evict(10.0)  # keeps observations made at 5 s or later
    assert samples.values_s().tolist() == [10.0 * t for t in range(5, 10)]
    assert samples.values_s(since_s=7.0).tolist() == [80.0, 90.0]  # strictly after
    capped = RollingSamples(window_s=1e6, max_samples=3)
    for t in range(10):
        capped.add(float(t), float(t))
    assert capped.values_s().tolist() == [7.0, 8.0, 9.0]


def test_monitor_quantile_is_the_linear_definition_over_the_window() -> None:
    monitor = SLOMonitor(window_s=60.0, max_samples=1000, quantile=0.99)
    values = [0.01 * ((7 * i) % 53) for i in range(150)]
    for i, value in enumerate(values):
        monitor.record(PREMIUM, "ttft", value, now_s=float(i))  # one per second: the first 89 age out
    kept = monitor.values_s(PREMIUM, "ttft")
    assert kept.tolist() == values[89:]
    quantile = monitor.quantile_s(kept)
    assert quantile == pytest.approx(linear_quantile(values[89:], 0.99), rel=1e-12)
    assert monitor.quantile_s(monitor.values_s(STANDARD, "ttft")) is None


def test_ttft_at_first_token_and_tpot_at_finish() -> None:
    guard = make_guard(min_samples=1)
    feeder = Feeder(guard)
    request = feeder.serve(PREMIUM, first_token_s=3.0, ttft_s=0.25, tpot_s=0.02, tokens=11)
    assert request.policy_state[FIRST_TOKEN_KEY] == 3.0
    finish_s = 3.0 + 0.02 * 10
    assert guard.monitor.values_s(PREMIUM, "ttft").tolist() == [pytest.approx(0.25)]
    assert guard.monitor.values_s(PREMIUM, "tpot").tolist() == [pytest.approx((finish_s - 3.0) / 10)]
    feeder.serve(PREMIUM, first_token_s=4.0, ttft_s=0.1, tpot_s=0.5, tokens=1)  # one token: no TPOT
    assert len(guard.monitor.values_s(PREMIUM, "tpot")) == 1
    ttft = guard.reading(PREMIUM, "ttft", now_s=4.0)
    assert ttft is not None and ttft.count == 2
    assert ttft.quantile_s == pytest.approx(linear_quantile([0.25, 0.1], 0.99))
    assert ttft.headroom == pytest.approx(1 - ttft.quantile_s / PREMIUM_TTFT_S)


def test_headroom_is_the_worst_metric() -> None:
    guard = make_guard(min_samples=2)
    feeder = Feeder(guard)
    for i in range(2):
        feeder.serve(PREMIUM, first_token_s=1.0 + i, ttft_s=0.1, tpot_s=0.027, tokens=5)
    ttft_headroom = 1 - linear_quantile([0.1, 0.1], 0.99) / 0.2
    tpot_headroom = 1 - 0.027 / 0.03
    assert guard.headroom(PREMIUM, now_s=10.0) == pytest.approx(min(ttft_headroom, tpot_headroom))
    assert guard.headroom(STANDARD, now_s=10.0) is None  # no observations
    assert guard.headroom(BACKGROUND, now_s=10.0) is None  # no TTFT/TPOT targets


def test_requests_still_waiting_past_their_target_count_as_ttft_observations() -> None:
    guard = make_guard(min_samples=1)
    feeder = Feeder(guard)
    late, _ = feeder.arrive(PREMIUM, 0.0)
    feeder.arrive(PREMIUM, 0.9)  # waited 0.1 s at 1 s: under the target, not counted yet
    reading = guard.reading(PREMIUM, "ttft", now_s=1.0)
    assert reading is not None and reading.count == 1 and reading.quantile_s == pytest.approx(1.0)
    late.state = RequestState.DROPPED  # ended without a callback (the core's abort): forgotten
    assert guard.reading(PREMIUM, "ttft", now_s=1.0) is None


def test_ttft_a_prompt_alone_would_miss_is_not_counted() -> None:
    latency = load_profile("a100-qwen1.5-4b")
    guard = SLOGuard(SLOGuardConfig(min_samples=1), latency=latency)
    feeder = Feeder(guard)
    long_prompt = 3000
    assert latency.step_time_s([(long_prompt, 0)], 0, 0) > PREMIUM_TTFT_S
    for prompt in (long_prompt, 100):
        request = feeder.request(PREMIUM, 0.0, prompt=prompt)
        guard.on_arrival(request, 0.0)
        request.num_output_tokens = 1
        guard.on_tokens(request, 1, 0.5)
    assert guard.monitor.values_s(PREMIUM, "ttft").tolist() == [0.5]  # the 100-token prompt's


def test_a_request_the_feasibility_judge_rejects_is_not_observed_nor_counted_waiting() -> None:
    """Issue 28: the gateway's judge (what an idle server gives a tier) leaves out misses shedding cannot fix."""
    infeasible: set[tuple[str, str]] = set()
    guard = SLOGuard(SLOGuardConfig(min_samples=1),
                     feasible=lambda request, metric: (request.request_id, metric) not in infeasible)
    feeder = Feeder(guard)
    feeder.serve(PREMIUM, first_token_s=1.0, ttft_s=0.5, tpot_s=0.1, tokens=3)
    left_out = feeder.request(PREMIUM, 0.0, output=3)
    infeasible.update({(left_out.request_id, "ttft"), (left_out.request_id, "tpot")})
    guard.on_arrival(left_out, 0.0)
    assert guard.reading(PREMIUM, "ttft", now_s=5.0).count == 1  # type: ignore[union-attr]  # not waiting
    left_out.num_output_tokens = 3
    guard.on_tokens(left_out, 3, 6.0)
    guard.on_finish(left_out, 6.2)
    assert guard.monitor.values_s(PREMIUM, "ttft").tolist() == [0.5]  # kept's only
    assert guard.monitor.values_s(PREMIUM, "tpot").tolist() == pytest.approx([0.1])


def test_a_wait_whose_first_token_nobody_reports_is_no_ttft_bound() -> None:
    guard = make_guard(min_samples=1)
    request = Feeder(guard).request(PREMIUM, 0.0)
    guard.on_arrival(request, 0.0, ttft_reported=False)  # a whole answer through the gateway
    assert guard.reading(PREMIUM, "ttft", now_s=10.0) is None


# ---- shedding ------------------------------------------------------------------------------------------------
def test_premium_at_risk_sheds_background_first_then_standard() -> None:
    guard = make_guard(hold_s=5.0)
    feeder = Feeder(guard)
    feeder.ttfts(PREMIUM, 0.3, at_s=1.0, count=5)
    assert feeder.arrive(BACKGROUND, 1.0)[1].reason.startswith(SHED)
    assert guard.shed_from_priority == BACKGROUND
    for priority in (SYSTEM, PREMIUM, STANDARD):
        assert feeder.arrive(priority, 1.0)[1].accepted
    # still at risk on fresh observations, but before hold_s: no second class yet
    feeder.ttfts(PREMIUM, 0.3, at_s=2.0, count=5)
    assert feeder.arrive(STANDARD, 2.0)[1].accepted
    assert feeder.arrive(STANDARD, 6.0)[1].reason.startswith(SHED)
    assert guard.shed_level == 2 and guard.shed_from_priority == STANDARD
    for priority in (SYSTEM, PREMIUM):  # the protected classes are never shed
        assert feeder.arrive(priority, 6.0)[1].accepted


def test_a_second_class_is_shed_only_on_fresh_evidence() -> None:
    guard = make_guard()
    feeder = Feeder(guard)
    feeder.ttfts(PREMIUM, 0.3, at_s=1.0, count=5)
    feeder.arrive(BACKGROUND, 1.0)
    assert guard.shed_level == 1
    # the window still holds the bad samples, but nothing since the change says the first step did not help
    assert feeder.arrive(STANDARD, 30.0)[1].accepted
    feeder.ttfts(PREMIUM, 0.1, at_s=31.0, count=5)  # healthy since the change
    assert feeder.arrive(STANDARD, 31.0)[1].accepted
    assert guard.shed_level == 1


def test_standard_at_risk_sheds_only_background() -> None:
    guard = make_guard()
    feeder = Feeder(guard)
    for second, ttft_s in enumerate((0.9, 0.8, 0.7), start=1):  # at risk, but shedding helps
        feeder.ttfts(STANDARD, ttft_s, at_s=float(second), count=5)
        assert feeder.probe(STANDARD, float(second)).accepted
        assert feeder.probe(BACKGROUND, float(second)).reason.startswith(SHED)
    assert guard.shed_level == 1


def test_shedding_that_does_not_help_is_undone_and_not_retried_within_the_window() -> None:
    guard = make_guard(window_s=20.0)
    feeder = Feeder(guard)
    for second in (1.0, 2.0):  # PREMIUM at risk: BACKGROUND, then STANDARD shed
        feeder.ttfts(PREMIUM, 0.3, at_s=second, count=5)
        feeder.probe(BACKGROUND, second)
    assert guard.shed_level == 2
    feeder.ttfts(PREMIUM, 0.3, at_s=3.0, count=5)  # no better with STANDARD shed, and nothing more to shed
    assert feeder.probe(STANDARD, 3.0).accepted
    assert guard.shed_level == 1
    feeder.ttfts(PREMIUM, 0.25, at_s=4.0, count=5)  # better: BACKGROUND stays shed, STANDARD stays in
    assert not feeder.probe(BACKGROUND, 4.0).accepted
    assert feeder.probe(STANDARD, 4.0).accepted
    feeder.ttfts(PREMIUM, 0.3, at_s=23.0, count=5)  # the window since the futile level has passed: tried again
    assert not feeder.probe(STANDARD, 23.0).accepted


def test_too_few_samples_shed_nothing() -> None:
    guard = make_guard(min_samples=6)
    feeder = Feeder(guard)
    feeder.ttfts(PREMIUM, 5.0, at_s=10.0, count=5)
    assert feeder.arrive(BACKGROUND, 10.0)[1].accepted
    feeder.ttfts(PREMIUM, 5.0, at_s=10.0, count=1)
    assert not feeder.arrive(BACKGROUND, 10.0)[1].accepted


def test_headroom_below_the_margin_is_at_risk_before_the_target_is_missed() -> None:
    target_s = PREMIUM_TTFT_S
    assert target_s is not None
    near_s = target_s * (1 - 0.05)  # headroom 0.05: under the target, but inside a 0.1 margin
    for margin, shed in ((0.1, True), (0.0, False)):
        guard = make_guard(shed_headroom=margin, resume_headroom=0.3)
        feeder = Feeder(guard)
        feeder.ttfts(PREMIUM, near_s, at_s=1.0, count=5)
        assert feeder.arrive(BACKGROUND, 1.0)[1].accepted is not shed


def test_hysteresis_readmits_only_with_resume_headroom_over_the_whole_window() -> None:
    guard = make_guard(window_s=10.0, hold_s=2.0, shed_headroom=0.1, resume_headroom=0.4)
    feeder = Feeder(guard)
    feeder.ttfts(PREMIUM, 0.3, at_s=1.0, count=5)
    feeder.arrive(BACKGROUND, 1.0)
    assert guard.shed_level == 1
    # between the thresholds: headroom 0.2 is no risk (no second class) and no recovery (still shed)
    for second in range(12, 20):
        feeder.ttfts(PREMIUM, 0.2 * (1 - 0.2), at_s=float(second), count=5)
        assert not feeder.probe(BACKGROUND, float(second)).accepted
        assert feeder.probe(STANDARD, float(second)).accepted
    # headroom 0.5 once the window holds only such samples, and hold_s after the last change
    for second in range(20, 30):
        feeder.ttfts(PREMIUM, 0.2 * (1 - 0.5), at_s=float(second), count=5)
    assert guard.headroom(PREMIUM, now_s=30.0) == pytest.approx(0.5)
    assert feeder.arrive(BACKGROUND, 30.0)[1].accepted
    assert guard.shed_level == 0


def test_levels_fall_one_class_at_a_time_most_important_first() -> None:
    guard = make_guard(window_s=5.0, hold_s=1.0)
    feeder = Feeder(guard)
    feeder.ttfts(PREMIUM, 0.3, at_s=1.0, count=5)
    feeder.arrive(BACKGROUND, 1.0)
    feeder.ttfts(PREMIUM, 0.3, at_s=2.0, count=5)
    feeder.arrive(BACKGROUND, 2.0)
    assert guard.shed_level == 2
    feeder.ttfts(PREMIUM, 0.05, at_s=8.0, count=5)  # the bad samples have left the window
    assert feeder.arrive(STANDARD, 8.0)[1].accepted  # STANDARD comes back first
    assert not feeder.arrive(BACKGROUND, 8.5)[1].accepted  # hold_s since the change
    assert feeder.arrive(BACKGROUND, 9.0)[1].accepted
    assert guard.shed_level == 0


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(0.01, 1.0), st.sampled_from([PREMIUM, STANDARD])), min_size=1, max_size=60),
       st.floats(0.0, 5.0))
def test_no_flapping_and_graded_steps(observations: list[tuple[float, int]], hold_s: float) -> None:
    """Whatever is observed, the level moves at most one class per change, and changes are hold_s apart; the
    protected classes are never shed."""
    guard = make_guard(hold_s=hold_s, min_samples=1)
    feeder = Feeder(guard)
    level, changed_s = 0, -math.inf
    for second, (ttft_s, priority) in enumerate(observations):
        now_s = 1.0 + second * 0.5
        feeder.ttfts(priority, ttft_s, at_s=now_s, count=1)
        for arriving in (SYSTEM, PREMIUM):
            assert feeder.arrive(arriving, now_s)[1].accepted
        if guard.shed_level != level:
            assert abs(guard.shed_level - level) == 1
            assert now_s - changed_s >= hold_s
            level, changed_s = guard.shed_level, now_s


def test_shed_reason_names_the_class_the_metric_and_the_target() -> None:
    guard = make_guard()
    feeder = Feeder(guard)
    feeder.ttfts(PREMIUM, 0.31, at_s=1.0, count=5)
    reason = feeder.arrive(BACKGROUND, 1.0)[1].reason
    quantile_s = linear_quantile([0.31] * 5, 0.99)
    assert reason == f"shed: PREMIUM p99 TTFT {quantile_s:.3g} s over its 0.2 s target; BACKGROUND shed"
    assert guard_rejection_kind(reason) == "shed"
    assert guard.rejections == {"shed": 1}


def test_shedding_off() -> None:
    guard = make_guard(shedding=False)
    feeder = Feeder(guard)
    feeder.ttfts(PREMIUM, 5.0, at_s=10.0, count=50)
    assert feeder.arrive(BACKGROUND, 10.0)[1].accepted


# ---- bounded queues ------------------------------------------------------------------------------------------
def test_queue_limit_per_priority() -> None:
    guard = make_guard(max_waiting=(0, 0, 0, 2), shedding=False)  # BACKGROUND: 2; the others: no limit
    feeder = Feeder(guard)
    first, _ = feeder.arrive(BACKGROUND, 0.0)
    feeder.arrive(BACKGROUND, 0.0)
    decision = feeder.arrive(BACKGROUND, 0.0)[1]
    assert decision.reason == f"{QUEUE_FULL} 2 BACKGROUND requests waiting, its limit 2"
    assert guard_rejection_kind(decision.reason) == "queue full"
    for _ in range(5):
        assert feeder.arrive(STANDARD, 0.0)[1].accepted
    first.state = RequestState.RUNNING  # scheduled: no longer waits
    third, decision = feeder.arrive(BACKGROUND, 1.0)
    assert decision.accepted
    first.state = RequestState.PREEMPTED_RECOMPUTE  # back in the queue: 3 wait, over the limit
    guard.on_preempt(first, 2.0)
    third.state = RequestState.RUNNING  # 2 wait
    assert not feeder.arrive(BACKGROUND, 2.0)[1].accepted
    first.state = RequestState.FINISHED
    guard.on_finish(first, 3.0)  # 1 waits
    assert feeder.arrive(BACKGROUND, 3.0)[1].accepted
    assert guard.rejections == {"queue full": 2}


def test_dropped_requests_leave_the_queue_count() -> None:
    guard = make_guard(max_waiting=(0, 0, 0, 1), shedding=False)
    feeder = Feeder(guard)
    request, _ = feeder.arrive(BACKGROUND, 0.0)
    assert not feeder.arrive(BACKGROUND, 0.0)[1].accepted
    request.state = RequestState.DROPPED  # the core reports no on_finish for a drop
    assert feeder.arrive(BACKGROUND, 0.0)[1].accepted


# ---- hopeless requests ---------------------------------------------------------------------------------------
def _coefficients() -> dict[str, float]:
    return {k: float(v) for k, v in yaml.safe_load(PROFILE_FILE.read_text())["coefficients"].items()}


def _hand_bound_s(prompt: int, tokens: int) -> float:
    """Prefill of the prompt (alpha1·n² + alpha2·n), then tokens - 1 decodes at contexts prompt, prompt+1, ..."""
    c = _coefficients()
    prefill_s = c["alpha1"] * prompt**2 + c["alpha2"] * prompt
    return prefill_s + sum(c["gamma1"] * (prompt + i) + c["gamma2"] for i in range(tokens - 1))


def _hopeless_guard() -> SLOGuard:
    return SLOGuard(SLOGuardConfig(reject_hopeless=True, shedding=False), latency=load_profile("a100-qwen1.5-4b"))


def test_hopeless_against_the_hand_computed_bound() -> None:
    guard, e2e_s, prompt = _hopeless_guard(), 5.0, 30_000
    feeder = Feeder(guard)
    one_token_s, hundred_tokens_s = _hand_bound_s(prompt, 1), _hand_bound_s(prompt, 100)
    assert one_token_s < e2e_s < hundred_tokens_s  # the prediction decides
    plain = feeder.request(PREMIUM, 0.0, prompt=prompt, output=200, e2e_slo_s=e2e_s)
    assert guard.e2e_lower_bound_s(plain, 0.0) == pytest.approx(one_token_s, rel=1e-12)
    assert guard.admit(plain, 0.0).accepted
    predicted = LengthDistribution((100, 300), (0.5, 0.5))
    long = feeder.request(PREMIUM, 0.0, prompt=prompt, output=200, e2e_slo_s=e2e_s, predicted_output=predicted)
    assert guard.e2e_lower_bound_s(long, 0.0) == pytest.approx(hundred_tokens_s, rel=1e-12)
    decision = guard.admit(long, 0.0)
    assert decision.reason.startswith(HOPELESS) and guard_rejection_kind(decision.reason) == "hopeless"
    assert "5 s target" in decision.reason


def test_hopeless_counts_time_already_waited_and_caps_tokens_at_the_maximum() -> None:
    guard = _hopeless_guard()
    feeder = Feeder(guard)
    predicted = LengthDistribution.point(500)
    request = feeder.request(PREMIUM, 1.0, prompt=100, output=3, max_output=3, predicted_output=predicted,
                             e2e_slo_s=5.0)
    assert guard.e2e_lower_bound_s(request, 2.5) == pytest.approx(1.5 + _hand_bound_s(100, 3), rel=1e-12)
    assert guard.admit(request, 2.5).accepted
    assert not guard.admit(request, 7.0).accepted
    no_target = feeder.request(BACKGROUND, 0.0, prompt=60_000)
    assert guard.admit(no_target, 0.0).accepted  # no E2E target: nothing to miss


def test_hopeless_is_off_by_default() -> None:
    guard = SLOGuard(latency=load_profile("a100-qwen1.5-4b"))
    request = make_request("huge", prompt=60_000, e2e_slo_s=1.0, priority=PREMIUM)
    assert guard.admit(request, 0.0).accepted


# ---- configuration -------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("field", "value", "limit"),
    [
        ("window_s", 0.0, "from 0.001 to 86400"),
        ("window_s", math.nan, "from 0.001"),
        ("max_samples", 0, "from 1 to"),
        ("quantile", 1.5, "from 0.5 to 1"),
        ("min_samples", 5000, "from 1 to 4,096"),
        ("shedding", 1, "true or false"),
        ("protected_priority", 1.5, "integer"),
        ("shed_headroom", -0.1, "from 0 to 0.9"),
        ("resume_headroom", 0.05, "from 0.1 to 0.95"),
        ("min_gain", 2.0, "from 0 to 1"),
        ("hold_s", -1.0, "from 0 to"),
        ("evaluate_every_s", math.inf, "from 0 to 3600"),
        ("max_waiting", [1, 2], "tuple"),
        ("reject_hopeless", "yes", "true or false"),
    ],
)
def test_bad_config_names_the_field_and_the_limit(field: str, value: Any, limit: str) -> None:
    with pytest.raises(SLOGuardError, match=field) as raised:
        SLOGuardConfig(**{field: value})
    assert limit in str(raised.value)


def test_bad_queue_limit_names_its_priority() -> None:
    with pytest.raises(SLOGuardError, match=r"max_waiting\[2\] must be an integer from 0"):
        SLOGuardConfig(max_waiting=(0, 0, -1))


def test_spec_values_parse_into_the_config() -> None:
    config = build_config(SLOGuardConfig, {"max_waiting": "0/0/200/100", "hold_s": "5"}, policy="tiered")  # type: ignore[arg-type]
    assert isinstance(config, SLOGuardConfig)
    assert config.max_waiting == (0, 0, 200, 100) and config.hold_s == 5.0
    with pytest.raises(PolicyError, match="resume_headroom"):
        build_config(SLOGuardConfig, {"resume_headroom": "0.01"}, policy="tiered")  # type: ignore[arg-type]


def test_bad_guard_setup() -> None:
    with pytest.raises(SLOGuardError, match="reject_hopeless needs a latency model"):
        SLOGuard(SLOGuardConfig(reject_hopeless=True))
    twice = (*DEFAULT_TIERS, TierSpec("GOLD", priority=PREMIUM, weight=0.1))
    with pytest.raises(SLOGuardError, match="priority 1 is given to both PREMIUM and GOLD"):
        SLOGuard(tiers=twice)


# ---- inside a scheduler --------------------------------------------------------------------------------------
class _Guarded(Policy):
    """FCFS with a guard wired as ``tiered`` should wire it."""

    name: ClassVar[str] = "test-guarded"

    def __init__(self, guard: SLOGuard) -> None:
        super().__init__()
        self.guard = guard

    def admit(self, request: Request, view: SchedulerView, now_s: float) -> Admission:
        return self.guard.admit(request, now_s)

    def on_arrival(self, request: Request, now_s: float) -> None:
        self.guard.on_arrival(request, now_s)

    def on_tokens(self, request: Request, num_tokens: int, now_s: float) -> None:
        self.guard.on_tokens(request, num_tokens, now_s)

    def on_preempt(self, request: Request, now_s: float) -> None:
        self.guard.on_preempt(request, now_s)

    def on_finish(self, request: Request, now_s: float) -> None:
        self.guard.on_finish(request, now_s)


def test_observations_match_the_reports_definitions_in_a_scheduler() -> None:
    guard = SLOGuard(SLOGuardConfig(window_s=1e4))
    requests = [make_request(f"p{i}", prompt=40, output=1 + i % 7, arrival=0.03 * i, priority=PREMIUM)
                for i in range(20)]
    scheduler = Scheduler(SchedulerConfig(max_num_seqs=4, block_size=4, num_gpu_blocks=200), _Guarded(guard))
    run_checked(scheduler, requests)
    ttfts = [r.first_token_time_s - r.arrival_time_s for r in requests]  # type: ignore[operator]
    assert np.allclose(guard.monitor.values_s(PREMIUM, "ttft"), ttfts)
    times = [r.token_times_s() for r in scheduler.finished if r.num_output_tokens >= 2]
    tpots = [(t[-1] - t[0]) / (t.size - 1) for t in times]
    assert np.allclose(guard.monitor.values_s(PREMIUM, "tpot"), tpots)


def test_shed_requests_are_rejected_with_their_reason_in_a_scheduler() -> None:
    guard = SLOGuard(SLOGuardConfig(min_samples=3, evaluate_every_s=0.0, max_waiting=(0, 0, 0, 1)))
    # one sequence at a time: the PREMIUM requests queue and miss their 0.2 s TTFT; BACKGROUND then comes
    premium = [make_request(f"p{i}", prompt=40, output=30, arrival=0.0, priority=PREMIUM) for i in range(4)]
    background = [make_request(f"b{i}", prompt=40, output=5, arrival=2.0 + i, priority=BACKGROUND)
                  for i in range(3)]
    scheduler = Scheduler(SchedulerConfig(max_num_seqs=1, block_size=4, num_gpu_blocks=200), _Guarded(guard))
    run_checked(scheduler, premium + background)
    assert guard.shed_level == 1
    assert {r.request_id for r in scheduler.rejected} == {"b0", "b1", "b2"}
    assert all(r.state is RequestState.REJECTED and r.finish_reason and r.finish_reason.startswith(SHED)
               for r in scheduler.rejected)
    assert all(r.state is RequestState.FINISHED for r in premium)
