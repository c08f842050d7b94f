from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from semsched.core.request import Request, RequestState
from semsched.metrics.tdg import TDGWeights, request_ideal_gains, request_tdg_gains, tdg_totals
from tests.metrics.factories import RequestFactory, build_request

WEIGHTS = TDGWeights(first_token=3.0, decode_token=1.0, per_priority={0: 2.0}, default_priority_weight=1.0)


def test_tokens_straddling_deadlines(make_request: RequestFactory) -> None:
    # deadlines (absolute): 10 + 1 + (i-1) * 0.5 -> 11.0, 11.5, 12.0, 12.5
    times_s = [10.9, 11.6, 11.95, 12.5]
    req = make_request(times_s, arrival_time_s=10.0, ttft_slo_s=1.0, tpot_slo_s=0.5)
    # on time: token 1 (first, weight 3) and token 3 (decode, weight 1); token 2 late; token 4 at its deadline
    expected_gain = 2.0 * (3.0 + 1.0)
    expected_ideal = 2.0 * (3.0 + 3 * 1.0)
    totals = tdg_totals([req], WEIGHTS)
    assert totals.gain == pytest.approx(expected_gain)
    assert totals.ideal_gain == pytest.approx(expected_ideal)
    assert totals.ratio == pytest.approx(8.0 / 12.0)
    assert totals.miss_ratio == pytest.approx(4.0 / 12.0)


def test_late_first_token_keeps_decode_gain(make_request: RequestFactory) -> None:
    # deadlines 1.0, 2.0, 3.0: first token late, the decode tokens catch up with their fixed deadlines
    req = make_request([1.5, 1.9, 2.9], ttft_slo_s=1.0, tpot_slo_s=1.0, priority=5)
    assert request_tdg_gains([req], WEIGHTS)[0] == pytest.approx(1.0 * (1.0 + 1.0))


def test_rejected_request_adds_ideal_gain_only(make_request: RequestFactory) -> None:
    served = make_request([0.5, 0.6], ttft_slo_s=1.0, tpot_slo_s=1.0, priority=1)
    rejected = make_request([], state=RequestState.REJECTED, output_tokens=5, priority=0)
    gains = request_tdg_gains([served, rejected], WEIGHTS)
    ideal = request_ideal_gains([served, rejected], WEIGHTS)
    np.testing.assert_allclose(gains, [1.0 * (3.0 + 1.0), 0.0])
    np.testing.assert_allclose(ideal, [1.0 * (3.0 + 1.0), 2.0 * (3.0 + 4 * 1.0)])


def test_missing_slos_make_every_token_on_time(make_request: RequestFactory) -> None:
    only_ttft = make_request([0.5, 50.0, 99.0], ttft_slo_s=1.0, priority=1)
    no_slo = make_request([7.0, 8.0], priority=1)
    np.testing.assert_allclose(request_tdg_gains([only_ttft, no_slo], WEIGHTS), [3.0 + 2.0, 3.0 + 1.0])


def test_dropped_request_keeps_gain_of_emitted_tokens(make_request: RequestFactory) -> None:
    req = make_request(
        [0.5, 1.0], state=RequestState.DROPPED, output_tokens=10, ttft_slo_s=1.0, tpot_slo_s=1.0, priority=1
    )
    totals = tdg_totals([req], WEIGHTS)
    assert totals.gain == pytest.approx(3.0 + 1.0)
    assert totals.ideal_gain == pytest.approx(3.0 + 9 * 1.0)


def test_empty_input() -> None:
    totals = tdg_totals([], WEIGHTS)
    assert (totals.gain, totals.ideal_gain, totals.ratio) == (0.0, 0.0, None)


def test_paper_defaults(make_request: RequestFactory) -> None:
    requests = [
        make_request([1.0] * 2, prompt_tokens=30, priority=2),
        make_request([1.0] * 6, prompt_tokens=10, priority=1),
    ]
    weights = TDGWeights.paper_defaults(requests)
    # w_p / w_d = mean input / mean output = 20 / 4
    assert weights.first_token == pytest.approx(20.0 / 4.0)
    assert weights.decode_token == 1.0
    assert weights.priority_weight(1) == 2.0
    assert weights.priority_weight(2) == 1.0


def test_negative_weight_rejected() -> None:
    with pytest.raises(ValueError, match="TDGWeights"):
        TDGWeights(first_token=-1.0, decode_token=1.0)


