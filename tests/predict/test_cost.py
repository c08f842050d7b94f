"""PredictorCost: hand-computed batches for both modes, invariants of any arrival stream, validation and specs."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from semsched.core.errors import SemschedError
from semsched.predict.cost import MODES, PredictorCost, PredictorCostError, parse_predictor_cost
from tests.support import make_request

ARRIVALS = [0.0, 0.1, 0.2, 5.0]


@pytest.mark.parametrize(
    ("cost", "expected"),
    [
        # free worker at 0 takes the lone request; at 1 both queued ones; the last alone at 5
        (PredictorCost(1.0, 2, "immediate"), [1.0, 2.0, 2.0, 6.0]),
        # waits for two: starts at 0.1; the next pair is complete only at 5.0
        (PredictorCost(1.0, 2, "full"), [1.1, 1.1, 6.0, 6.0]),
        # 0.2 has waited 0.5 s at 0.7 but the worker is busy until 1.1; 5.0 ends the stream alone
        (PredictorCost(1.0, 2, "full", max_wait_s=0.5), [1.1, 1.1, 2.1, 6.0]),
        # two workers: the second takes 0.1 (alone) while the first still runs 0
        (PredictorCost(1.0, 2, "immediate", workers=2), [1.0, 1.1, 2.0, 6.0]),
        # one batch of four: the partial last batch of "full" starts at the last arrival
        (PredictorCost(0.5, 8, "full"), [5.5, 5.5, 5.5, 5.5]),
        (PredictorCost(0.0, 1, "immediate"), ARRIVALS),
    ],
    ids=["immediate", "full", "full-max-wait", "immediate-2-workers", "full-partial", "free"],
)
def test_ready_times_by_hand(cost: PredictorCost, expected: list[float]) -> None:
    assert cost.ready_times(ARRIVALS).tolist() == pytest.approx(expected)


def test_ready_times_follow_the_given_order() -> None:
    cost = PredictorCost(1.0, 2, "full")
    shuffled = [5.0, 0.2, 0.0, 0.1]
    assert cost.ready_times(shuffled).tolist() == pytest.approx([6.0, 6.0, 1.1, 1.1])
    assert [b.requests for b in cost.batches(shuffled)] == [(2, 3), (1, 0)]


def test_batches_hold_what_was_queued_when_they_started() -> None:
    batches = PredictorCost(1.0, 2, "immediate").batches(ARRIVALS)
    assert [(b.start_s, b.ready_s, b.requests) for b in batches] == [
        (0.0, 1.0, (0,)),
        (1.0, 2.0, (1, 2)),
        (5.0, 6.0, (3,)),
    ]


def test_no_arrivals_no_batches() -> None:
    cost = PredictorCost(1.0, 4, "full")
    assert cost.ready_times([]).size == 0 and cost.batches([]) == []


def test_apply_sets_ready_times_on_requests() -> None:
    requests = [make_request(str(i), arrival=t) for i, t in enumerate(ARRIVALS)]
    PredictorCost(1.0, 2, "immediate").apply(requests)
    assert [r.ready_time_s for r in requests] == pytest.approx([1.0, 2.0, 2.0, 6.0])


arrival_streams = st.lists(
    st.floats(min_value=0.0, max_value=100.0, allow_nan=False, allow_infinity=False), max_size=60
)
costs = st.builds(
    PredictorCost,
    latency_s=st.sampled_from([0.0, 0.001, 0.01, 0.1, 1.0, 3.0]),
    batch_size=st.integers(1, 16),
    mode=st.sampled_from(MODES),
    workers=st.integers(1, 3),
)


def _with_max_wait(cost: PredictorCost, max_wait_s: float | None) -> PredictorCost:
    if cost.mode != "full":
        return cost
    return PredictorCost(cost.latency_s, cost.batch_size, "full", max_wait_s=max_wait_s, workers=cost.workers)


@settings(max_examples=300, deadline=None)
@given(arrivals=arrival_streams, cost=costs, max_wait_s=st.none() | st.sampled_from([0.0, 0.5, 5.0]))
def test_nothing_is_lost_and_batches_respect_their_limits(
    arrivals: list[float], cost: PredictorCost, max_wait_s: float | None
) -> None:
    cost = _with_max_wait(cost, max_wait_s)
    ready = cost.ready_times(arrivals)
    batches = cost.batches(arrivals)
    assert ready.shape == (len(arrivals),)
    assert np.all(ready >= np.asarray(arrivals, dtype=np.float64))
    held = sorted(i for b in batches for i in b.requests)
    assert held == list(range(len(arrivals)))  # every request in exactly one batch
    for batch in batches:
        assert 1 <= len(batch.requests) <= cost.batch_size
        assert all(arrivals[i] <= batch.start_s for i in batch.requests)  # only what had arrived
        assert all(ready[i] == batch.ready_s for i in batch.requests)
        assert batch.ready_s == batch.start_s + cost.latency_s
    starts = [b.start_s for b in batches]
    assert starts == sorted(starts)
    for first, later in zip(batches, batches[cost.workers :], strict=False):
        assert later.start_s >= first.ready_s  # at most `workers` batches at once
    assert np.array_equal(cost.ready_times(arrivals), ready)  # deterministic


@settings(max_examples=200, deadline=None)
@given(arrivals=arrival_streams, latency_s=st.sampled_from([0.0, 0.01, 1.0]), batch_size=st.integers(1, 16))
def test_immediate_never_waits_for_a_free_worker(arrivals: list[float], latency_s: float, batch_size: int) -> None:
    """A batch of "immediate" starts at its oldest arrival or when the previous batch ends, whichever is later."""
    batches = PredictorCost(latency_s, batch_size, "immediate").batches(arrivals)
    previous_end_s = -np.inf
    for batch in batches:
        oldest_s = min(arrivals[i] for i in batch.requests)
        assert batch.start_s == max(oldest_s, previous_end_s)
        previous_end_s = batch.ready_s


@settings(max_examples=200, deadline=None)
@given(arrivals=arrival_streams, batch_size=st.integers(1, 16))
def test_full_batches_are_full_except_the_last(arrivals: list[float], batch_size: int) -> None:
    batches = PredictorCost(0.01, batch_size, "full").batches(arrivals)
    assert all(len(b.requests) == batch_size for b in batches[:-1])


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"latency_s": -0.1}, "latency_s"),
        ({"latency_s": float("nan")}, "latency_s"),
        ({"latency_s": 1e9}, "latency_s"),
        ({"latency_s": True}, "latency_s"),
        ({"batch_size": 0}, "batch_size"),
        ({"batch_size": 2.5}, "batch_size"),
        ({"mode": "lazy"}, "mode"),
        ({"mode": "full", "max_wait_s": -1.0}, "max_wait_s"),
        ({"max_wait_s": 1.0}, "max_wait_s"),  # "immediate" never waits
        ({"workers": 0}, "workers"),
    ],
)
def test_invalid_settings_name_the_field(kwargs: dict[str, object], field: str) -> None:
    values: dict[str, object] = {"latency_s": 0.01, "batch_size": 4, "mode": "immediate"} | kwargs
    with pytest.raises(PredictorCostError, match=rf"^{field}: "):
        PredictorCost(**values)  # type: ignore[arg-type]
    assert issubclass(PredictorCostError, SemschedError)


def test_non_finite_arrivals_are_refused() -> None:
    with pytest.raises(PredictorCostError, match=r"arrival_times_s\[1\]"):
        PredictorCost(0.01, 4, "immediate").ready_times([0.0, float("nan")])


def test_specs_round_trip() -> None:
    cost = parse_predictor_cost("full:latency_s=0.1;batch_size=16;max_wait_s=2;workers=2")
    assert cost == PredictorCost(0.1, 16, "full", max_wait_s=2.0, workers=2)
    assert parse_predictor_cost(cost.spec) == cost
    assert parse_predictor_cost("immediate:latency_s=0.01;batch_size=64") == PredictorCost(0.01, 64, "immediate")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("lazy:latency_s=1;batch_size=2", "unknown mode 'lazy'"),
        ("full:latency_s=1", "give batch_size"),
        ("full:latency_s=1;batch_size=2;speed=3", "unknown parameter 'speed'"),
        ("full:latency_s=1;batch_size=2;mode=full", "the mode is the spec's name"),
        ("full:latency_s=fast;batch_size=2", "'latency_s' must be float"),
        ("full:latency_s=1;batch_size=2;batch_size=3", "given twice"),
        ("immediate:latency_s=-1;batch_size=2", "latency_s: must be a number from 0"),
    ],
)
def test_bad_specs_say_what_is_wrong(spec: str, message: str) -> None:
    with pytest.raises(PredictorCostError, match=message):
        parse_predictor_cost(spec)


def test_cost_model_imports_no_learning_library() -> None:
    code = "import sys, semsched.predict.cost; assert not {'sklearn', 'torch'} & set(sys.modules), sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
