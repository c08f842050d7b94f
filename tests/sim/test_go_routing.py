"""Tests for semsched/sim/go_routing.py: PROSERVE's Min-Load and GoRouting (seed 001 §4.3, Algorithm 2)."""

from __future__ import annotations

import pytest

from semsched.core.request import Request, RequestState
from semsched.latency import BatchConfig, BatchLatencyModel
from semsched.metrics.tdg import TDGWeights
from semsched.sim.go_routing import GoRoutingConfig, GoRoutingRouter, MinLoadRouter
from semsched.sim.router import InstanceView, RouterContext, RouterError, make_router
from semsched.sim.runner import ClusterSpec, run_policy
from semsched.workloads import build_workload
from tests.support import make_request, make_scheduler

# exec of a prefill alone = t_c + c_p · prompt: 10 ms + 1 ms per token
LATENCY = BatchLatencyModel(BatchConfig(t_c=0.01, a_p=0.0, b_p=0.0, c_p=0.001, a_d=0.0, b_d=0.002))
SLO_S = 0.7


def _bound(router: MinLoadRouter | GoRoutingRouter, *, disaggregated: bool = True,
           weights: TDGWeights | None = None) -> MinLoadRouter | GoRoutingRouter:
    router.bind(RouterContext(LATENCY, disaggregated=disaggregated, tdg_weights=weights))
    return router


def _views(count: int, role: str = "prefill") -> list[InstanceView]:
    return [InstanceView(i, make_scheduler(), role) for i in range(count)]  # type: ignore[arg-type]


def _exec_s(prompt: int) -> float:
    return LATENCY.step_time_s([(prompt, 0)], 0, 0)


def _fig8_loads(router: MinLoadRouter | GoRoutingRouter) -> None:
    """Instance A (0) moderately loaded: 400 ms queued; instance B (1) less loaded: 150 ms."""
    router.record_dispatch(make_request("load-a", prompt=390, ttft_slo_s=SLO_S), 0, 0.0)
    router.record_dispatch(make_request("load-b", prompt=140, ttft_slo_s=SLO_S), 1, 0.0)


def _fig8_requests() -> tuple[Request, Request]:
    r1 = make_request("R1", prompt=190, arrival=0.0, ttft_slo_s=SLO_S)  # 200 ms of work
    r2 = make_request("R2", prompt=390, arrival=0.001, ttft_slo_s=SLO_S)  # 400 ms, shortly after
    return r1, r2


def test_the_toy_example_of_fig8_min_load_over_balances_and_go_routing_does_not() -> None:
    assert _exec_s(390) == pytest.approx(0.4) and _exec_s(140) == pytest.approx(0.15)
    assert _exec_s(190) == pytest.approx(0.2)
    views = _views(2)
    r1, r2 = _fig8_requests()

    min_load = _bound(MinLoadRouter())
    _fig8_loads(min_load)
    assert min_load.route(r1, views, 0.0) == 1  # B: the less-loaded instance
    # then R2 meets its SLO nowhere: every instance's queue plus R2 runs past R2's deadline
    assert all(r2.arrival_time_s + min_load.exec_s(i, 0.001) + _exec_s(390) > r2.ttft_deadline_s for i in (0, 1))

    go = _bound(GoRoutingRouter())
    assert isinstance(go, GoRoutingRouter)
    _fig8_loads(go)
    assert go.route(r1, views, 0.0) == 0  # A: R1 still meets its SLO there
    first = go.last_decision
    assert first is not None and not first.fallback
    assert first.deltas[0] == first.deltas[1] > 0 and first.candidates == (0, 1)
    assert first.light == () and first.heavy == ()  # so the most loaded candidate that is not heavy: A
    assert go.route(r2, views, 0.001) == 1  # B kept the room R2 needs
    second = go.last_decision
    assert second is not None and second.candidates == (1,) and second.deltas[0] == 0 < second.deltas[1]
    # both meet their SLO on the queues GoRouting built (each instance's estimated completions, in order)
    assert go.gain(0, 0.001) == pytest.approx(2.0) and go.gain(1, 0.001) == pytest.approx(2.0)
    assert 0.001 + go.exec_s(0, 0.001) <= r1.ttft_deadline_s
    assert 0.001 + go.exec_s(1, 0.001) <= r2.ttft_deadline_s


