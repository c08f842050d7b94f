"""ltr: rank score first, re-ranked and preemptive, with starvation promotion for a quantum of tokens."""

from __future__ import annotations

import random
from typing import cast

import pytest

from semsched.core.policy import SchedulerView
from semsched.core.request import LengthDistribution, Request, RequestState
from semsched.policies import make_policy
from tests.policies.factories import displaced_by, running_request_event, service_order
from tests.policies.predicted import check_complete_and_exact
from tests.support import make_request


def test_orders_by_the_predicted_score() -> None:
    requests = [
        make_request("blocker", prompt=8, output=2),
        make_request("a", prompt=8, output=3, arrival=0.001, predicted_output=LengthDistribution.point(90)),
        make_request("b", prompt=8, output=3, arrival=0.002, predicted_output=LengthDistribution.point(10)),
    ]
    assert service_order("ltr:starve_s=0", requests) == ["blocker", "b", "a"]


def test_a_better_ranked_arrival_displaces_running_work() -> None:
    running = [make_request("long", prompt=60, output=16)]
    assert displaced_by(
        "ltr", running, make_request("short", prompt=20, output=4, arrival=1.0), num_gpu_blocks=20
    ) == ["long"]


def test_a_starved_request_is_promoted_for_a_quantum_of_tokens() -> None:
    policy = make_policy("ltr:starve_s=5;quantum_tokens=3")
    starved = make_request("starved", output=500, arrival=0.0)
    fresh = make_request("fresh", output=5, arrival=4.0)
    policy.on_arrival(starved, 0.0)
    policy.on_arrival(fresh, 4.0)
    assert policy.waiting_key(starved, 4.9) > policy.waiting_key(fresh, 4.9)
    assert policy.waiting_key(starved, 5.0) < policy.waiting_key(fresh, 5.0)  # promoted
    view = None
    assert list(policy.victims_for(fresh, [starved], view, 5.0)) == []  # type: ignore[arg-type]
    for _ in range(3):
        starved.num_output_tokens += 1
        policy.on_tokens(starved, 1, 6.0)
    assert policy.waiting_key(starved, 6.0) > policy.waiting_key(fresh, 6.0)  # the quantum is used up
    assert [r.request_id for r in policy.victims_for(fresh, [starved], view, 6.0)] == ["starved"]  # type: ignore[arg-type]


def test_stable_only_without_starvation_prevention() -> None:
    assert make_policy("ltr:starve_s=0").stable_between_events
    assert make_policy("ltr:starve_s=0").rekey_interval_s is None
    assert not make_policy("ltr").stable_between_events and make_policy("ltr").rekey_interval_s == 1.0


@pytest.mark.parametrize("spec", ["ltr", "ltr:starve_s=0.5;check_s=0.1", "ltr:starve_s=0"])
def test_completes_a_predicted_workload_identically_in_both_simulator_modes(spec: str) -> None:
    assert check_complete_and_exact(spec, max_num_seqs=4, num_gpu_blocks=200, block_size=16) > 0


@pytest.mark.parametrize("seed", range(5))
def test_a_quantum_counted_only_where_it_may_run_out_matches_one_counted_at_every_emission(seed: int) -> None:
    """The scheduler skips ``on_tokens`` below ``notify_tokens_at``: the promotion ends at the same emission, with
    the same key change, as when every emission is heard (emissions of 1-5 tokens, as speculation or a
    fast-forwarded stretch gives)."""
    rng = random.Random(seed)
    quantum = rng.randint(1, 40)
    heard_all, skipping = (make_policy(f"ltr:starve_s=1;quantum_tokens={quantum}") for _ in range(2))
    requests = [make_request(f"r{i}", output=500, arrival=0.0) for i in range(2)]
    for policy, request in zip((heard_all, skipping), requests, strict=True):
        policy.on_arrival(request, 0.0)
        policy.waiting_key(request, 2.0)  # starved: promoted
    while requests[0].policy_state["ltr.promoted_tokens"] > 0:
        count = rng.randint(1, 5)
        for request in requests:
            request.num_output_tokens += count
        heard_all.on_tokens(requests[0], count, 3.0)
        if requests[1].num_output_tokens >= requests[1].notify_tokens_at:
            skipping.on_tokens(requests[1], count, 3.0)
        assert heard_all.victim_key(requests[0]) == skipping.victim_key(requests[1])
        assert heard_all.victim_key_changes == skipping.victim_key_changes
    assert skipping.victim_key_changes == 1 and requests[1].policy_state["ltr.promoted_tokens"] == 0.0


@pytest.mark.parametrize("seed", range(4))
def test_the_kept_victim_keys_are_the_keys_the_requests_state_gives(seed: int) -> None:
    """The schedulers read ``victim_key`` from the policy's kept keys: through arrivals, promotions (at the
    starvation checks and through ``waiting_key``), emissions that spend them, preemptions, finishes and hand-offs,
    each running request's kept key is what its state gives."""
    policy = make_policy("ltr:starve_s=1;quantum_tokens=5;check_s=1")
    rng = random.Random(seed)
    requests = [make_request(f"r{i}", output=rng.randint(5, 400), arrival=float(i % 7)) for i in range(30)]
    for request in requests:
        policy.on_arrival(request, 0.0)

    def state_key(request: Request) -> tuple[float, ...]:
        promoted = request.policy_state.get("ltr.promoted_tokens", 0.0) > 0
        return (0.0 if promoted else 1.0, request.predicted_output_tokens(), request.arrival_time_s)

    for now in range(1, 400):
        policy.step_budget(cast(SchedulerView, None), float(now))  # (promotes the starved at each check)
        request = rng.choice(requests)
        action = rng.random()
        if request.state is RequestState.RUNNING:
            running_request_event(policy, request, action, rng, float(now))
        elif request.state is not RequestState.FINISHED and action < 0.6:
            request.state = RequestState.RUNNING
        running = [r for r in requests if r.state is RequestState.RUNNING]
        assert [policy.victim_key(r) for r in running] == [state_key(r) for r in running]
