"""ltr: rank score first, re-ranked and preemptive, with starvation promotion for a quantum of tokens."""

from __future__ import annotations

import pytest

from semsched.core.request import LengthDistribution
from semsched.policies import make_policy
from tests.policies.factories import displaced_by, service_order
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
