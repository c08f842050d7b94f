from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from semsched.core.request import Request, RequestState
from semsched.metrics.summary import (
    Distribution,
    default_duration_s,
    metric_column,
    metric_columns,
    metric_names,
    summarize,
)
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


def test_meeting_ttft_and_tpot_but_missing_e2e_counts_against_the_class(make_request: RequestFactory) -> None:
    slos = {"ttft_slo_s": 1.0, "tpot_slo_s": 0.5, "e2e_slo_s": 2.0}
    requests = [
        make_request([0.5, 0.9, 1.3], request_id="fast", **slos),  # e2e 1.3 < 2
        make_request([0.5, 0.9, 1.3, 1.7, 2.1], request_id="long", **slos),  # ttft, tpot fine; e2e 2.1
    ]
    c = summarize(requests, tdg_weights=UNIT_WEIGHTS).overall
    assert c.ttft_tpot_attainment == pytest.approx(1.0)
    assert c.e2e_slo_attainment == pytest.approx(1 / 2)
    assert c.slo_attainment == pytest.approx(1 / 2)
    assert c.goodput_requests_per_s == pytest.approx(1 / 2.1)


def test_class_without_any_target_has_no_attainment(make_request: RequestFactory) -> None:
    requests = [
        make_request([0.5, 0.6], request_id="a", priority=0, tier="SYSTEM"),
        make_request([], request_id="b", state=RequestState.REJECTED, priority=0, tier="SYSTEM"),
    ]
    c = summarize(requests).by_priority[0]
    assert c.num_with_slo == 0
    for name in ("slo_attainment", "ttft_tpot_attainment", "ttft_slo_attainment", "e2e_slo_attainment"):
        assert c.metric(name) is None, name
    assert c.goodput_requests_per_s is None
    assert c.tdg_ratio is None  # no TTFT/TPOT deadline: every token would be on time by construction
    assert c.throughput_requests_per_s == pytest.approx(1 / 0.6)


def test_e2e_only_class_has_attainment_but_no_ttft_tpot_figure(make_request: RequestFactory) -> None:
    requests = [
        make_request([30.0, 40.0], request_id="met", e2e_slo_s=60.0),
        make_request([161.0, 170.0], request_id="late", e2e_slo_s=60.0),
        make_request([], request_id="shed", state=RequestState.DROPPED, e2e_slo_s=60.0),
    ]
    c = summarize(requests).overall
    assert c.slo_attainment == pytest.approx(1 / 3)
    assert c.e2e_slo_attainment == pytest.approx(1 / 3)
    assert (c.ttft_tpot_attainment, c.ttft_slo_attainment, c.tpot_slo_attainment) == (None, None, None)
    assert c.tdg_ratio is None


def test_rejected_requests_with_a_target_are_misses_without_one_are_not_counted(
    make_request: RequestFactory,
) -> None:
    requests = [
        make_request([0.1], request_id="ok", ttft_slo_s=0.5),
        make_request([], request_id="rejected", state=RequestState.REJECTED, ttft_slo_s=0.5),
        make_request([], request_id="rejected-no-target", state=RequestState.REJECTED),
    ]
    c = summarize(requests).overall
    assert (c.num_requests, c.num_rejected, c.num_with_slo) == (3, 2, 2)
    assert c.slo_attainment == pytest.approx(1 / 2)
    assert c.ttft_tpot_attainment == pytest.approx(1 / 2)


def test_mixed_classes(make_request: RequestFactory) -> None:
    premium = {"priority": 1, "tier": "PREMIUM", "ttft_slo_s": 0.2, "tpot_slo_s": 0.03, "e2e_slo_s": 5.0}
    requests = [
        # SYSTEM: no target at all
        make_request([0.1, 0.11], request_id="s1", priority=0, tier="SYSTEM"),
        make_request([9.0, 9.5], request_id="s2", priority=0, tier="SYSTEM"),
        # PREMIUM: one meets everything, one misses TTFT, one rejected
        make_request([0.1, 0.12, 0.14], request_id="p1", **premium),
        make_request([0.3, 0.32], request_id="p2", **premium),
        make_request([], request_id="p3", state=RequestState.REJECTED, **premium),
        # BACKGROUND: E2E target only; one meets it, one misses it
        make_request([20.0, 21.0], request_id="b1", priority=3, tier="BACKGROUND", e2e_slo_s=60.0),
        make_request([70.0, 71.0], request_id="b2", priority=3, tier="BACKGROUND", e2e_slo_s=60.0),
    ]
    s = summarize(requests)
    assert s.by_priority[0].slo_attainment is None
    assert s.by_priority[1].slo_attainment == pytest.approx(1 / 3)
    assert s.by_priority[1].ttft_tpot_attainment == pytest.approx(1 / 3)
    assert s.by_priority[3].slo_attainment == pytest.approx(1 / 2)
    assert s.by_priority[3].ttft_tpot_attainment is None
    # overall: over the five requests with a target (p1, b1 met), SYSTEM left out of both counts
    assert s.overall.num_with_slo == 5
    assert s.overall.slo_attainment == pytest.approx(2 / 5)
    assert s.overall.ttft_tpot_attainment == pytest.approx(1 / 3)
    assert s.overall.goodput_requests_per_s == pytest.approx(2 / 71.0)


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
        assert s.overall.metric(metric_column(name)) == s.overall.metric(name)
    assert metric_column("ttft_p90") == "ttft_p90_s"
    assert metric_column("normalized_latency_mean") == "normalized_latency_mean_s_per_token"
    assert metric_column("goodput") == "goodput_requests_per_s"
    assert metric_column("slo_attainment") == "slo_attainment"
    assert metric_columns() == [metric_column(name) for name in metric_names()]
    with pytest.raises(KeyError):
        s.overall.metric("ttft_p42")


