"""mean: expected remaining cost first, preemptive, refreshed per bucket like gittins."""

from __future__ import annotations

import pytest

from semsched.core.request import LengthDistribution
from semsched.policies import make_policy
from tests.policies.factories import displaced_by
from tests.policies.predicted import check_complete_and_exact
from tests.support import make_request


def test_the_index_is_the_expected_remaining_cost() -> None:
    policy = make_policy("mean:cost=resource")
    request = make_request(prompt=10, output=30, predicted_output=LengthDistribution((4, 20), (0.5, 0.5)))
    policy.on_arrival(request, 0.0)
    # E[O^2/2 + 10*O] = 0.5 * (8 + 40) + 0.5 * (200 + 200)
    assert policy.waiting_key(request, 0.0) == (1.0, 224.0, 0.0)  # (not an SLO at risk, index, arrival)


def test_a_smaller_expected_remaining_cost_displaces_running_work() -> None:
    running = [make_request("long", prompt=60, output=16)]
    short = make_request("short", prompt=20, output=4, arrival=1.0)
    assert displaced_by("mean:displace=true", running, short, num_gpu_blocks=20) == ["long"]


@pytest.mark.parametrize("spec", ["mean", "mean:displace=true", "mean:cost=output;refresh=false;displace=true"])
def test_completes_a_predicted_workload_identically_in_both_simulator_modes(spec: str) -> None:
    # roomy KV: only a displacing variant preempts there
    preemptions = check_complete_and_exact(spec, max_num_seqs=4, num_gpu_blocks=200, block_size=16)
    assert preemptions > 0 if "displace=true" in spec else preemptions == 0
