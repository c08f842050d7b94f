"""cost_model: SageSched's cost models and the cost distribution of a predicted length."""

from __future__ import annotations

import numpy as np
import pytest

from semsched.core.request import LengthDistribution
from semsched.policies.cost_model import (
    CostDistribution,
    attained_cost,
    cost_distribution,
    one_token_floor,
    request_cost,
    request_costs,
)
from tests.support import make_request


def test_the_three_cost_models() -> None:
    assert request_cost(10, 100, "resource") == 10 * 10 / 2 + 100 * 10
    assert request_cost(10, 100, "output") == 10
    assert request_cost(10, 100, "weighted") == 100 + 2 * 10
    outputs = np.array([1.0, 7.0, 300.0])
    for model in ("resource", "output", "weighted"):
        assert request_costs(outputs, 37, model).tolist() == [request_cost(o, 37, model) for o in outputs]


def test_attained_cost_is_the_cost_of_the_tokens_generated_so_far() -> None:
    request = make_request(prompt=50, output=20)
    request.num_output_tokens = 6
    assert attained_cost(request, "resource") == 6 * 6 / 2 + 50 * 6


@pytest.mark.parametrize("model", ["resource", "output", "weighted"])
def test_the_one_token_floor_bounds_every_marginal_cost(model: str) -> None:
    floor = one_token_floor(64, model)  # type: ignore[arg-type]
    marginal = [request_cost(g + 1, 64, model) - request_cost(g, 64, model) for g in range(200)]  # type: ignore[arg-type]
    assert floor == marginal[0] and min(marginal) == floor


def test_a_length_distribution_maps_point_by_point_dropping_impossible_lengths() -> None:
    lengths = LengthDistribution((4, 10, 30), (0.25, 0.0, 0.75))
    costs = CostDistribution.of(lengths, 8, "resource")
    assert costs.costs.tolist() == [request_cost(4, 8, "resource"), request_cost(30, 8, "resource")]
    assert costs.probs.tolist() == [0.25, 0.75] and costs.last_length == 30 and not costs.is_point
    assert costs.mean_remaining(request_cost(4, 8, "resource")) == pytest.approx(
        request_cost(30, 8, "resource") - request_cost(4, 8, "resource")
    )
    assert costs.mean_remaining(request_cost(30, 8, "resource")) is None


def test_without_a_prediction_the_true_length_is_a_point() -> None:
    request = make_request(prompt=8, output=12)
    costs = cost_distribution(request, "output")
    assert costs.is_point and costs.costs.tolist() == [12.0]
    request.predicted_output = LengthDistribution((3, 5), (0.5, 0.5))
    assert cost_distribution(request, "output").costs.tolist() == [3.0, 5.0]