def test_to_dict_is_strict_json_with_nulls(make_request: RequestFactory) -> None:
    requests = [
        make_request([], request_id="a", state=RequestState.REJECTED, priority=3, e2e_slo_s=60.0),
        make_request([], request_id="b", state=RequestState.REJECTED, priority=4),
    ]
    s = summarize(requests)
    text = json.dumps(s.to_dict(), allow_nan=False)
    data = json.loads(text)
    assert data["duration_s"] is None
    assert data["overall"]["ttft_s"]["mean"] is None
    assert data["overall"]["slo_attainment"] == 0.0
    assert data["by_priority"]["3"]["num_rejected"] == 1
    assert data["by_priority"]["3"]["slo_attainment"] == 0.0
    assert data["by_priority"]["4"]["slo_attainment"] is None  # no target: no attainment, not 100 %
    assert data["by_priority"]["4"]["ttft_tpot_attainment"] is None


def test_rejections_are_counted_by_kind_of_reason_per_class(make_request: RequestFactory) -> None:
    def ended(request_id: str, state: RequestState, reason: str, priority: int) -> Request:
        return make_request([], request_id=request_id, state=state, finish_reason=reason, priority=priority)

    requests = [
        ended("a", RequestState.REJECTED, "shed: PREMIUM at risk", 3),
        ended("b", RequestState.REJECTED, "shed: PREMIUM at risk again", 3),
        ended("c", RequestState.REJECTED, "queue full: 2 waiting", 2),
        ended("d", RequestState.DROPPED, "never schedulable", 2),
        make_request([1.0], request_id="e", priority=2),
    ]
    s = summarize(requests)
    assert s.overall.rejections_by_reason == {"shed": 2, "queue full": 1, "never schedulable": 1}
    assert s.by_priority[2].rejections_by_reason == {"queue full": 1, "never schedulable": 1}
    assert json.loads(json.dumps(s.to_dict()))["by_priority"]["3"]["rejections_by_reason"] == {"shed": 2}
    assert summarize([make_request([1.0])]).overall.to_dict()["rejections_by_reason"] == {}


def test_json_names_carry_units(make_request: RequestFactory) -> None:
    data = summarize(_two_class_run(make_request)).to_dict()["overall"]
    assert {"throughput_requests_per_s", "goodput_requests_per_s", "output_tokens_per_s"} <= set(data)
    distributions = {"ttft_s", "tpot_s", "e2e_s", "normalized_latency_s_per_token", "queueing_delay_s", "itl_s"}
    assert distributions <= set(data)
    assert not {"throughput", "goodput", "preemptions"} & set(data)


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
        st.one_of(st.none(), st.floats(0.05, 10.0)),
    ),
    max_size=10,
)


@settings(max_examples=60, deadline=None)
@given(_specs)
def test_fractions_are_bounded(
    specs: list[tuple[float, list[float], RequestState, int, float | None, float | None, float | None]],
) -> None:
    requests = []
    for k, (arrival_s, gaps_s, state, priority, ttft_slo_s, tpot_slo_s, e2e_slo_s) in enumerate(specs):
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
                e2e_slo_s=e2e_slo_s,
                output_tokens=len(gaps_s),
            )
        )
    s = summarize(requests)
    for c in s.classes():
        members = [r for r in requests if c.priority is None or r.priority == c.priority]
        has_target = [r.ttft_slo_s or r.tpot_slo_s or r.e2e_slo_s for r in members]
        assert (c.slo_attainment is None) == (not any(has_target))
        assert (c.goodput_requests_per_s is None) == (not any(has_target) or s.duration_s is None)
        fractions = (c.slo_attainment, c.ttft_tpot_attainment, c.ttft_slo_attainment, c.e2e_slo_attainment)
        for value in (*fractions, c.tpot_slo_attainment, c.tdg_ratio):
            assert value is None or 0.0 <= value <= 1.0
        if c.goodput_requests_per_s is not None and c.slo_attainment is not None and s.duration_s is not None:
            # goodput counts exactly the requests that attainment counts as meeting their SLO
            met = c.slo_attainment * c.num_with_slo
            assert c.goodput_requests_per_s * s.duration_s == pytest.approx(met)
    json.dumps(s.to_dict(), allow_nan=False)