def test_no_gain_anywhere_falls_back_to_the_routers_own_seeded_random_choice() -> None:
    def choices(seed: int) -> list[int]:
        router = _bound(GoRoutingRouter(GoRoutingConfig(seed=seed)))
        assert isinstance(router, GoRoutingRouter)
        views, picked = _views(3), []
        for i in range(24):  # 2 s of work against a 0.1 s TTFT SLO: no instance meets it
            picked.append(router.route(make_request(str(i), prompt=2000, ttft_slo_s=0.1), views, 0.0))
            assert router.last_decision is not None and router.last_decision.fallback
            assert max(router.last_decision.deltas) <= 0
        return picked

    assert choices(7) == choices(7)  # no global state: the same seed, the same choices
    assert choices(7) != choices(8)
    assert set(choices(7)) == {0, 1, 2}


def test_a_request_that_would_make_a_queued_one_miss_has_a_negative_gain() -> None:
    router = _bound(GoRoutingRouter())
    assert isinstance(router, GoRoutingRouter)
    router.record_dispatch(make_request("in-flight", prompt=90), 0, 0.0)  # 0.1 s, no SLO
    router.record_dispatch(make_request("queued", prompt=290, ttft_slo_s=0.45), 0, 0.0)  # done at 0.4: meets
    urgent = make_request("urgent", prompt=290, ttft_slo_s=0.35)  # jumps ahead by deadline, misses, and so does
    router.route(urgent, _views(1), 0.0)  # "queued"
    decision = router.last_decision
    assert decision is not None and decision.deltas[0] < 0 and decision.fallback


def test_alpha_sets_how_close_to_the_best_gain_a_candidate_must_be() -> None:
    weights = TDGWeights(first_token=1.0, decode_token=1.0, per_priority={0: 2.0}, default_priority_weight=1.0)

    def candidates(alpha: float) -> tuple[int, ...]:
        router = _bound(GoRoutingRouter(GoRoutingConfig(alpha=alpha)), weights=weights)
        assert isinstance(router, GoRoutingRouter)
        # on B the new request goes ahead of a queued low-priority one with a later deadline (after the one in
        # flight) and pushes it past its deadline: B gains 2 - 1, the empty A 2
        router.record_dispatch(make_request("busy", prompt=40, priority=1), 1, 0.0)
        router.record_dispatch(make_request("late", prompt=190, priority=1, ttft_slo_s=0.45), 1, 0.0)
        router.route(make_request("new", prompt=290, priority=0, ttft_slo_s=0.4), _views(2), 0.0)
        assert router.last_decision is not None
        assert router.last_decision.deltas == pytest.approx((2.0, 1.0))
        return router.last_decision.candidates

    assert candidates(0.9) == (0,)
    assert candidates(0.5) == (0, 1)
    assert candidates(0.0) == (0, 1)


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("go-routing:mu=1;lam=1", 1),  # every candidate light: the least loaded, as Min-Load
        ("go-routing:mu=0;lam=0", 1),  # every candidate heavy: the least loaded candidate
        ("go-routing:mu=0;lam=0.9", 0),  # nothing light, A not heavy: the most loaded that is not heavy
        ("go-routing:mu=0;lam=0.85", 1),  # A + R1 = 0.6 s > 0.85 x 0.7 s: A heavy, so B
    ],
)
def test_mu_and_lambda_pick_light_heavy_and_the_rest(spec: str, expected: int) -> None:
    router = make_router(spec)
    assert isinstance(router, GoRoutingRouter)
    router.bind(RouterContext(LATENCY, disaggregated=True))
    _fig8_loads(router)
    assert router.route(_fig8_requests()[0], _views(2), 0.0) == expected


def test_the_queue_estimate_subtracts_the_lag_from_the_in_flight_request_only() -> None:
    router = _bound(GoRoutingRouter())
    assert isinstance(router, GoRoutingRouter)
    head, second = make_request("head", prompt=390), make_request("second", prompt=190)
    router.record_dispatch(head, 0, 0.0)
    assert router.exec_s(0, 0.1) == pytest.approx(0.3)
    router.record_dispatch(second, 0, 0.1)  # an update: the lag so far is folded into the head's estimate
    assert router.exec_s(0, 0.1) == pytest.approx(0.3 + 0.2)
    assert router.exec_s(0, 0.3) == pytest.approx(0.1 + 0.2)
    assert router.exec_s(0, 5.0) == pytest.approx(0.2)  # the head never below 0; the second has not started
    view = _views(1)[0]
    router.on_first_token(head, view, 0.5)  # the second is in flight from now
    assert router.exec_s(0, 0.55) == pytest.approx(0.15)
    router.on_finish(second, view, 0.6)  # ended before its first token (rejected, dropped): it leaves too
    assert router.exec_s(0, 0.6) == 0.0


