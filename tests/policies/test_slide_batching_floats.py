"""slide-batching's plan arithmetic in plain Python floats (issue 29) is numpy's, bit for bit: the columns of eq.
3-7 against the vectorised formulas, sums against ``numpy.sum`` (pairwise), orders against ``numpy.lexsort``."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from semsched.core.request import Request, RequestState
from semsched.policies.slide_batching import (
    SlideBatching,
    SlideBatchingConfig,
    _by_deadline,
    _Queue,
    _sorted,
    pairwise_sum,
)

_finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False)
_values = st.one_of(_finite, st.floats(min_value=1e-12, max_value=1e-3),
                    st.sampled_from([math.inf, -math.inf, 0.0, -0.0]))


@settings(max_examples=300, deadline=None)
@given(st.lists(_values, max_size=600) | st.lists(st.floats(min_value=1e-9, max_value=10.0), min_size=120,
                                                   max_size=2600))
def test_pairwise_sum_is_numpy_sum(values: list[float]) -> None:
    expected = float(np.sum(np.array(values, dtype=np.float64)))
    got = pairwise_sum(values)
    assert got == expected or (math.isnan(got) and math.isnan(expected))
    assert math.copysign(1.0, got) == math.copysign(1.0, expected)


@st.composite
def _queues(draw: st.DrawFn) -> tuple[list[Request], float, float, float | None]:
    requests = []
    for i in range(draw(st.integers(1, 40))):
        prompt = draw(st.integers(1, 5000))
        outputs = draw(st.integers(0, 400))
        computed = draw(st.integers(0, prompt + outputs))
        request = Request(f"r{i}", prompt_tokens=prompt, max_output_tokens=outputs + 1,
                          arrival_time_s=draw(st.floats(0.0, 1e4)),
                          ttft_slo_s=draw(st.none() | st.floats(1e-3, 30.0)),
                          tpot_slo_s=draw(st.none() | st.floats(1e-3, 1.0)), priority=draw(st.integers(0, 3)))
        request.num_output_tokens, request.num_computed_tokens = outputs, computed
        request.state = draw(st.sampled_from([RequestState.RUNNING, RequestState.WAITING]))
        requests.append(request)
    now_s = draw(st.floats(0.0, 2e4))
    beta = draw(st.floats(1e-3, 50.0) | st.just(1e-12))
    return requests, now_s, beta, draw(st.none() | st.floats(0.01, 20.0))


def _numpy_columns(policy: SlideBatching, requests: list[Request], now_s: float) -> dict[str, np.ndarray]:
    """Lines 2-6 of Algorithm 1 as numpy arrays (the vectorised formulas of eq. 3-7)."""
    n, config = len(requests), policy.estimator.model.config
    computed = np.fromiter((r.num_computed_tokens for r in requests), np.float64, n)
    outputs = np.fromiter((r.num_output_tokens for r in requests), np.float64, n)
    prompt = np.fromiter((r.prompt_tokens for r in requests), np.float64, n)
    arrival = np.fromiter((r.arrival_time_s for r in requests), np.float64, n)
    ttft = np.fromiter((math.inf if r.ttft_slo_s is None else r.ttft_slo_s for r in requests), np.float64, n)
    tpot = np.fromiter((math.inf if r.tpot_slo_s is None else r.tpot_slo_s for r in requests), np.float64, n)
    weights = np.fromiter((policy.priority_weight(r.priority) for r in requests), np.float64, n)
    uncomputed = prompt + outputs - computed
    prefill = (uncomputed > 1) | (computed < prompt)
    decode_s = config.a_d * computed + config.b_d
    prefill_s = (config.a_p * uncomputed**2 + config.b_p * uncomputed * computed + config.c_p * uncomputed
                 + config.d_p)
    exec_s = np.maximum(policy.estimator.beta * np.where(prefill, prefill_s, decode_s), 1e-9)
    with np.errstate(invalid="ignore"):
        offset_s = np.where(outputs > 0, outputs * tpot, 0.0)
    remain = arrival + ttft + offset_s - now_s
    density = np.where(outputs == 0, policy.first_token_weight(), 1.0) * weights / exec_s
    return {"prefill": prefill, "exec_s": exec_s, "remain": remain, "density": density, "arrival_s": arrival}


@settings(max_examples=200, deadline=None)
@given(_queues(), st.data())
def test_plan_columns_sums_and_orders_are_numpys(
        case: tuple[list[Request], float, float, float | None], data: st.DataObject) -> None:
    requests, now_s, beta, first_token_weight = case
    policy = SlideBatching()
    policy.estimator._beta = beta
    if first_token_weight is not None:  # the learned w_p: mean prompt over mean output of the finished ones
        policy._prompt_tokens_seen, policy._arrivals_seen = 1000, 3
        policy._output_tokens_finished, policy._finished_seen = round(1000 / first_token_weight) + 1, 3
    queue = _Queue.of(requests, policy, now_s)
    expected = _numpy_columns(policy, requests, now_s)
    for name, column in expected.items():
        assert [float(x).hex() for x in getattr(queue, name)] == [float(x).hex() for x in column.tolist()], name
    assert pairwise_sum(queue.exec_s) == float(expected["exec_s"].sum())

    remain, arrival = expected["remain"], expected["arrival_s"]
    assert _by_deadline(queue) == np.lexsort((arrival, remain)).tolist()
    urgent = data.draw(st.lists(st.booleans(), min_size=queue.size, max_size=queue.size))
    secondary = np.where(urgent, -expected["density"], remain)
    expected_order = np.lexsort((arrival, secondary, ~np.array(urgent, dtype=bool))).tolist()
    assert _sorted(queue, urgent) == expected_order

    # the conservative φ (eq. 9): each request's work up to its place in deadline order
    conservative = SlideBatching(SlideBatchingConfig(phi="conservative", gamma=data.draw(st.floats(0.0, 5.0))))
    conservative.estimator._beta = beta
    budget_s = data.draw(st.floats(0.0, 1.0) | st.just(math.inf))
    t_c = conservative.estimator.t_c
    scale = 1.0 if math.isinf(budget_s) else budget_s / (budget_s - t_c) if budget_s > t_c else math.inf
    by_deadline = np.lexsort((arrival, remain))
    phi = np.empty(queue.size)
    phi[by_deadline] = scale * np.cumsum(expected["exec_s"][by_deadline])
    with np.errstate(invalid="ignore"):
        expected_urgent = (remain < conservative.config.gamma * phi).tolist()
    assert conservative._urgent(queue, budget_s) == expected_urgent
