"""Tests for semsched/workloads/workload.py."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from semsched.core.request import LengthDistribution, Request
from semsched.workloads import DEFAULT_TIERS, UNTIERED, Workload, WorkloadError
from tests.workloads.factories import WorkloadFactory, make_workload


def test_lengths_and_summaries(workload_factory: WorkloadFactory) -> None:
    workload = workload_factory((0.0, 0.5, 2.0))
    assert len(workload) == 3
    assert workload.duration_s() == 2.0
    assert workload.mean_rate() == pytest.approx(1.0)


def test_arrays_are_read_only_copies() -> None:
    times = np.array([0.0, 1.0])
    workload = Workload.untiered("w", times, [1, 2], [3, 4])
    times[0] = 5.0
    assert workload.arrival_time_s[0] == 0.0
    with pytest.raises(ValueError):
        workload.prompt_tokens[0] = 7


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"prompt_tokens": np.array([1, 2, 3])}, "prompt_tokens: has 3 entries"),
        ({"arrival_time_s": np.array([0.0, 2.0, 1.0, 3.0])}, "arrival_time_s[2]: must be non-decreasing"),
        ({"arrival_time_s": np.array([-1.0, 2.0, 2.0, 3.0])}, "arrival_time_s[0]: must be finite and >= 0"),
        ({"output_tokens": np.array([1, 0, 1, 1])}, "output_tokens[1]: must be >= 1"),
        ({"prompt_tokens": np.array([1.5, 2, 2, 2])}, "prompt_tokens: must hold integers"),
        ({"tier": ("default", "default", "GOLD", "default")}, "tier[2]: 'GOLD' is not in the tier table"),
        ({"tiers": ()}, "at least one TierSpec"),
    ],
)
def test_validation_names_field_and_index(change: dict[str, object], message: str) -> None:
    with pytest.raises(WorkloadError) as info:
        dataclasses.replace(make_workload(), **change)  # type: ignore[arg-type]
    assert message in str(info.value)


def test_mean_rate_needs_two_distinct_times(workload_factory: WorkloadFactory) -> None:
    with pytest.raises(WorkloadError, match="mean_rate"):
        workload_factory((1.0,)).mean_rate()
    with pytest.raises(WorkloadError, match="mean_rate"):
        workload_factory((1.0, 1.0)).mean_rate()


def test_to_requests_builds_fresh_requests_with_tier_slos() -> None:
    premium = DEFAULT_TIERS[1]
    workload = make_workload((0.0, 1.0)).with_tiers(DEFAULT_TIERS, tier=("PREMIUM", "BACKGROUND"), priority=[1, 3])
    first, second = workload.to_requests(), workload.to_requests()
    assert [r.request_id for r in first] == ["0", "1"]
    assert all(a is not b for a, b in zip(first, second, strict=True))
    request = first[0]
    assert isinstance(request, Request)
    assert (request.tier, request.priority) == ("PREMIUM", 1)
    assert (request.ttft_slo_s, request.tpot_slo_s, request.e2e_slo_s) == (
        premium.ttft_slo_s,
        premium.tpot_slo_s,
        premium.e2e_slo_s,
    )
    assert first[1].ttft_slo_s is None and first[1].e2e_slo_s == 60.0


def test_to_requests_output_lengths_and_cap() -> None:
    workload = make_workload((0.0, 1.0), prompt_tokens=(5, 6), output_tokens=(30, 300))
    default = workload.to_requests()
    assert [(r.output_tokens, r.max_output_tokens) for r in default] == [(30, 30), (300, 300)]
    capped = workload.to_requests(max_output_tokens=100)
    assert [(r.output_tokens, r.max_output_tokens) for r in capped] == [(30, 100), (300, 100)]
    assert [r.target_output_tokens for r in capped] == [30, 100]
    with pytest.raises(WorkloadError, match="max_output_tokens"):
        workload.to_requests(max_output_tokens=0)


def test_head_and_slice_time(workload_factory: WorkloadFactory) -> None:
    workload = workload_factory((0.0, 1.0, 2.0, 3.0))
    assert list(workload.head(2).prompt_tokens) == [10, 20]
    assert len(workload.head(10)) == 4
    sliced = workload.slice_time(1.0, 3.0)
    assert list(sliced.arrival_time_s) == [0.0, 1.0]
    assert list(sliced.prompt_tokens) == [20, 30]
    assert list(workload.slice_time(1.0, 3.0, rebase=False).arrival_time_s) == [1.0, 2.0]
    with pytest.raises(WorkloadError, match="start_s"):
        workload.slice_time(3.0, 1.0)


def test_with_tiers_replaces_table_only() -> None:
    workload = make_workload().with_tiers((UNTIERED, *DEFAULT_TIERS))
    assert workload.tiers[0] == UNTIERED and len(workload.tiers) == 5
    assert workload.tier == ("default",) * 4


@given(
    gaps=st.lists(st.floats(min_value=0.0, max_value=100.0), min_size=1, max_size=30),
    data=st.data(),
)
def test_to_requests_round_trips(gaps: list[float], data: st.DataObject) -> None:
    n = len(gaps)
    lengths = st.lists(st.integers(min_value=1, max_value=10_000), min_size=n, max_size=n)
    prompts, outputs = data.draw(lengths), data.draw(lengths)
    workload = Workload.untiered("h", np.cumsum(gaps), prompts, outputs)
    requests = workload.to_requests()
    assert [r.prompt_tokens for r in requests] == prompts
    assert [r.output_tokens for r in requests] == outputs
    assert [r.arrival_time_s for r in requests] == list(workload.arrival_time_s)


def _with_semantics() -> Workload:
    """Four requests with every optional array: urgency, its truth, predicted lengths and texts."""
    return dataclasses.replace(
        make_workload(),
        urgency=np.array([0, 1, 2, 3]),
        urgency_true=np.array([0, 2, 2, 1]),
        predicted_length=np.array([5, 6, 7, 8]),
        prompt_text=("a", "b", "c", "d"),
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"urgency": np.array([0, 1, 2])}, "urgency: has 3 entries but arrival_time_s has 4"),
        ({"urgency": np.array([0, -2, 2, 3])}, "urgency[1]: must be >= -1 (-1: no urgency level) (got -2)"),
        ({"urgency": np.array([0.5, 1, 2, 3])}, "urgency: must hold integers"),
        ({"urgency_true": np.array([0, 0, 0, -2])}, "urgency_true[3]: must be >= -1 (-1: no urgency level)"),
        ({"urgency_true": np.array([0, 0, 0])}, "urgency_true: has 3 entries"),
        ({"urgency": None}, "urgency_true: given without urgency"),
        ({"predicted_length": np.array([5, 0, 7, 8])}, "predicted_length[1]: must be >= 1 (got 0)"),
        ({"predicted_length": np.array([[5, 6, 7, 8]])}, "predicted_length: must be a 1-D array"),
        ({"prompt_text": ("a", "b")}, "prompt_text: has 2 entries"),
        ({"prompt_text": ("a", "b", 3, "d")}, "prompt_text[2]: must be a string (got int)"),
    ],
)
def test_optional_arrays_are_validated(change: dict[str, object], message: str) -> None:
    with pytest.raises(WorkloadError) as info:
        dataclasses.replace(_with_semantics(), **change)  # type: ignore[arg-type]
    assert message in str(info.value)


def test_optional_arrays_are_read_only_copies() -> None:
    urgency = np.array([3, 2, 1, 0])
    workload = make_workload().with_urgency(urgency)
    urgency[0] = 0
    assert workload.urgency is not None and workload.urgency[0] == 3
    with pytest.raises(ValueError):
        workload.urgency[0] = 1


def test_optional_arrays_are_absent_by_default() -> None:
    workload = make_workload()
    assert _semantics(workload) == (None, None, None, None)
    request = workload.to_requests()[0]
    assert (request.urgency, request.urgency_true, request.predicted_output, request.prompt_text) == (None,) * 4


def test_to_requests_carries_urgency_predictions_and_text() -> None:
    requests = _with_semantics().to_requests()
    assert [(r.urgency, r.urgency_true, r.prompt_text) for r in requests] == [
        (0, 0, "a"), (1, 2, "b"), (2, 2, "c"), (3, 1, "d")
    ]  # fmt: skip
    assert [r.predicted_output for r in requests] == [LengthDistribution.point(n) for n in (5, 6, 7, 8)]
    assert all(isinstance(r.urgency, int) and isinstance(r.urgency_true, int) for r in requests)


def test_no_urgency_entries_give_requests_without_a_level() -> None:
    workload = make_workload().with_urgency(np.array([-1, 1, -1, 0]), urgency_true=np.array([-1, 2, -1, 0]))
    requests = workload.to_requests()
    assert [(r.urgency, r.urgency_true) for r in requests] == [(None, None), (1, 2), (None, None), (0, 0)]


def _semantics(workload: Workload) -> tuple[object, ...]:
    def listed(values: np.ndarray | None) -> list[int] | None:
        return None if values is None else [int(v) for v in values]

    return (
        listed(workload.urgency),
        listed(workload.urgency_true),
        listed(workload.predicted_length),
        workload.prompt_text,
    )


def test_optional_arrays_follow_head_slice_and_copies() -> None:
    workload = _with_semantics()
    assert _semantics(workload.head(2)) == ([0, 1], [0, 2], [5, 6], ("a", "b"))
    assert _semantics(workload.slice_time(1.0, 3.0)) == ([1, 2], [2, 2], [6, 7], ("b", "c"))
    assert _semantics(workload.head(0)) == ([], [], [], ())
    copies = (
        workload.with_tiers(DEFAULT_TIERS, tier=("PREMIUM",) * 4, priority=[1] * 4),
        workload.with_arrival_times([0.0, 0.0, 0.0, 0.0]),
        workload.with_lengths([1, 1, 1, 1], [2, 2, 2, 2]),
        workload.with_name("renamed"),
    )
    assert all(_semantics(copy) == _semantics(workload) for copy in copies)


def test_with_helpers_replace_one_thing() -> None:
    workload = _with_semantics()
    exact = workload.with_urgency([4, 4, 4, 4])
    assert _semantics(exact) == ([4, 4, 4, 4], None, [5, 6, 7, 8], ("a", "b", "c", "d"))
    assert _semantics(workload.with_predicted_length(None))[2] is None
    assert _semantics(workload.with_prompt_text(["w", "x", "y", "z"]))[3] == ("w", "x", "y", "z")
    with pytest.raises(WorkloadError, match="urgency: has 2 entries"):
        workload.with_urgency([0, 1])


def test_client_column_is_carried_and_checked() -> None:
    workload = make_workload().with_client(("a", "b", "a", "c"))
    assert [r.client for r in workload.to_requests()] == ["a", "b", "a", "c"]
    assert workload.head(2).client == ("a", "b")
    assert workload.slice_time(1.0, 3.0).client == ("b", "a")
    assert workload.with_arrival_times([0.0, 0.5, 1.0, 1.5]).client == workload.client
    assert make_workload().client is None and make_workload().to_requests()[0].client is None
    with pytest.raises(WorkloadError, match="client: has 2 entries"):
        make_workload().with_client(("a", "b"))
    with pytest.raises(WorkloadError, match=r"client\[1\]: must be a non-empty string"):
        make_workload().with_client(("a", "", "b", "c"))
