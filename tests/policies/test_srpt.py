"""srpt: shortest (oracle or predicted) remaining output first, preemptive; when its order is stable."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from semsched.core.request import LengthDistribution, Request
from semsched.policies import make_policy
from semsched.policies.srpt import remaining_can_rise
from tests.policies.factories import displaced_by, service_order
from tests.support import make_request, simulate

BIMODAL = LengthDistribution((5, 200), (0.5, 0.5))  # E[remaining]: 102.5 - g up to g = 4, then 195 at g = 5


def test_serves_the_shortest_remaining_output_first() -> None:
    requests = [
        make_request("blocker", arrival=0.0, output=3),
        make_request("long", arrival=0.001, output=40),
        make_request("short", arrival=0.002, output=2),  # as short as the blocker's rest: no displacement
    ]
    assert service_order("srpt", requests) == ["blocker", "short", "long"]


def test_a_shorter_arrival_displaces_longer_running_work() -> None:
    running = [make_request("long", prompt=60, output=16)]
    short = make_request("short", prompt=20, output=4, arrival=1.0)
    assert displaced_by("srpt", running, short, num_gpu_blocks=20) == ["long"]
    assert displaced_by("srpt", [make_request("tiny", prompt=60, output=4)], short, num_gpu_blocks=20) == []


def test_expected_remaining_rises_past_the_short_mode_of_a_bimodal_prediction() -> None:
    assert remaining_can_rise(BIMODAL)
    assert BIMODAL.expected_remaining(5) > BIMODAL.expected_remaining(4)
    assert not remaining_can_rise(LengthDistribution.point(50))
    assert not remaining_can_rise(LengthDistribution(tuple(range(1, 41)), (1 / 40,) * 40))  # uniform
    assert not remaining_can_rise(LengthDistribution((5, 200), (0.0, 1.0)))  # a point at 200, really


@settings(max_examples=200, deadline=None)
@given(
    lengths=st.sets(st.integers(1, 60), min_size=1, max_size=6),
    weights=st.lists(st.integers(0, 20), min_size=6, max_size=6),
)
def test_a_rise_is_never_missed(lengths: set[int], weights: list[int]) -> None:
    support = sorted(lengths)
    mass = weights[: len(support)]
    if sum(mass) == 0:
        mass = [1] * len(support)
    prediction = LengthDistribution(tuple(support), tuple(w / sum(mass) for w in mass))
    expected = [prediction.expected_remaining(g) for g in range(support[-1] + 2)]
    rises = any(later > earlier for earlier, later in zip(expected, expected[1:], strict=False))
    if rises:
        assert remaining_can_rise(prediction)


def test_stable_while_no_unfinished_prediction_can_rise() -> None:
    policy = make_policy("srpt:length=predicted")
    rising = make_request("rising", predicted_output=BIMODAL)
    steady = make_request("steady", predicted_output=LengthDistribution.point(30))
    assert policy.stable_between_events
    policy.on_arrival(steady, 0.0)
    assert policy.stable_between_events
    policy.on_arrival(rising, 0.0)
    assert not policy.stable_between_events
    policy.on_finish(rising, 1.0)
    assert policy.stable_between_events
    # the true remaining output only shrinks: the oracle does not look at predictions
    oracle = make_policy("srpt")
    oracle.on_arrival(make_request("rising", predicted_output=BIMODAL), 0.0)
    assert oracle.stable_between_events


def _long_then_short() -> list[Request]:
    """On a one-sequence engine, "long" (true length 50, predicted 5 or 200) runs first; "short" (predicted 150)
    waits behind it until long's expected remaining jumps from 98.5 to 195 after its 5th token."""
    return [
        make_request("long", prompt=32, output=50, arrival=0.0, predicted_output=BIMODAL),
        make_request("short", prompt=32, output=10, arrival=0.001, predicted_output=LengthDistribution.point(150)),
    ]


def test_a_rising_prediction_displaces_mid_decode_in_both_simulator_modes() -> None:
    runs = {}
    for fast_forward in (True, False):
        requests = _long_then_short()
        simulate(requests, "srpt:length=predicted", fast_forward=fast_forward, max_num_seqs=1)
        runs[fast_forward] = [(r.num_preemptions, r.token_times_s().tolist()) for r in requests]
    assert runs[True] == runs[False]
    (long_preemptions, long_times), (_, short_times) = runs[False]
    assert long_preemptions == 1 and len(long_times) == 50
    assert long_times[4] < short_times[0] < short_times[-1] < long_times[5]  # displaced after its 5th token


def test_predictions_that_cannot_rise_keep_fast_forward() -> None:
    def run(fast_forward: bool) -> tuple[int, int, list[list[float]]]:
        rng = np.random.default_rng(4)
        requests = [
            make_request(
                str(i),
                prompt=int(rng.integers(16, 200)),
                output=int(rng.integers(20, 120)),
                arrival=0.02 * i,
                predicted_output=LengthDistribution.point(int(rng.integers(20, 120))),
            )
            for i in range(40)
        ]
        result = simulate(requests, "srpt:length=predicted", fast_forward=fast_forward, max_num_seqs=4)
        return result.num_steps, result.num_events, [r.token_times_s().tolist() for r in requests]

    fast, slow = run(True), run(False)
    assert fast[0] == slow[0] and fast[2] == slow[2]
    assert fast[1] < fast[0] / 2  # most steps were fast-forwarded, with requests waiting