def _reference_gain(req: Request, weights: TDGWeights) -> float:
    """Eq. 3 written as a plain loop."""
    ttft_slo_s = req.ttft_slo_s if req.ttft_slo_s is not None else float("inf")
    tpot_slo_s = req.tpot_slo_s if req.tpot_slo_s is not None else float("inf")
    gain = 0.0
    for i, t in enumerate(req.token_times_s(), start=1):
        deadline_s = req.arrival_time_s + ttft_slo_s + ((i - 1) * tpot_slo_s if i > 1 else 0.0)
        position_weight = weights.first_token if i == 1 else weights.decode_token
        gain += position_weight * weights.priority_weight(req.priority) * (t < deadline_s)
    return gain


_request_specs = st.lists(
    st.tuples(
        st.floats(0.0, 5.0),  # arrival
        st.lists(st.floats(0.0, 0.5), min_size=0, max_size=12),  # gaps before each token
        st.one_of(st.none(), st.floats(0.05, 2.0)),  # ttft slo
        st.one_of(st.none(), st.floats(0.01, 0.5)),  # tpot slo
        st.integers(0, 2),  # priority
        st.integers(1, 15),  # target output tokens
    ),
    max_size=8,
)


def _build(specs: Sequence[tuple[float, list[float], float | None, float | None, int, int]]) -> list[Request]:
    requests = []
    for k, (arrival_s, gaps_s, ttft_slo_s, tpot_slo_s, priority, target) in enumerate(specs):
        times_s = list(arrival_s + np.cumsum(gaps_s)) if gaps_s else []
        state = RequestState.FINISHED if times_s else RequestState.REJECTED
        requests.append(
            build_request(
                times_s,
                request_id=f"r{k}",
                arrival_time_s=arrival_s,
                state=state,
                ttft_slo_s=ttft_slo_s,
                tpot_slo_s=tpot_slo_s,
                priority=priority,
                output_tokens=max(target, len(times_s)),
            )
        )
    return requests


@settings(max_examples=60, deadline=None)
@given(_request_specs)
def test_vectorised_gain_matches_loop_and_ratio_is_bounded(
    specs: list[tuple[float, list[float], float | None, float | None, int, int]],
) -> None:
    requests = _build(specs)
    gains = request_tdg_gains(requests, WEIGHTS)
    np.testing.assert_allclose(gains, [_reference_gain(r, WEIGHTS) for r in requests])
    ratio = tdg_totals(requests, WEIGHTS).ratio
    assert ratio is None or 0.0 <= ratio <= 1.0


def test_chunked_evaluation_matches_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("semsched.metrics.tdg._CHUNK_TOKENS", 3)
    gaps = [[0.1, 0.4, 0.2], [], [0.3], [0.05] * 7, [0.2, 0.2]]
    specs = [(float(k), g, 0.5, 0.15, k % 2, 8) for k, g in enumerate(gaps)]
    requests = _build(specs)
    np.testing.assert_allclose(
        request_tdg_gains(requests, WEIGHTS), [_reference_gain(r, WEIGHTS) for r in requests]
    )


@settings(max_examples=60, deadline=None)
@given(
    gaps=st.lists(st.floats(0.0, 0.3), min_size=2, max_size=12),
    late=st.integers(0, 11),
    delay=st.floats(0.0, 0.5),
)
def test_postponing_a_late_token_never_gains(make_request: RequestFactory, gaps: list[float], late: int,
                                             delay: float) -> None:
    """Eq. 3's fixed deadlines against the postponed-decoding trick (seed 001 §2): holding back a token that
    already misses its deadline (so that the next interval looks shorter) never raises the gain, and delivering any
    token earlier never lowers it."""
    times = list(np.cumsum([0.2, *gaps]))
    late = min(late, len(times) - 1)
    slos = {"ttft_slo_s": 0.3, "tpot_slo_s": 0.1}
    base = request_tdg_gains([make_request(times, **slos)], WEIGHTS)[0]
    postponed = times[:late] + [t + delay for t in times[late:]]  # the token and those after it, later
    assert request_tdg_gains([make_request(postponed, **slos)], WEIGHTS)[0] <= base + 1e-12
    earlier = times[:late] + [times[late] - min(delay, times[late] - (times[late - 1] if late else 0.0))] \
        + times[late + 1:]
    assert request_tdg_gains([make_request(earlier, **slos)], WEIGHTS)[0] >= base - 1e-12
