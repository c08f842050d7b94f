import math

import pytest

from semsched.core.request import InvalidRequestError
from semsched.core.tiers import PREMIUM, TierSpec
from semsched.vllm.xargs import MAX_SLO_MS, SEMSCHED_KEYS, parse_request_options


def test_empty_inputs_give_defaults() -> None:
    options = parse_request_options(None, None)
    assert options.priority == 0 and options.tier == "default"
    assert options.ttft_slo_s is None and options.predicted_output is None


def test_slos_are_converted_to_seconds() -> None:
    options = parse_request_options(3, {"ttft_slo_ms": 250, "tpot_slo_ms": 40.5, "e2e_slo_ms": 9000})
    assert options.priority == 3
    assert math.isclose(options.ttft_slo_s or 0, 0.25)
    assert math.isclose(options.tpot_slo_s or 0, 0.0405)
    assert math.isclose(options.e2e_slo_s or 0, 9.0)


def test_a_deployments_tier_table_gives_its_tiers_slos() -> None:
    gold = TierSpec("GOLD", priority=0, weight=1.0, ttft_slo_s=0.3, e2e_slo_s=8.0)
    options = parse_request_options(0, {"tier": "gold"}, (gold,))
    assert (options.ttft_slo_s, options.tpot_slo_s, options.e2e_slo_s) == (0.3, None, 8.0)
    premium = parse_request_options(1, {"tier": "PREMIUM"}, (gold,))  # not in this table: no defaults
    assert (premium.ttft_slo_s, premium.e2e_slo_s) == (None, None)


def test_known_tier_fills_missing_slos_but_not_priority() -> None:
    options = parse_request_options(7, {"tier": "premium", "e2e_slo_ms": 1000})
    assert options.priority == 7
    assert options.ttft_slo_s == PREMIUM.ttft_slo_s
    assert options.e2e_slo_s == 1.0  # the request's own SLO wins over the tier's


def test_unknown_keys_are_left_alone() -> None:
    options = parse_request_options(0, {"kv_transfer_params": {"x": 1}, "other_plugin": "y"})
    assert options == parse_request_options(0, None)
    assert "kv_transfer_params" not in SEMSCHED_KEYS


def test_predictions_point_and_distribution() -> None:
    point = parse_request_options(0, {"predicted_output_tokens": 42}).predicted_output
    assert point is not None and point.mean == 42
    dist = parse_request_options(0, {"predicted_lengths": [10, 30], "predicted_probs": [0.25, 0.75]})
    assert dist.predicted_output is not None
    assert math.isclose(dist.predicted_output.mean, 10 * 0.25 + 30 * 0.75)


@pytest.mark.parametrize(
    ("priority", "xargs", "field"),
    [
        ("high", None, "priority"),
        (True, None, "priority"),
        (2**40, None, "priority"),
        (0, {"ttft_slo_ms": -1}, "vllm_xargs.ttft_slo_ms"),
        (0, {"ttft_slo_ms": "fast"}, "vllm_xargs.ttft_slo_ms"),
        (0, {"e2e_slo_ms": MAX_SLO_MS * 2}, "vllm_xargs.e2e_slo_ms"),
        (0, {"tpot_slo_ms": float("nan")}, "vllm_xargs.tpot_slo_ms"),
        (0, {"tier": 5}, "vllm_xargs.tier"),
        (0, {"tier": "x" * 65}, "vllm_xargs.tier"),
        (0, {"urgency": 101}, "vllm_xargs.urgency"),
        (0, {"urgency": 1.5}, "vllm_xargs.urgency"),
        (0, {"predicted_output_tokens": 0}, "vllm_xargs.predicted_output_tokens"),
        (0, {"predicted_output_tokens": 5, "predicted_lengths": [5]}, "vllm_xargs.predicted_output_tokens"),
        (0, {"predicted_lengths": [5]}, "vllm_xargs.predicted_lengths"),
        (0, {"predicted_lengths": [30, 10], "predicted_probs": [0.5, 0.5]}, "vllm_xargs.predicted_lengths"),
        (0, {"predicted_lengths": [10, 30], "predicted_probs": [0.5, 0.6]}, "vllm_xargs.predicted_probs"),
        (0, {"predicted_lengths": list(range(1, 100)), "predicted_probs": [0.01] * 99},
         "vllm_xargs.predicted_lengths"),
        (0, ["not", "a", "dict"], "vllm_xargs"),
        # integers of any size are range errors, never OverflowError
        (10**400, None, "priority"),
        (0, {"ttft_slo_ms": 10**400}, "vllm_xargs.ttft_slo_ms"),
        (0, {"urgency": -(10**400)}, "vllm_xargs.urgency"),
        (0, {"predicted_output_tokens": 10**400}, "vllm_xargs.predicted_output_tokens"),
        (0, {"predicted_lengths": [1, 10**400], "predicted_probs": [0.5, 0.5]}, "vllm_xargs.predicted_lengths"),
        (0, {"predicted_lengths": [1, 2], "predicted_probs": [10**400, 0]}, "vllm_xargs.predicted_probs"),
        (0, {"predicted_lengths": [10, 10], "predicted_probs": [0.5, 0.5]}, "vllm_xargs.predicted_lengths"),
        # near misses of semsched's keys
        (0, {"ttft_slo": 200}, "vllm_xargs.ttft_slo"),
        (0, {"TTFT_SLO_MS": 200}, "vllm_xargs.TTFT_SLO_MS"),
        (0, {"predicted_length": [5]}, "vllm_xargs.predicted_length"),
        (0, {"tiers": "PREMIUM"}, "vllm_xargs.tiers"),
    ],
)
def test_bad_values_name_their_field(priority: object, xargs: object, field: str) -> None:
    with pytest.raises(InvalidRequestError) as info:
        parse_request_options(priority, xargs)  # type: ignore[arg-type]
    assert str(info.value).startswith(field + ":")


def test_limits_are_stated_without_printing_huge_numbers() -> None:
    with pytest.raises(InvalidRequestError) as info:
        parse_request_options(0, {"e2e_slo_ms": 10**400})
    message = str(info.value)
    assert f"<= {MAX_SLO_MS:.0f} ms" in message and len(message) < 120


def test_lengths_must_be_strictly_ascending() -> None:
    with pytest.raises(InvalidRequestError, match="strictly ascending, each length once .got 10 followed by 10"):
        parse_request_options(0, {"predicted_lengths": [5, 10, 10], "predicted_probs": [0.2, 0.4, 0.4]})


def test_a_near_miss_names_the_key_it_probably_meant() -> None:
    with pytest.raises(InvalidRequestError, match="did you mean 'ttft_slo_ms'"):
        parse_request_options(0, {"ttft_slo": 200})
    # keys far from semsched's pass through for other plug-ins
    others = {"repetition_detection": True, "lora_hint": "x"}
    assert parse_request_options(0, others) == parse_request_options(0, None)
