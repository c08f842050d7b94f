"""gittins: the index against a brute-force computation, its SRPT limit, the order and displacement it gives."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from semsched.core.request import LengthDistribution, Request
from semsched.policies.cost_model import CostDistribution, request_cost
from semsched.policies.gittins import gittins_index
from tests.policies.factories import displaced_by, service_order
from tests.policies.predicted import check_complete_and_exact
from tests.support import make_request

BIMODAL = LengthDistribution((5, 200), (0.5, 0.5))


def brute_force_gittins(
    costs: list[float], probs: list[float], attained: float, *, drop_budget_term: bool = False
) -> float | None:
    """The definition, term by term: min over budgets x_j > a of E[min(X - a, x_j - a) | X > a] over
    P(X <= x_j | X > a). ``drop_budget_term`` leaves out the jobs that outlast the budget (a known slip)."""
    ahead = [(c, p) for c, p in zip(costs, probs, strict=True) if c > attained and p > 0]
    if not ahead:
        return None
    mass = sum(p for _, p in ahead)
    ratios = []
    for budget, _ in ahead:
        spent = (
            sum(
                p * min(c - attained, budget - attained) for c, p in ahead if not (drop_budget_term and c > budget)
            )
            / mass
        )
        done = sum(p for c, p in ahead if c <= budget) / mass
        ratios.append(spent / done)
    return min(ratios)


@settings(max_examples=300, deadline=None)
@given(
    lengths=st.sets(st.integers(1, 400), min_size=1, max_size=8),
    weights=st.lists(st.integers(0, 30), min_size=8, max_size=8),
    prompt=st.integers(1, 2000),
    model=st.sampled_from(["resource", "output", "weighted"]),
    age=st.floats(0.0, 1.05),
)
def test_equals_the_brute_force_index(
    lengths: set[int], weights: list[int], prompt: int, model: str, age: float
) -> None:
    support = sorted(lengths)
    mass = weights[: len(support)]
    if sum(mass) == 0:
        mass[-1] = 1
    prediction = LengthDistribution(tuple(support), tuple(w / sum(mass) for w in mass))
    costs = CostDistribution.of(prediction, prompt, model)  # type: ignore[arg-type]
    generated = int(age * support[-1])
    attained = request_cost(generated, prompt, model)  # type: ignore[arg-type]
    expected = brute_force_gittins(costs.costs.tolist(), costs.probs.tolist(), attained)
    actual = gittins_index(costs, attained)
    if expected is None:
        assert actual is None
    else:
        assert actual == pytest.approx(expected, rel=1e-9)


def test_the_brute_force_catches_a_dropped_budget_term() -> None:
    costs = CostDistribution.of(LengthDistribution((2, 10, 12), (0.3, 0.3, 0.4)), 1, "output")
    right = brute_force_gittins(costs.costs.tolist(), costs.probs.tolist(), 0.0)
    wrong = brute_force_gittins(costs.costs.tolist(), costs.probs.tolist(), 0.0, drop_budget_term=True)
    assert gittins_index(costs, 0.0) == pytest.approx(right)
    assert wrong is not None and right is not None and not math.isclose(wrong, right)


@pytest.mark.parametrize("model", ["resource", "output", "weighted"])
def test_a_point_distribution_gives_the_remaining_cost(model: str) -> None:
    costs = CostDistribution.of(LengthDistribution.point(90), 40, model)  # type: ignore[arg-type]
    for generated in (0, 1, 45, 89):
        attained = request_cost(generated, 40, model)  # type: ignore[arg-type]
        assert gittins_index(costs, attained) == pytest.approx(request_cost(90, 40, model) - attained)  # type: ignore[arg-type]
    assert gittins_index(costs, request_cost(90, 40, model)) is None  # type: ignore[arg-type]


def test_a_likely_quick_finish_runs_before_a_smaller_mean() -> None:
    """Seed 002 Fig. 6: "gamble" (5 or 200 tokens, mean 102.5) has Gittins index 10 and goes before "steady"
    (exactly 50); ordered by the mean, it goes after."""

    def requests() -> list[Request]:
        return [
            make_request("blocker", prompt=8, output=2, arrival=0.0),
            make_request(
                "steady", prompt=8, output=50, arrival=0.001, predicted_output=LengthDistribution.point(50)
            ),
            make_request("gamble", prompt=8, output=5, arrival=0.002, predicted_output=BIMODAL),
        ]

    assert service_order("gittins:cost=output", requests()) == ["blocker", "gamble", "steady"]
    assert service_order("mean:cost=output", requests()) == ["blocker", "steady", "gamble"]


def test_a_smaller_index_displaces_running_work_with_a_larger_one() -> None:
    running = [make_request("long", prompt=60, output=16)]
    short = make_request("short", prompt=20, output=4, arrival=1.0)
    assert displaced_by("gittins:displace=true", running, short, num_gpu_blocks=20) == ["long"]
    # resource cost O^2/2 + I*O: 88 for "short", 1088 for "long", 1600 for "longer"
    longer = make_request("longer", prompt=20, output=40, arrival=1.0)
    assert displaced_by("gittins:displace=true", [make_request("long", prompt=60, output=16)], longer,
                        num_gpu_blocks=20) == []
    assert displaced_by("gittins", running, short, num_gpu_blocks=20) == []  # by default nothing is displaced


@pytest.mark.parametrize("spec", ["gittins", "gittins:displace=true;victim=index",
                                  "gittins:refresh=false;displace=true",
                                  "gittins:bucket_tokens=20;cost=weighted;displace=true"])
def test_completes_a_predicted_workload_identically_in_both_simulator_modes(spec: str) -> None:
    # roomy KV: only a displacing variant preempts there
    preemptions = check_complete_and_exact(spec, max_num_seqs=4, num_gpu_blocks=200, block_size=16)
    assert preemptions > 0 if "displace=true" in spec else preemptions == 0
    assert check_complete_and_exact(spec, range(3, 5), max_num_seqs=16, num_gpu_blocks=60, block_size=16) > 0
