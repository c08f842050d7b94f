import math

import numpy as np
import pytest

from semsched.core.request import InvalidRequestError, LengthDistribution, Request, RequestState, TokenTimeline
from tests.support import make_request


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("prompt_tokens", 0),
        ("prompt_tokens", -5),
        ("max_output_tokens", 0),
        ("output_tokens", -1),
        ("arrival_time_s", -1.0),
        ("arrival_time_s", math.nan),
        ("ttft_slo_s", 0.0),
        ("tpot_slo_s", -0.1),
        ("priority", 1.5),
    ],
)
def test_bad_fields_name_the_field(field: str, value: object) -> None:
    fields: dict[str, object] = {"prompt": 10, "output": 5}
    mapping = {
        "prompt_tokens": "prompt",
        "output_tokens": "output",
        "max_output_tokens": "max_output",
        "arrival_time_s": "arrival",
    }
    fields[mapping.get(field, field)] = value
    with pytest.raises(InvalidRequestError, match=field):
        make_request("x", **fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("request_id", 7, "request_id: must be a string"),
        ("prompt_tokens", "10", "prompt_tokens: must be an integer"),
        ("prompt_tokens", 10.0, "prompt_tokens: must be an integer"),
        ("arrival_time_s", "0.5", "arrival_time_s: must be a number"),
        ("arrival_time_s", True, "arrival_time_s: must be a number"),
        ("tier", None, "tier: must be a string"),
        ("prompt_text", b"hi", "prompt_text: must be a string"),
        ("prompt_token_ids", [1, "2"], r"prompt_token_ids\[1\]: must be an integer"),
        ("predicted_output", 5, "predicted_output: must be a LengthDistribution or None"),
        ("ttft_slo_s", "1", "ttft_slo_s: must be a number"),
        ("ready_time_s", [1.0], "ready_time_s: must be a number"),
    ],
)
def test_a_field_of_the_wrong_type_is_named(field: str, value: object, message: str) -> None:
    """A value of another type than the field holds is refused with the field's name, before it is stored (a
    compiled Request stores only its declared types: a TypeError would name no field)."""
    fields: dict[str, object] = {"request_id": "x", "prompt_tokens": 10, "max_output_tokens": 5,
                                 "arrival_time_s": 0.0, field: value}
    with pytest.raises(InvalidRequestError, match=message):
        Request(**fields)  # type: ignore[arg-type]


def test_numpy_numbers_and_sequences_are_stored_as_python_values() -> None:
    request = Request(request_id="x", prompt_tokens=np.int64(10), max_output_tokens=np.int32(5),
                      arrival_time_s=np.float64(1.5), output_tokens=np.int16(3), ttft_slo_s=np.float32(2.0),
                      ready_time_s=2, prompt_token_ids=[1, np.int64(2)], prefix_hashes=np.array([3, 4]),
                      accept_lengths=[2, np.int8(1)])
    values = (request.prompt_tokens, request.max_output_tokens, request.arrival_time_s, request.output_tokens,
              request.ttft_slo_s, request.ready_time_s, *request.prompt_token_ids, *request.prefix_hashes,
              *request.accept_lengths)
    assert values == (10, 5, 1.5, 3, 2.0, 2.0, 1, 2, 3, 4, 2, 1)
    assert [type(v) for v in values] == [int, int, float, int, float, float] + [int] * 6
    assert request.target_output_tokens == 3


def test_a_request_survives_pickling_with_every_field() -> None:
    """A grid's runs come back from worker processes pickled: every field, the token record and the derived
    target included (a compiled Request is rebuilt through its constructor, then given its state)."""
    import dataclasses
    import pickle

    timeline = TokenTimeline()
    timeline.extend([0.1, 0.2, 0.3])
    request = Request(request_id="x", prompt_tokens=10, max_output_tokens=8, arrival_time_s=0.5, output_tokens=6,
                      prompt_text="hi", prompt_token_ids=(1, 2), priority=2, tier="gold", ttft_slo_s=1.0,
                      tpot_slo_s=0.05, e2e_slo_s=9.0, urgency=1,
                      predicted_output=LengthDistribution((3, 7), (0.25, 0.75)), urgency_true=0,
                      ready_time_s=0.75, client="c", accept_lengths=(2, 3), prefix_hashes=(11,))
    request.state = RequestState.RUNNING
    request.num_computed_tokens, request.num_output_tokens, request.service_s = 12, 3, 0.25
    request.record_tokens(timeline, 0, 2)
    request.record_round(timeline, 2, 2)
    request.policy_state["k"] = 1.0
    back = pickle.loads(pickle.dumps(request))
    for field in dataclasses.fields(Request):
        if field.name != "timeline":
            assert getattr(back, field.name) == getattr(request, field.name), field.name
    assert back.predicted_output is not None and back.predicted_output.mean == 6.0
    assert back.token_times_s().tolist() == request.token_times_s().tolist() == [0.1, 0.2, 0.3, 0.3]


def test_target_output_is_capped_by_max_output() -> None:
    request = make_request(output=50, max_output=20)
    assert request.target_output_tokens == 20
    assert request.remaining_output_tokens == 20


def test_token_accounting_follows_vllm() -> None:
    request = make_request(prompt=10, output=3)
    assert request.num_tokens == 10 and request.num_uncomputed_tokens == 10 and request.in_prefill
    request.num_computed_tokens = 10
    request.num_output_tokens = 1
    assert request.num_uncomputed_tokens == 1 and not request.in_prefill


