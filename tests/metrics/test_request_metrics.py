from __future__ import annotations

import numpy as np
import pytest

from semsched.core.request import LengthDistribution, Request, RequestState, TokenTimeline
from semsched.metrics.request_metrics import REQUEST_ATTRIBUTES, all_met, rejection_kind, request_metrics
from tests.metrics.factories import RequestFactory
from tests.support import make_scheduler


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


def test_no_target_means_no_outcome_not_a_success(make_request: RequestFactory) -> None:
    m = request_metrics(make_request([5.0, 100.0]))
    assert (m.ttft_slo_met, m.tpot_slo_met, m.e2e_slo_met) == (None, None, None)
    assert (m.ttft_tpot_slo_met, m.slo_met) == (None, None)


def test_meeting_ttft_and_tpot_but_missing_e2e_misses_the_slo(make_request: RequestFactory) -> None:
    # first token at 0.1 s (< 0.2), gaps 0.02 s (< 0.03), last token at 4.1 s, not below the 4 s E2E target
    times_s = [0.1 + 0.02 * i for i in range(201)]
    m = request_metrics(make_request(times_s, ttft_slo_s=0.2, tpot_slo_s=0.03, e2e_slo_s=4.0))
    assert m.ttft_slo_met and m.tpot_slo_met and m.ttft_tpot_slo_met
    assert m.e2e_slo_met is False
    assert m.slo_met is False


def test_only_the_targets_a_request_has_are_judged(make_request: RequestFactory) -> None:
    # a BACKGROUND-like request: an E2E target only, first token late by any TTFT standard
    met = request_metrics(make_request([30.0, 40.0], e2e_slo_s=60.0))
    assert (met.ttft_slo_met, met.tpot_slo_met, met.ttft_tpot_slo_met) == (None, None, None)
    assert met.e2e_slo_met is True and met.slo_met is True
    missed = request_metrics(make_request([161.0, 170.0], e2e_slo_s=60.0))
    assert missed.slo_met is False


def test_single_token_has_no_tpot_and_meets_tpot_slo(make_request: RequestFactory) -> None:
    m = request_metrics(make_request([0.5], ttft_slo_s=1.0, tpot_slo_s=0.01))
    assert m.tpot_s is None
    assert m.itl_s.size == 0
    assert m.slo_met


def test_e2e_slo(make_request: RequestFactory) -> None:
    assert request_metrics(make_request([1.0, 2.0], e2e_slo_s=2.5)).e2e_slo_met
    assert not request_metrics(make_request([1.0, 2.0], e2e_slo_s=2.0)).e2e_slo_met


_ENDED_EARLY = [RequestState.REJECTED, RequestState.DROPPED, RequestState.WAITING]


@pytest.mark.parametrize("state", _ENDED_EARLY)
def test_unfinished_requests_miss_every_target_they_have(
    make_request: RequestFactory, state: RequestState
) -> None:
    m = request_metrics(make_request([], state=state, ttft_slo_s=1.0, tpot_slo_s=0.1, e2e_slo_s=9.0))
    assert (m.ttft_s, m.tpot_s, m.e2e_s, m.queueing_delay_s) == (None, None, None, None)
    assert m.normalized_latency_s_per_token is None
    outcomes = (m.ttft_slo_met, m.tpot_slo_met, m.e2e_slo_met, m.ttft_tpot_slo_met, m.slo_met)
    assert outcomes == (False, False, False, False, False)
    assert m.state is state


@pytest.mark.parametrize("state", _ENDED_EARLY)
def test_unfinished_requests_without_targets_have_no_outcome(
    make_request: RequestFactory, state: RequestState
) -> None:
    m = request_metrics(make_request([], state=state))
    assert (m.ttft_slo_met, m.tpot_slo_met, m.e2e_slo_met, m.ttft_tpot_slo_met, m.slo_met) == (None,) * 5


def test_rejection_reason_only_for_rejected_and_dropped(make_request: RequestFactory) -> None:
    reason = "prompt_tokens + max_output_tokens = 9000 exceeds the KV capacity"
    rejected = make_request([], state=RequestState.REJECTED, finish_reason=reason)
    dropped = make_request([], state=RequestState.DROPPED, finish_reason="never schedulable")
    finished = make_request([1.0], finish_reason="length")
    assert request_metrics(rejected).rejection_reason == reason
    assert request_metrics(dropped).rejection_reason == "never schedulable"
    assert request_metrics(finished).rejection_reason is None


@pytest.mark.parametrize(
    ("reason", "kind"),
    [
        ("shed: PREMIUM TTFT p99 at risk; BACKGROUND shed", "shed"),
        ("queue full: 3 BACKGROUND requests waiting, its limit 3", "queue full"),
        ("hopeless: E2E at least 7 s", "hopeless"),
        ("dropped: KV cache full; tiered ends it rather than preempt it again", "dropped"),
        ("never schedulable", "never schedulable"),
        ("a: b: c", "a"),
    ],
)
def test_rejection_kind_is_the_text_before_the_first_colon(reason: str, kind: str) -> None:
    assert rejection_kind(reason) == kind


def test_the_cores_too_large_rejection_has_a_kind_of_its_own() -> None:
    scheduler = make_scheduler("fcfs", num_gpu_blocks=4, block_size=16)
    request = Request("big", prompt_tokens=100, max_output_tokens=10, arrival_time_s=0.0)
    assert not scheduler.add_request(request, 0.0).accepted
    assert request.finish_reason is not None and ":" not in request.finish_reason
    assert rejection_kind(request.finish_reason) == "too large for the KV cache"


def test_attributes_of_the_request(make_request: RequestFactory) -> None:
    prediction = LengthDistribution((10, 30), (0.5, 0.5))
    req = make_request(
        [1.0],
        output_tokens=50,
        max_output_tokens=40,
        urgency=2,
        urgency_true=1,
        predicted_output=prediction,
        ttft_slo_s=0.5,
        e2e_slo_s=15.0,
    )
    req.client = "tenant-a"
    assert request_metrics(req).attributes == {
        "max_output_tokens": 40,
        "target_output_tokens": 40,  # the true length 50, capped by max_output_tokens
        "urgency": 2,
        "urgency_true": 1,
        "predicted_length": 20.0,
        "ttft_slo_s": 0.5,
        "tpot_slo_s": None,
        "e2e_slo_s": 15.0,
        "client": "tenant-a",
        "logged_tokens_per_round": None,
        "cached_tokens": 0,
    }
    assert list(request_metrics(req).attributes) == list(REQUEST_ATTRIBUTES)
    req.accept_lengths = (3, 1, 5)
    assert request_metrics(req).attributes["logged_tokens_per_round"] == 3.0


def test_attributes_absent_from_the_request_are_none(make_request: RequestFactory) -> None:
    attributes = request_metrics(make_request([1.0])).attributes
    assert attributes["urgency"] is None and attributes["predicted_length"] is None
    assert attributes["urgency_true"] is None


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


def test_all_met() -> None:
    assert all_met(None, None) is None
    assert all_met(True, None) is True
    assert all_met(True, False, None) is False
