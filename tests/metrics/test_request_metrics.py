from __future__ import annotations

import numpy as np
import pytest

from semsched.core.request import Request, RequestState, TokenTimeline
from semsched.metrics.request_metrics import request_metrics
from tests.metrics.factories import RequestFactory


def test_latencies_from_token_times(make_request: RequestFactory) -> None:
    req = make_request(
        [2.0, 2.5, 3.5, 4.0],
        arrival_time_s=1.0,
        first_scheduled_time_s=1.5,
        finish_time_s=4.0,
        prompt_tokens=7,
    )
    m = request_metrics(req)
    assert m.queueing_delay_s == pytest.approx(1.5 - 1.0)
    assert m.ttft_s == pytest.approx(2.0 - 1.0)
    assert m.tpot_s == pytest.approx((4.0 - 2.0) / 3)
    np.testing.assert_allclose(m.itl_s, [0.5, 1.0, 0.5])
    assert m.e2e_s == pytest.approx(4.0 - 1.0)
    assert m.normalized_latency_s_per_token == pytest.approx(3.0 / 4)
    assert (m.output_tokens, m.prompt_tokens) == (4, 7)


def test_slo_is_met_only_strictly_below_target(make_request: RequestFactory) -> None:
    on_the_line = request_metrics(make_request([1.0, 1.5], ttft_slo_s=1.0, tpot_slo_s=1.0))
    assert not on_the_line.ttft_slo_met
    assert on_the_line.tpot_slo_met
    assert not on_the_line.slo_met
    inside = request_metrics(make_request([0.9, 1.4], ttft_slo_s=1.0, tpot_slo_s=0.51))
    assert inside.ttft_slo_met and inside.tpot_slo_met and inside.slo_met


def test_slow_decode_misses_tpot(make_request: RequestFactory) -> None:
    m = request_metrics(make_request([0.1, 0.3, 0.5], ttft_slo_s=1.0, tpot_slo_s=0.2))
    assert m.ttft_slo_met
    assert not m.tpot_slo_met  # tpot == 0.2, not strictly below
    assert not m.slo_met


def test_missing_slos_count_as_met(make_request: RequestFactory) -> None:
    m = request_metrics(make_request([5.0, 100.0]))
    assert m.ttft_slo_met and m.tpot_slo_met and m.slo_met and m.e2e_slo_met


def test_single_token_has_no_tpot_and_meets_tpot_slo(make_request: RequestFactory) -> None:
    m = request_metrics(make_request([0.5], ttft_slo_s=1.0, tpot_slo_s=0.01))
    assert m.tpot_s is None
    assert m.itl_s.size == 0
    assert m.slo_met


def test_e2e_slo(make_request: RequestFactory) -> None:
    assert request_metrics(make_request([1.0, 2.0], e2e_slo_s=2.5)).e2e_slo_met
    assert not request_metrics(make_request([1.0, 2.0], e2e_slo_s=2.0)).e2e_slo_met


@pytest.mark.parametrize("state", [RequestState.REJECTED, RequestState.DROPPED, RequestState.WAITING])
def test_unfinished_requests_miss_every_slo(make_request: RequestFactory, state: RequestState) -> None:
    m = request_metrics(make_request([], state=state))
    assert (m.ttft_s, m.tpot_s, m.e2e_s, m.queueing_delay_s) == (None, None, None, None)
    assert m.normalized_latency_s_per_token is None
    assert not (m.ttft_slo_met or m.tpot_slo_met or m.slo_met or m.e2e_slo_met)
    assert m.state is state


def test_dropped_request_keeps_observed_latencies(make_request: RequestFactory) -> None:
    m = request_metrics(
        make_request([1.0, 2.0], state=RequestState.DROPPED, first_scheduled_time_s=0.5, finish_time_s=2.5)
    )
    assert m.ttft_s == pytest.approx(1.0)
    assert m.queueing_delay_s == pytest.approx(0.5)
    assert m.output_tokens == 2
    assert not m.slo_met


def test_tokens_from_non_contiguous_steps_of_a_shared_timeline() -> None:
    timeline = TokenTimeline()
    timeline.extend([1.0, 1.1, 1.2, 1.3, 1.4, 1.5])
    req = Request("a", prompt_tokens=4, max_output_tokens=8, arrival_time_s=0.5, output_tokens=4)
    req.record_tokens(timeline, 1, 2)  # steps 1, 2
    req.record_tokens(timeline, 4, 2)  # steps 4, 5 (preempted in between)
    req.state, req.first_scheduled_time_s, req.finish_time_s = RequestState.FINISHED, 0.9, 1.5
    m = request_metrics(req)
    assert m.ttft_s == pytest.approx(1.1 - 0.5)
    np.testing.assert_allclose(m.itl_s, [0.1, 0.2, 0.1])
    assert m.tpot_s == pytest.approx((1.5 - 1.1) / 3)