def test_co_located_estimates_count_decoding_requests_and_use_phi_a() -> None:
    router = _bound(GoRoutingRouter(), disaggregated=False)
    assert isinstance(router, GoRoutingRouter)
    view = _views(1, role="mixed")[0]
    requests = [make_request(str(i), prompt=90, ttft_slo_s=1.0, tpot_slo_s=0.2) for i in range(3)]
    for request in requests:
        router.record_dispatch(request, 0, 0.0)
    router.on_first_token(requests[0], view, 0.0)  # n_d = 1
    assert router.queue(0).num_decoding == 1
    assert router.exec_s(0, 0.0) == pytest.approx(2 * _exec_s(90) + LATENCY.config.b_d)
    # φa: t_budget = min(time to the nearest deadline, TPOT SLO) = 0.2 s; both queued prefills done after
    # t_budget / (t_budget - t_c) · Σ T̃ + n_d · b_d
    done_s = 0.2 / (0.2 - 0.01) * (2 * 0.09) + LATENCY.config.b_d
    assert done_s <= 1.0 and router.gain(0, 0.0) == pytest.approx(2.0)
    # 10 ms before the deadlines the budget is the floor (50 ms): even with the in-flight prefill's lag
    # subtracted, the one left takes 0.05 / 0.04 · 90 ms plus a decode, past the deadline
    assert router.gain(0, 0.99) == 0.0
    router.on_finish(requests[0], view, 0.1)
    assert router.queue(0).num_decoding == 0


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("go-routing:alpha=1.5", r"router 'go-routing': alpha: must be from 0 to 1 \(got 1.5\)"),
        ("go-routing:alpha=high", r"router 'go-routing': parameter 'alpha' must be float, got 'high'"),
        ("go-routing:mu=0.5;lam=0.2", r"lam: must be a finite number >= mu \(0.5\) \(got 0.2\)"),
        ("go-routing:order=lifo", r"order: must be 'deadline' or 'fcfs' \(got 'lifo'\)"),
        ("go-routing:min_budget_s=0", r"min_budget_s: must be a finite number > 0"),
        ("go-routing:gamma=1", r"unknown parameter 'gamma' \(known: alpha, mu, lam, order, min_budget_s, seed\)"),
        ("go-routing:alpha=0.5;alpha=0.6", r"parameter 'alpha' given twice"),
        ("min-load:load=requests", r"router 'min-load': load: must be 'work' or 'tokens'"),
        ("round-robin:seed=1", r"router 'round-robin' takes no parameters \(got seed\)"),
        ("go-routing:alpha", r"parameter 'alpha' must look like key=value"),
    ],
)
def test_a_bad_router_spec_is_a_clear_error_before_anything_runs(spec: str, message: str) -> None:
    with pytest.raises(RouterError, match=message):
        make_router(spec)
    with pytest.raises(RouterError, match=message):
        ClusterSpec(router=spec)


def test_a_router_that_needs_a_latency_model_says_so_when_unbound() -> None:
    with pytest.raises(RouterError, match=r"router 'go-routing' is not bound to a cluster: call bind"):
        make_router("go-routing").route(make_request(), _views(2), 0.0)
    tokens = make_router("min-load:load=tokens")  # counts tokens: needs none
    views = _views(2)
    prompts = (100, 30, 50)
    assert [tokens.route(make_request(str(i), prompt=p), views, 0.0) for i, p in enumerate(prompts)] == [0, 1, 1]


@pytest.mark.parametrize("router", ["min-load", "go-routing", "go-routing:order=fcfs"])
def test_co_located_clusters_run_with_the_new_routers_and_both_fast_forward_modes_agree(router: str) -> None:
    workload = build_workload("azure-conv", rate_per_s=8.0, duration_s=20.0, seed=5)
    cluster = ClusterSpec(num_instances=3, router=router)
    fast = run_policy(workload, "fcfs", cluster)
    slow = run_policy(workload, "fcfs", cluster, fast_forward=False)
    assert [r.token_times_s().tolist() for r in fast.requests] == [
        r.token_times_s().tolist() for r in slow.requests
    ]
    assert fast.summary.to_dict() == slow.summary.to_dict()
    assert all(r.state is RequestState.FINISHED for r in fast.requests)
    assert fast.result.num_events < slow.result.num_events