def test_token_ranges_merge_and_materialise() -> None:
    timeline = TokenTimeline()
    timeline.extend([0.1, 0.2, 0.3, 0.4])
    request = make_request(output=4)
    request.record_tokens(timeline, 0, 2)
    request.record_tokens(timeline, 2, 1)
    request.record_tokens(timeline, 3, 1)
    assert request.token_step_ranges == [[0, 4]]
    assert request.token_times_s().tolist() == [0.1, 0.2, 0.3, 0.4]
    assert request.first_token_time_s == 0.1


def test_a_round_of_tokens_has_the_times_of_as_many_one_token_records() -> None:
    """A round's first token is recorded as one token; the others, which share its step, as one entry of
    ``round_extras``: the times are those of one ``record_tokens`` call per token."""
    timeline = TokenTimeline()
    timeline.extend([0.1, 0.2, 0.3, 0.4])
    by_round, by_token = make_request(output=8), make_request(output=8)
    for step, count in [(0, 1), (1, 3), (2, 1), (3, 2), (3, 0)]:
        by_round.record_round(timeline, step, count)
        for _ in range(count):
            by_token.record_tokens(timeline, step, 1)
    assert by_token.token_step_ranges == [[0, 2], [1, 2], [1, 4], [3, 4]]
    assert by_round.token_step_ranges == [[0, 4]] and by_round.round_extras == [[0, 1, 2], [0, 3, 1]]
    assert by_round.token_times_s().tolist() == by_token.token_times_s().tolist() == [
        0.1, 0.2, 0.2, 0.2, 0.3, 0.4, 0.4]
    assert by_round.num_recorded_tokens() == by_token.num_recorded_tokens() == 7


def test_length_distribution_summaries() -> None:
    dist = LengthDistribution.from_samples([10, 10, 20, 40])
    assert dist.lengths == (10, 20, 40)
    assert dist.mean == pytest.approx((10 + 10 + 20 + 40) / 4)
    assert dist.quantile(0.5) == 10 and dist.quantile(0.75) == 20 and dist.quantile(1.0) == 40
    # given 15 generated, remaining is (20-15, 40-15) with equal weight
    assert dist.expected_remaining(15) == pytest.approx(((20 - 15) + (40 - 15)) / 2)
    with pytest.raises(InvalidRequestError, match="probs"):
        LengthDistribution((1, 2), (0.5, 0.6))
    for lengths in ((2, 1), (3, 3)):  # descending, or a length twice: each length once, ascending
        with pytest.raises(InvalidRequestError, match="lengths: must be strictly ascending"):
            LengthDistribution(lengths, (0.5, 0.5))


def test_terminal_states() -> None:
    assert RequestState.FINISHED.is_terminal and RequestState.REJECTED.is_terminal
    assert not RequestState.PREEMPTED_SWAPPED.is_terminal


@pytest.mark.parametrize("client", ["", "x" * 257, 7])
def test_client_must_be_a_short_non_empty_string(client: object) -> None:
    with pytest.raises(InvalidRequestError, match="client: must be a non-empty string of at most 256"):
        make_request("x", client=client)


def test_client_is_optional() -> None:
    assert make_request("x").client is None
    assert make_request("x", client="x" * 256).client == "x" * 256


@pytest.mark.parametrize("num_ranges", [1, 5, 15, 16, 17, 300])
def test_token_times_are_the_ranges_times_in_order_however_many_ranges(num_ranges: int) -> None:
    """Few ranges are sliced one by one, many gathered with one index array, a round's extra tokens repeated from
    ``round_extras``: the times of one ``record_tokens`` call per token either way, for speculative rounds and
    plain decodes (longer ranges) mixed, with gaps between the steps."""
    rng = np.random.default_rng(num_ranges)
    timeline = TokenTimeline()
    timeline.extend(np.cumsum(rng.random(5 * num_ranges + 8)).tolist())
    request = Request("r", prompt_tokens=4, max_output_tokens=10_000, arrival_time_s=0.0)
    by_token = Request("t", prompt_tokens=4, max_output_tokens=10_000, arrival_time_s=0.0)  # (one call a token)
    step = 0
    for _ in range(num_ranges):
        if rng.random() < 0.5:
            count = int(rng.integers(1, 4))
            request.record_round(timeline, step, count)
            for _ in range(count):
                by_token.record_tokens(timeline, step, 1)
        else:
            count = int(rng.integers(1, 3))
            request.record_tokens(timeline, step, count)
            by_token.record_tokens(timeline, step, count)
            step += count - 1
        step += int(rng.integers(1, 3))  # (the next step, or one after a gap)
    assert len(request.token_step_ranges) <= len(by_token.token_step_ranges)
    assert num_ranges < 300 or len(request.token_step_ranges) >= 16  # (the gather, with extras)
    times = request.token_times_s()
    assert times.dtype == np.float64 and np.array_equal(times, by_token.token_times_s())
    ranges = by_token.token_step_ranges
    assert np.array_equal(times, np.concatenate([timeline.as_array()[a:b] for a, b in ranges]))
    assert times.size == request.num_recorded_tokens() == by_token.num_recorded_tokens() >= num_ranges
