"""The core's native sort by attained service (``sort_by_service_then_arrival``): the order ``list.sort`` gives;
its pick of a KV-pressure victim from the sorted list (``last_by_service_then_arrival``): ``max``'s; and the
native sorts of the policies' victim keys (``NativeVictimKey.sort``): ``list.sort``'s."""

from hypothesis import given
from hypothesis import strategies as st

from semsched.core.request import Request
from semsched.core.scheduler import (
    by_service_then_arrival,
    last_by_service_then_arrival,
    sort_by_service_then_arrival,
)
from semsched.policies.laps_sd import queue_bounds_s
from semsched.policies.passes import LAPS_PERCEPTIBLE, LAPS_RATE, LapsVictimKey, TieredVictimKey, served_victims

# few distinct values, so that ties in service, and in both fields, are common
_FIELDS = st.tuples(st.sampled_from([0.0, 0.5, 1.0, 1.5, 2.0]), st.sampled_from([0.0, 1.0, 2.0]))


def _requests(fields: list[tuple[float, float]]) -> list[Request]:
    requests = []
    for index, (service_s, arrival_s) in enumerate(fields):
        request = Request(request_id=f"r{index}", arrival_time_s=arrival_s, prompt_tokens=4, max_output_tokens=4)
        request.service_s = service_s
        requests.append(request)
    return requests


@given(st.lists(_FIELDS, max_size=60))
def test_the_order_is_list_sorts_with_ties_kept_in_place(fields: list[tuple[float, float]]) -> None:
    requests = _requests(fields)
    expected = sorted(requests, key=by_service_then_arrival)  # (stable: equal keys keep the list's order)
    sort_by_service_then_arrival(requests)
    assert [r.request_id for r in requests] == [r.request_id for r in expected]


@given(st.lists(_FIELDS, min_size=1, max_size=60))
def test_the_victim_from_a_sorted_list_is_maxs_the_first_of_equal_keys(fields: list[tuple[float, float]]) -> None:
    requests = sorted(_requests(fields), key=by_service_then_arrival)
    assert last_by_service_then_arrival(requests) is max(requests, key=by_service_then_arrival)


def test_a_list_far_from_sorted_is_handed_to_list_sort_with_the_same_result() -> None:
    """Reversed, 300 requests need ~45,000 moves, past the insertion sort's bound: list.sort finishes the job."""
    requests = _requests([(float(300 - i), float(i % 7)) for i in range(300)])
    expected = sorted(requests, key=by_service_then_arrival)
    sort_by_service_then_arrival(requests)
    assert requests == expected


@given(st.lists(_FIELDS, max_size=60), _FIELDS, st.sampled_from([0.0, 0.5, 1.0]))
def test_las_victims_are_the_served_requests_in_a_stable_descending_sort(
    fields: list[tuple[float, float]], candidate: tuple[float, float], quantum_s: float
) -> None:
    """``served_victims`` orders the served requests as ``sort(key, reverse=True)`` does: most served first,
    equal keys in the running order (its native sort reverses an ascending one and each run of ties back)."""
    mine = _requests([candidate])[0]
    shuffled = _requests(fields)
    # in the given order (mostly far from sorted: list.sort), and ascending as the core keeps its running list
    # (the native sort, ties included)
    for running in (shuffled, sorted(shuffled, key=by_service_then_arrival)):
        expected = [r for r in running
                    if r.service_s >= mine.service_s + quantum_s and r.service_s > mine.service_s]
        expected.sort(key=by_service_then_arrival, reverse=True)
        assert served_victims(mine, running, quantum_s) == expected


_TIERED_FIELDS = st.tuples(st.integers(0, 3), st.integers(0, 2), st.sampled_from([0, 5, 10]),
                           st.sampled_from([0.0, 1.0]))


@given(st.lists(_TIERED_FIELDS, max_size=60), st.integers(1, 3), st.booleans())
def test_tiereds_native_sort_is_list_sorts(fields: list[tuple[int, int, int, float]], limit: int,
                                           nearly_sorted: bool) -> None:
    """``TieredVictimKey.sort`` gives ``list.sort(key=TieredVictimKey)``'s order, ties in place: on lists in any
    order (far from sorted: handed to ``list.sort`` past its bound on moves) and on sorted lists where a few
    requests moved, as the running list is between two steps."""
    requests = []
    for index, (preemptions, priority, computed, arrival_s) in enumerate(fields):
        request = Request(request_id=f"r{index}", arrival_time_s=arrival_s, prompt_tokens=16, max_output_tokens=4,
                          priority=priority)
        request.num_preemptions, request.num_computed_tokens = preemptions, computed
        requests.append(request)
    key = TieredVictimKey(limit)
    if nearly_sorted:
        requests.sort(key=key)
        for request in requests[::7]:
            request.num_computed_tokens += 3  # (a prompt advanced by a chunk)
    expected = sorted(requests, key=key)
    key.sort(requests)
    assert [r.request_id for r in requests] == [r.request_id for r in expected]
    if requests:  # (and its pick of a KV-pressure victim from the sorted list is max's)
        assert key.last(requests) is max(requests, key=key)


_LAPS_FIELDS = st.tuples(st.sampled_from([0.0, 0.5, 1.5, 3.0, 9.0]), st.booleans(), st.sampled_from([0.2, 0.8]),
                         st.integers(0, 2), st.sampled_from([0.0, 1.0]))


@given(st.lists(_LAPS_FIELDS, max_size=60), st.booleans(), st.booleans())
def test_laps_sds_native_sort_is_list_sorts(fields: list[tuple[float, bool, float, int, float]], tiers: bool,
                                            nearly_sorted: bool) -> None:
    """``LapsVictimKey.sort`` gives ``list.sort(key=LapsVictimKey)``'s order, ties in place, with and without
    tiers: perceptible requests (their queue by perceived service) beside the others, in any order and nearly
    sorted."""
    requests = []
    for index, (service_s, perceptible, rate, priority, arrival_s) in enumerate(fields):
        request = Request(request_id=f"r{index}", arrival_time_s=arrival_s, prompt_tokens=16,
                          max_output_tokens=64, output_tokens=40, priority=priority)
        request.service_s = service_s
        request.service_rounds, request.round_service_s = 4, 0.2
        if perceptible:
            request.policy_state.update({LAPS_PERCEPTIBLE: 1.0, LAPS_RATE: rate})
        requests.append(request)
    key = LapsVictimKey(queue_bounds_s(4, 2.0, 1.0), 5, None, tiers)
    if nearly_sorted:
        requests.sort(key=key)
        for request in requests[::5]:
            request.service_s += 1.0  # (served a while)
    expected = sorted(requests, key=key)
    key.sort(requests)
    assert [r.request_id for r in requests] == [r.request_id for r in expected]
