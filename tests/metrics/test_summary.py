from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from semsched.core.request import Request, RequestState
from semsched.metrics.summary import Distribution, default_duration_s, metric_names, summarize
from semsched.metrics.tdg import TDGWeights
from tests.metrics.factories import RequestFactory, build_request

UNIT_WEIGHTS = TDGWeights(first_token=1.0, decode_token=1.0)


def test_distribution_percentiles_interpolate_linearly() -> None:
    d = Distribution.of(np.arange(1.0, 11.0))  # 1..10
    assert d.count == 10
    assert d.mean == pytest.approx(5.5)
    assert d.median == pytest.approx(5.5)
    assert d.p90 == pytest.approx(9.0 + 0.1 * (10.0 - 9.0))  # rank 0.9 * 9 = 8.1
    assert d.p99 == pytest.approx(9.0 + 0.91 * (10.0 - 9.0))  # rank 0.99 * 9 = 8.91


def test_empty_distribution_is_all_none() -> None:
    d = Distribution.of(np.empty(0))
    assert (d.count, d.mean, d.median, d.p90, d.p99) == (0, None, None, None, None)


def _two_class_run(make_request: RequestFactory) -> list[Request]:
    slos = {"ttft_slo_s": 1.0, "tpot_slo_s": 0.5}
    return [
        # priority 0: one meets both SLOs, one has a late first token
        make_request([0.5, 0.7, 0.9], request_id="a", priority=0, tier="premium", **slos),
        make_request([3.0, 3.2], request_id="b", arrival_time_s=1.0, priority=0, tier="premium", **slos),
        # priority 1: one meets, one rejected, one dropped
        make_request([2.5, 2.6], request_id="c", arrival_time_s=2.0, priority=1, tier="standard", **slos),
        make_request([], request_id="d", state=RequestState.REJECTED, priority=1, tier="standard", **slos),
        make_request(
            [2.1],
            request_id="e",
            arrival_time_s=2.0,
            state=RequestState.DROPPED,
            finish_time_s=2.2,
            output_tokens=4,
            priority=1,
            tier="background",
            num_preemptions=2,
            **slos,
        ),
    ]


def test_counts_and_slo_attainment_include_rejected(make_request: RequestFactory) -> None:
    s = summarize(_two_class_run(make_request), tdg_weights=UNIT_WEIGHTS)
    assert (s.overall.num_requests, s.overall.num_finished) == (5, 3)
    assert (s.overall.num_rejected, s.overall.num_dropped, s.overall.num_unfinished) == (1, 1, 0)
    assert s.overall.slo_attainment == pytest.approx(2 / 5)
    assert s.by_priority[0].slo_attainment == pytest.approx(1 / 2)
    assert s.by_priority[1].slo_attainment == pytest.approx(1 / 3)
    assert s.by_priority[1].ttft_slo_attainment == pytest.approx(1 / 3)
    assert s.by_priority[1].tiers == ("background", "standard")
    assert s.overall.num_preemptions == 2


def test_latencies_over_finished_requests_only(make_request: RequestFactory) -> None:
    s = summarize(_two_class_run(make_request), tdg_weights=UNIT_WEIGHTS)
    # finished: a (ttft 0.5, e2e 0.9), b (ttft 2.0, e2e 2.2), c (ttft 0.5, e2e 0.6)
    assert s.overall.ttft_s.count == 3
    assert s.overall.ttft_s.mean == pytest.approx((0.5 + 2.0 + 0.5) / 3)
    assert s.overall.e2e_s.median == pytest.approx(0.9)
    assert s.by_priority[0].tpot_s.mean == pytest.approx((0.2 + 0.2) / 2)
    # ITL pools every gap of the class: a -> 0.2, 0.2; b -> 0.2
    assert s.by_priority[0].itl_s.count == 3
    assert s.by_priority[0].itl_s.mean == pytest.approx(0.2)
    assert s.by_priority[0].normalized_latency_s_per_token.mean == pytest.approx((0.9 / 3 + 2.2 / 2) / 2)
    assert s.by_priority[1].queueing_delay_s.count == 1


def test_rates_over_default_duration(make_request: RequestFactory) -> None:
    s = summarize(_two_class_run(make_request), tdg_weights=UNIT_WEIGHTS)
    duration_s = 3.2 - 0.0  # first arrival 0.0, last finish 3.2 (request b)
    assert s.duration_s == pytest.approx(duration_s)
    assert s.overall.throughput_requests_per_s == pytest.approx(3 / duration_s)
    assert s.overall.output_tokens_per_s == pytest.approx((3 + 2 + 2 + 0 + 1) / duration_s)
    assert s.overall.goodput_requests_per_s == pytest.approx(2 / duration_s)
    assert s.by_priority[1].goodput_requests_per_s == pytest.approx(1 / duration_s)


