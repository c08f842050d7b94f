"""Tests for semsched/sim/speed.py and the simulator on a machine whose speed changes over time."""

from __future__ import annotations

import pytest

from semsched.core.request import Request
from semsched.latency import EngineOverheads, load_profile
from semsched.sim.engine import Instance
from semsched.sim.speed import SpeedTrace
from tests.support import make_request, make_scheduler, random_requests, simulate


def test_a_trace_holds_each_factor_over_its_window_and_clamps_outside() -> None:
    trace = SpeedTrace(2.0, (1.0, 1.5, 0.8))
    assert [trace.factor_at(t) for t in (-1.0, 0.0, 1.99, 2.0, 4.5, 5.99, 6.0, 100.0)] == [
        1.0, 1.0, 1.0, 1.5, 0.8, 0.8, 0.8, 0.8,
    ]  # fmt: skip
    assert (trace.low, trace.high) == (0.8, 1.5)


def test_unmeasured_windows_take_the_nearest_measured_factor() -> None:
    trace = SpeedTrace.from_windows(1.0, [None, 1.2, None, None, None, 0.9, None])
    assert trace.factors == (1.2, 1.2, 1.2, 1.2, 0.9, 0.9, 0.9)  # window 3 is as near 1 as 5: the earlier
    with pytest.raises(ValueError, match="no window was measured"):
        SpeedTrace.from_windows(1.0, [None, None])


@pytest.mark.parametrize(
    ("window", "factors", "message"),
    [
        (0.0, (1.0,), r"window_s: must be a finite number of seconds > 0 \(got 0.0\)"),
        (float("inf"), (1.0,), "window_s"),
        (1.0, (), "factors: need at least one window"),
        (1.0, (1.0, -0.5), r"factors\[1\]: must be a finite number > 0 \(got -0.5\)"),
        (1.0, (float("nan"),), r"factors\[0\]"),
    ],
)
def test_bad_traces_are_refused_naming_the_field(window: float, factors: tuple[float, ...], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SpeedTrace(window, factors)


def test_an_instance_refuses_a_speed_that_is_not_a_trace() -> None:
    with pytest.raises(TypeError, match="speed: expected SpeedTrace or None, got float"):
        Instance(make_scheduler("fcfs"), load_profile("a100-qwen1.5-4b"), speed=1.2)  # type: ignore[arg-type]


def _token_times(requests: list[Request]) -> list[float]:
    return [t for r in requests for t in r.token_times_s().tolist()]


def test_a_unit_speed_changes_nothing() -> None:
    plain, unit = random_requests(3, 200, rate=10.0), random_requests(3, 200, rate=10.0)
    overheads = EngineOverheads(arrival_s=1e-3, idle_wakeup_s=2e-3, new_shape_s=1e-3)
    simulate(plain, "priority-preempt", overheads=overheads)
    result = simulate(unit, "priority-preempt", overheads=overheads, speed=SpeedTrace(5.0, (1.0,)))
    assert _token_times(unit) == pytest.approx(_token_times(plain), rel=1e-12)
    assert result.num_events == result.num_steps  # a trace turns fast-forward off


def test_a_constant_speed_stretches_every_engine_time_overheads_included() -> None:
    def first_and_last(speed: SpeedTrace | None, overheads: EngineOverheads) -> list[float]:
        request = make_request("x", prompt=64, output=5, arrival=1.0)
        simulate([request], overheads=overheads, speed=speed)
        return [t - 1.0 for t in request.token_times_s().tolist()]

    overheads = EngineOverheads(arrival_s=0.01, idle_wakeup_s=0.02, new_shape_s=0.03)
    assert first_and_last(SpeedTrace(0.5, (2.0,)), overheads) == pytest.approx(
        [2.0 * t for t in first_and_last(None, overheads)]
    )


def test_the_same_request_takes_longer_in_a_slow_stretch() -> None:
    # a lone request per stretch: 10 s at the profile's speed, then 10 s at 1.5x its step times
    trace = SpeedTrace(10.0, (1.0, 1.5))
    requests = [make_request(str(i), prompt=128, output=30, arrival=t) for i, t in enumerate((2.0, 12.0))]
    simulate(requests, speed=trace)
    e2e = [(r.finish_time_s or 0.0) - r.arrival_time_s for r in requests]
    assert e2e[1] == pytest.approx(1.5 * e2e[0])
