from __future__ import annotations

import pytest

from semsched.core.request import Request, RequestState
from semsched.core.tiers import BACKGROUND, PREMIUM, STANDARD, SYSTEM, TierSpec
from semsched.metrics.goodput import TIER_WEIGHTS, GoodputError, tier_attainment, tier_weighted_goodput
from tests.metrics.factories import RequestFactory


def _slos(tier: TierSpec) -> dict[str, float | None]:
    return {"ttft_slo_s": tier.ttft_slo_s, "tpot_slo_s": tier.tpot_slo_s, "e2e_slo_s": tier.e2e_slo_s}


def _served(make_request: RequestFactory, tier: TierSpec, times: list[float], **kwargs: object) -> Request:
    return make_request(times, tier=tier.name, priority=tier.priority, **_slos(tier), **kwargs)


FAST = [0.05, 0.07, 0.09]  # meets every default tier's targets
SLOW_FIRST_TOKEN = [0.45, 0.46, 0.47]  # misses PREMIUM's 200 ms TTFT, meets STANDARD's 500 ms


def test_weights_follow_the_default_tiers() -> None:
    assert [TIER_WEIGHTS[t.priority] for t in (SYSTEM, PREMIUM, STANDARD, BACKGROUND)] == [8.0, 4.0, 2.0, 1.0]


def test_each_tier_counts_with_its_weight(make_request: RequestFactory) -> None:
    requests = [_served(make_request, tier, FAST) for tier in (SYSTEM, PREMIUM, STANDARD, BACKGROUND)]
    assert tier_weighted_goodput(requests, duration_s=2.0) == pytest.approx((8 + 4 + 2 + 1) / 2.0)
    assert tier_weighted_goodput(requests[1:2], duration_s=2.0) == pytest.approx(4 / 2.0)


def test_a_missed_slo_drops_the_request_weight(make_request: RequestFactory) -> None:
    good = _served(make_request, PREMIUM, FAST, request_id="good")
    late = _served(make_request, PREMIUM, SLOW_FIRST_TOKEN, request_id="late")
    standard_late_but_in_time = _served(make_request, STANDARD, SLOW_FIRST_TOKEN, request_id="std")
    assert tier_weighted_goodput([good, late, standard_late_but_in_time], duration_s=1.0) == pytest.approx(4 + 2)


def test_a_rejected_premium_request_is_a_miss(make_request: RequestFactory) -> None:
    served = _served(make_request, PREMIUM, FAST, request_id="served")
    rejected = _served(make_request, PREMIUM, [], request_id="rejected", state=RequestState.REJECTED)
    assert tier_weighted_goodput([served, rejected], duration_s=1.0) == pytest.approx(4.0)
    assert tier_attainment([served, rejected])["PREMIUM"] == pytest.approx(0.5)


def test_a_rejected_request_without_targets_does_not_count(make_request: RequestFactory) -> None:
    system = _served(make_request, SYSTEM, [], state=RequestState.REJECTED)
    assert tier_weighted_goodput([system], duration_s=1.0) == 0.0


def test_default_duration_is_first_arrival_to_last_finish(make_request: RequestFactory) -> None:
    first = _served(make_request, STANDARD, [1.1, 1.15], arrival_time_s=1.0, request_id="a")
    last = _served(make_request, BACKGROUND, [3.0, 5.0], arrival_time_s=2.0, request_id="b")
    assert tier_weighted_goodput([first, last]) == pytest.approx((2 + 1) / (5.0 - 1.0))


def test_nothing_finished_is_zero_goodput(make_request: RequestFactory) -> None:
    dropped = _served(make_request, PREMIUM, [], state=RequestState.DROPPED)
    assert tier_weighted_goodput([dropped]) == 0.0
    assert tier_weighted_goodput([]) == 0.0


def test_bad_duration_and_unknown_priority_are_named(make_request: RequestFactory) -> None:
    with pytest.raises(GoodputError, match="duration_s"):
        tier_weighted_goodput([], duration_s=0.0)
    stray = make_request(FAST, priority=7)
    with pytest.raises(GoodputError, match="priority 7"):
        tier_weighted_goodput([stray], duration_s=1.0)
    assert tier_weighted_goodput([stray], duration_s=1.0, weights={7: 3.0}) == pytest.approx(3.0)


def test_tier_attainment_is_none_without_targets(make_request: RequestFactory) -> None:
    requests = [
        _served(make_request, SYSTEM, FAST, request_id="s"),
        _served(make_request, PREMIUM, FAST, request_id="p1"),
        _served(make_request, PREMIUM, SLOW_FIRST_TOKEN, request_id="p2"),
        _served(make_request, PREMIUM, SLOW_FIRST_TOKEN, request_id="p3"),
        _served(make_request, STANDARD, SLOW_FIRST_TOKEN, request_id="st"),
    ]
    attainment = tier_attainment(requests)
    assert list(attainment) == ["SYSTEM", "PREMIUM", "STANDARD", "BACKGROUND"]
    assert attainment["SYSTEM"] is None
    assert attainment["PREMIUM"] == pytest.approx(1 / 3)
    assert attainment["STANDARD"] == pytest.approx(1.0)
    assert attainment["BACKGROUND"] is None


def test_tier_attainment_keeps_other_tiers(make_request: RequestFactory) -> None:
    gold = make_request(FAST, tier="gold", priority=0, ttft_slo_s=0.01)
    assert tier_attainment([gold])["gold"] == 0.0
