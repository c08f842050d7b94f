"""The gateway's admission: which targets an idle server meets (IdleFloors), as the guard's feasibility judge."""

from __future__ import annotations

from semsched.core.tiers import DEFAULT_TIERS
from semsched.gateway.admission import IDLE_MIN_SAMPLES, IdleFloors
from semsched.policies.slo_guard import SLOGuardConfig

PREMIUM = next(t for t in DEFAULT_TIERS if t.name == "PREMIUM")
TARGET_S = PREMIUM.ttft_slo_s or 0.0


def test_a_target_is_infeasible_once_enough_requests_alone_miss_it_and_feasible_again_after_the_window() -> None:
    config = SLOGuardConfig(window_s=10.0, evaluate_every_s=0.0)  # the quantile recomputed at every call
    floors = IdleFloors(config, DEFAULT_TIERS)
    for i in range(IDLE_MIN_SAMPLES - 1):
        floors.record(PREMIUM.priority, "ttft", 2 * TARGET_S, now_s=float(i))
        assert floors.feasible(PREMIUM.priority, "ttft", now_s=float(i))  # too few to judge
    floors.record(PREMIUM.priority, "ttft", 2 * TARGET_S, now_s=3.0)
    assert not floors.feasible(PREMIUM.priority, "ttft", now_s=3.0)
    assert floors.feasible(PREMIUM.priority, "tpot", now_s=3.0)  # nothing known of TPOT
    assert floors.feasible(PREMIUM.priority, "ttft", now_s=20.0)  # the window forgot them
    within = TARGET_S * (1 - config.shed_headroom)
    for i in range(IDLE_MIN_SAMPLES):
        floors.record(PREMIUM.priority, "ttft", 0.5 * within, now_s=30.0 + i)
    assert floors.feasible(PREMIUM.priority, "ttft", now_s=33.0)
    floors.record(PREMIUM.priority, "ttft", 2 * within, now_s=34.0)  # the p99 passes the at-risk line
    assert not floors.feasible(PREMIUM.priority, "ttft", now_s=34.0)