def test_explicit_duration(make_request: RequestFactory) -> None:
    s = summarize(_two_class_run(make_request), duration_s=10.0, tdg_weights=UNIT_WEIGHTS)
    assert s.overall.throughput_requests_per_s == pytest.approx(0.3)


def test_tdg_per_class(make_request: RequestFactory) -> None:
    s = summarize(_two_class_run(make_request), tdg_weights=UNIT_WEIGHTS)
    # deadlines arrival + 1 + (i-1)*0.5.  a: 1.0,1.5,2.0 -> 3 on time; b: 2.0,2.5 -> both late
    assert s.by_priority[0].tdg == pytest.approx(3.0)
    assert s.by_priority[0].tdg_ideal == pytest.approx(5.0)
    # c: 3.0,3.5 -> both on time; d: rejected, 1 would-be token; e: 1 of 4 on time
    assert s.by_priority[1].tdg == pytest.approx(3.0)
    assert s.by_priority[1].tdg_ideal == pytest.approx(2.0 + 1.0 + 4.0)
    assert s.overall.tdg_ratio == pytest.approx(6.0 / 12.0)


def test_default_weights_come_from_the_paper(make_request: RequestFactory) -> None:
    requests = _two_class_run(make_request)
    assert summarize(requests).tdg_weights == TDGWeights.paper_defaults(requests)


def test_metric_lookup(make_request: RequestFactory) -> None:
    s = summarize(_two_class_run(make_request), tdg_weights=UNIT_WEIGHTS)
    assert s.overall.metric("ttft_mean") == s.overall.ttft_s.mean
    assert s.overall.metric("normalized_latency_p90") == s.overall.normalized_latency_s_per_token.p90
    assert s.overall.metric("goodput") == s.overall.goodput_requests_per_s
    for name in metric_names():
        s.overall.metric(name)
    with pytest.raises(KeyError):
        s.overall.metric("ttft_p42")


def test_to_dict_is_strict_json_with_nulls(make_request: RequestFactory) -> None:
    requests = [make_request([], state=RequestState.REJECTED, priority=3)]
    s = summarize(requests)
    text = json.dumps(s.to_dict(), allow_nan=False)
    data = json.loads(text)
    assert data["duration_s"] is None
    assert data["overall"]["ttft_s"]["mean"] is None
    assert data["overall"]["slo_attainment"] == 0.0
    assert data["by_priority"]["3"]["num_rejected"] == 1


def test_empty_run() -> None:
    s = summarize([])
    assert s.overall.num_requests == 0
    assert s.overall.slo_attainment is None
    assert s.by_priority == {}
    json.dumps(s.to_dict(), allow_nan=False)


def test_default_duration_without_finishes(make_request: RequestFactory) -> None:
    assert default_duration_s([make_request([], state=RequestState.REJECTED)]) is None


_states = st.sampled_from([RequestState.FINISHED, RequestState.REJECTED, RequestState.DROPPED])
_specs = st.lists(
    st.tuples(
        st.floats(0.0, 10.0),
        st.lists(st.floats(0.001, 1.0), min_size=1, max_size=6),
        _states,
        st.integers(0, 3),
        st.one_of(st.none(), st.floats(0.05, 3.0)),
        st.one_of(st.none(), st.floats(0.01, 1.0)),
    ),
    max_size=10,
)


@settings(max_examples=60, deadline=None)
@given(_specs)
def test_fractions_are_bounded(
    specs: list[tuple[float, list[float], RequestState, int, float | None, float | None]],
) -> None:
    requests = []
    for k, (arrival_s, gaps_s, state, priority, ttft_slo_s, tpot_slo_s) in enumerate(specs):
        times_s = [] if state is RequestState.REJECTED else list(arrival_s + np.cumsum(gaps_s))
        requests.append(
            build_request(
                times_s,
                request_id=f"r{k}",
                arrival_time_s=arrival_s,
                state=state,
                priority=priority,
                ttft_slo_s=ttft_slo_s,
                tpot_slo_s=tpot_slo_s,
                output_tokens=len(gaps_s),
            )
        )
    s = summarize(requests)
    for c in s.classes():
        for value in (c.slo_attainment, c.ttft_slo_attainment, c.tpot_slo_attainment, c.tdg_ratio):
            assert value is None or 0.0 <= value <= 1.0
    json.dumps(s.to_dict(), allow_nan=False)
