"""The simulator hands a request over at its ``ready_time_s`` (its predictions ready) and measures from arrival;
the runner applies a cluster's :class:`PredictorCost` to each run's fresh requests."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from semsched.core.request import Request, RequestState
from semsched.metrics import request_metrics
from semsched.predict.cost import PredictorCost
from semsched.sim.runner import ClusterSpec, run_policy
from semsched.workloads import build_workload
from tests.support import make_request, random_requests, simulate


def _token_times(requests: list[Request]) -> list[list[float]]:
    return [r.token_times_s().tolist() for r in requests]


def test_a_request_is_not_scheduled_before_it_is_ready_and_ttft_counts_from_arrival() -> None:
    early = make_request("early", prompt=64, output=200, arrival=0.0)
    late = make_request("late", prompt=64, output=4, arrival=0.0, ready_time_s=1.5)
    simulate([late, early])
    assert early.first_scheduled_time_s == 0.0
    assert late.first_scheduled_time_s is not None and late.first_scheduled_time_s >= 1.5
    assert late.state is RequestState.FINISHED
    metrics = request_metrics(late)
    assert metrics.ttft_s == pytest.approx(late.token_times_s()[0] - late.arrival_time_s)
    assert metrics.ttft_s is not None and metrics.ttft_s > 1.5
    assert metrics.queueing_delay_s is not None and metrics.queueing_delay_s >= 1.5


def test_an_idle_engine_starts_at_the_hand_over() -> None:
    request = make_request(prompt=64, output=4, arrival=0.25, ready_time_s=2.0)
    result = simulate([request])
    assert request.first_scheduled_time_s == 2.0
    assert result.end_time_s > 2.0


@pytest.mark.parametrize("policy", ["fcfs", "priority-preempt", "srpt"])
def test_ready_at_arrival_is_bit_for_bit_no_predictor(policy: str) -> None:
    plain = random_requests(11, 200, rate=10.0)
    stamped = [dataclasses.replace(r, ready_time_s=r.arrival_time_s) for r in random_requests(11, 200, rate=10.0)]
    free = random_requests(11, 200, rate=10.0)
    PredictorCost(0.0, 1, "immediate").apply(free)
    results = [simulate(requests, policy) for requests in (plain, stamped, free)]
    assert _token_times(plain) == _token_times(stamped) == _token_times(free)
    assert len({(r.num_steps, r.num_events, r.end_time_s) for r in results}) == 1


@pytest.mark.parametrize(
    "cost",
    [PredictorCost(0.2, 8, "immediate"), PredictorCost(0.05, 16, "full", max_wait_s=1.0)],
    ids=["immediate", "full"],
)
@pytest.mark.parametrize("policy", ["fcfs", "priority"])
def test_fast_forward_stops_at_hand_overs(cost: PredictorCost, policy: str) -> None:
    """Hand-over times cut fast-forward stretches as arrivals do: both modes give identical token times."""
    runs = []
    for fast_forward in (True, False):
        requests = random_requests(5, 300, rate=12.0)
        cost.apply(requests)
        result = simulate(requests, policy, fast_forward=fast_forward)
        runs.append((result.num_steps, result.num_events, _token_times(requests)))
        assert all(
            r.first_scheduled_time_s is not None and r.first_scheduled_time_s >= (r.ready_time_s or 0.0)
            for r in requests
        )
    assert runs[0][0] == runs[1][0] and runs[0][2] == runs[1][2]
    assert runs[0][1] < runs[1][1]  # it did fast-forward


def _mean_waits_s(cost: PredictorCost | None) -> tuple[float, float]:
    """Mean queueing delay and TTFT (both from arrival) of fcfs on a small, lightly loaded spikes workload."""
    workload = build_workload("spikes:gap_s=1.0;max_concurrent=4", rate_per_s=4.0, duration_s=40.0, seed=0)
    run = run_policy(workload, "fcfs", ClusterSpec(predictor=cost))
    metrics = [request_metrics(r) for r in run.requests]
    assert all(m.finished for m in metrics)
    queueing = [m.queueing_delay_s for m in metrics if m.queueing_delay_s is not None]
    ttfts = [m.ttft_s for m in metrics if m.ttft_s is not None]
    return float(np.mean(queueing)), float(np.mean(ttfts))


def test_full_batching_waits_longer_than_immediate_processing_at_low_load() -> None:
    """Seed 000 Table 1 at 0.001 s: a fast predictor that waits for a batch of 64 costs more than one that runs on
    whatever has arrived, when requests come slowly."""
    none = _mean_waits_s(None)
    immediate = _mean_waits_s(PredictorCost(0.001, 64, "immediate"))
    full = _mean_waits_s(PredictorCost(0.001, 64, "full"))
    for metric in range(2):
        assert none[metric] < immediate[metric] < full[metric]


def test_the_runner_gives_each_run_fresh_ready_times() -> None:
    workload = build_workload("spikes:gap_s=1.0;max_concurrent=4", rate_per_s=4.0, duration_s=10.0, seed=1)
    cost = PredictorCost(0.5, 4, "full")
    run = run_policy(workload, "fcfs", ClusterSpec(predictor=cost))
    expected = cost.ready_times(workload.arrival_time_s)
    assert [r.ready_time_s for r in run.requests] == expected.tolist()
    assert all(r.state is RequestState.FINISHED for r in run.requests)
    plain = run_policy(workload, "fcfs", ClusterSpec())
    assert all(r.ready_time_s is None for r in plain.requests)
