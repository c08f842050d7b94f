"""slide-batching's fill of an all-decode queue (issue 29): when every request is a running decode the fill
chooses what lines 14-18 of Algorithm 1 choose, one request at a time, with the same estimated time to the last
bit, whatever the time budget (none, more than all of them, exactly all of them, less)."""

from __future__ import annotations

import math
import random

import pytest

from semsched.core.request import Request, RequestState
from semsched.policies.slide_batching import SlideBatching, _Queue


def _decodes(rng: random.Random, n: int) -> list[Request]:
    requests = []
    for i in range(n):
        request = Request(request_id=f"r{i}", prompt_tokens=rng.randint(1, 300), max_output_tokens=2000,
                          arrival_time_s=float(i))
        request.num_output_tokens = rng.randint(1, 500)
        request.num_computed_tokens = request.prompt_tokens + request.num_output_tokens - 1  # one token to go
        request.state = RequestState.RUNNING
        requests.append(request)
    return requests


def _greedy(queue: _Queue, order: list[int], t_c: float, budget_s: float) -> tuple[list[tuple[int, int]], float]:
    """Lines 14-18 for decodes, one at a time: each one whose cost fits what is left, until nothing is left."""
    estimated_s, chosen = t_c, []
    exec_s = queue.exec_s
    for i in order:
        if estimated_s >= budget_s:
            break
        if exec_s[i] > budget_s - estimated_s:
            continue
        chosen.append((i, 1))
        estimated_s += exec_s[i]
    return chosen, estimated_s


@pytest.mark.parametrize("seed", range(6))
def test_all_decode_fill_is_the_one_at_a_time_fill(seed: int) -> None:
    rng = random.Random(seed)
    policy = SlideBatching()
    requests = _decodes(rng, rng.randint(1, 300))
    queue = _Queue.of(requests, policy, now_s=0.0)
    assert not any(queue.prefill) and all(queue.started)  # the all-decode case
    order = rng.sample(range(len(requests)), len(requests))
    t_c = policy.estimator.t_c
    exact_s = _greedy(queue, order, t_c, math.inf)[1]  # every one, summed in order
    budgets = [math.inf, exact_s, math.nextafter(exact_s, math.inf), math.nextafter(exact_s, 0.0),
               t_c + (exact_s - t_c) * rng.random(), t_c]
    for budget_s in budgets:
        chosen, estimated_s = policy._fill(requests, queue, order, budget_s)
        expected, expected_s = _greedy(queue, order, t_c, budget_s)
        if not expected:  # nothing fits: the first request in order runs anyway (progress)
            expected = [(order[0], 1)]
            expected_s = t_c + queue.exec_s[order[0]]
        assert chosen == expected, budget_s
        assert estimated_s == expected_s, budget_s
