"""ssjf: shortest point prediction (mean or median) first, non-preemptive."""

from __future__ import annotations

from semsched.core.request import LengthDistribution, Request
from semsched.policies import make_policy
from tests.policies.factories import displaced_by, service_order
from tests.policies.predicted import check_complete_and_exact
from tests.support import make_request


def _requests() -> list[Request]:
    """ "skewed" has the larger mean (40.6 vs 30) but the smaller median (2 vs 30)."""
    return [
        make_request("blocker", prompt=8, output=2),
        make_request("even", prompt=8, output=4, arrival=0.001, predicted_output=LengthDistribution.point(30)),
        make_request(
            "skewed", prompt=8, output=4, arrival=0.002, predicted_output=LengthDistribution((2, 100), (0.6, 0.4))
        ),
    ]


def test_orders_by_the_chosen_point_prediction() -> None:
    assert service_order("ssjf", _requests()) == ["blocker", "even", "skewed"]
    assert service_order("ssjf:point=median", _requests()) == ["blocker", "skewed", "even"]


def test_never_displaces_and_stays_stable() -> None:
    running = [make_request("long", prompt=60, output=16)]
    assert (
        displaced_by("ssjf", running, make_request("short", prompt=20, output=2, arrival=1.0), num_gpu_blocks=20)
        == []
    )
    policy = make_policy("ssjf")
    assert policy.stable_between_events and policy.uses_predicted_lengths


def test_completes_a_predicted_workload_identically_in_both_simulator_modes() -> None:
    check_complete_and_exact("ssjf", max_num_seqs=4, num_gpu_blocks=200, block_size=16)
    assert check_complete_and_exact("ssjf:point=median", max_num_seqs=16, num_gpu_blocks=60, block_size=16) > 0
