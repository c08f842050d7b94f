"""sjf: shortest (oracle or predicted) output first, non-preemptive."""

from __future__ import annotations

from semsched.core.request import LengthDistribution, Request
from semsched.policies import make_policy
from tests.policies.factories import service_order
from tests.support import make_request


def test_serves_the_shortest_true_output_first() -> None:
    requests = [
        make_request("blocker", arrival=0.0, output=100),
        make_request("long", arrival=0.1, output=40),
        make_request("short", arrival=0.2, output=2),
        make_request("medium", arrival=0.3, output=9),
    ]
    assert service_order("sjf", requests) == ["blocker", "short", "medium", "long"]


def test_predicted_lengths_order_by_the_prediction_not_the_truth() -> None:
    def predicted(mean: int) -> LengthDistribution:
        return LengthDistribution(lengths=(mean,), probs=(1.0,))

    def requests() -> list[Request]:
        return [
            make_request("blocker", arrival=0.0, output=100),
            make_request("truly-long", arrival=0.1, output=40, predicted_output=predicted(1)),
            make_request("truly-short", arrival=0.2, output=2, predicted_output=predicted(30)),
        ]

    assert service_order("sjf:length=predicted", requests()) == ["blocker", "truly-long", "truly-short"]
    assert service_order("sjf", requests()) == ["blocker", "truly-short", "truly-long"]


def test_says_when_it_reads_predictions() -> None:
    assert make_policy("sjf:length=predicted").uses_predicted_lengths
    assert not make_policy("sjf").uses_predicted_lengths
