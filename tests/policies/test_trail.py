"""trail: shortest predicted remaining output first, preemptive, never preempting a nearly finished request."""

from __future__ import annotations

from semsched.core.request import LengthDistribution, Request
from semsched.policies import make_policy
from tests.policies.factories import displaced_by
from tests.policies.predicted import check_complete_and_exact
from tests.support import make_request, make_scheduler


def _running(generated: int) -> Request:
    request = make_request("running", prompt=16, output=100, predicted_output=LengthDistribution.point(100))
    request.num_output_tokens = request.num_computed_tokens = generated
    return request


def test_a_request_past_80_percent_of_its_predicted_length_is_never_a_victim() -> None:
    policy, view = make_policy("trail"), make_scheduler("trail")
    short = make_request("short", prompt=16, output=5, predicted_output=LengthDistribution.point(5))
    assert [r.request_id for r in policy.victims_for(short, [_running(79)], view, 0.0)] == ["running"]
    assert list(policy.victims_for(short, [_running(80)], view, 0.0)) == []
    lenient = make_policy("trail:protect=0.9")
    assert [r.request_id for r in lenient.victims_for(short, [_running(80)], view, 0.0)] == ["running"]
    # under KV pressure, unprotected requests go first
    assert policy.victim_key(_running(80)) < policy.victim_key(_running(10))


def test_a_shorter_predicted_remaining_displaces_running_work() -> None:
    running = [make_request("long", prompt=60, output=16)]
    short = make_request("short", prompt=20, output=4, arrival=1.0)
    assert displaced_by("trail", running, short, num_gpu_blocks=20) == ["long"]


def test_stable_while_no_unfinished_prediction_can_rise() -> None:
    policy = make_policy("trail")
    policy.on_arrival(make_request("point", predicted_output=LengthDistribution.point(30)), 0.0)
    assert policy.stable_between_events
    rising = make_request("rising", predicted_output=LengthDistribution((5, 200), (0.5, 0.5)))
    policy.on_arrival(rising, 0.0)
    assert not policy.stable_between_events
    policy.on_finish(rising, 1.0)
    assert policy.stable_between_events


def test_completes_a_predicted_workload_identically_in_both_simulator_modes() -> None:
    assert check_complete_and_exact("trail", max_num_seqs=4, num_gpu_blocks=200, block_size=16) > 0
    assert (
        check_complete_and_exact(
            "trail:protect=0.5", range(3, 5), max_num_seqs=16, num_gpu_blocks=60, block_size=16
        )
        > 0
    )
