"""Speculative shortest job first (SSJF, Qiu et al. 2024): shortest predicted output first, non-preemptive.

SSJF orders the queue by a point prediction of each request's output length. Ours is read off the predicted
distribution: its mean (``point=mean``) or median (``point=median``); without a prediction, the true length.
Stable between events: the key is fixed at enqueue, nothing is displaced, and under KV pressure the request with
the least progress goes first (as ``sjf``: the cheapest to recompute).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Literal

from semsched.core.policy import Policy, PolicyConfig, SortKey
from semsched.core.request import Request
from semsched.policies.registry import register_policy


@dataclass(frozen=True)
class SSJFConfig(PolicyConfig):
    point: Literal["mean", "median"] = field(
        default="mean", metadata={"doc": "point prediction read off the predicted length distribution"}
    )


def point_prediction(request: Request, point: str) -> float:
    """The predicted output length as one number (the true length without a prediction)."""
    prediction = request.predicted_output
    if prediction is None:
        return float(request.target_output_tokens)
    return prediction.mean if point == "mean" else float(prediction.quantile(0.5))


@register_policy
class SSJF(Policy):
    """Shortest point prediction of the output first; non-preemptive.

    starvation: possible for requests predicted long while requests predicted shorter keep arriving.
    """

    name: ClassVar[str] = "ssjf"
    config_cls: ClassVar[type[PolicyConfig]] = SSJFConfig
    stable_between_events: ClassVar[bool] = True
    config: SSJFConfig

    @property
    def uses_predicted_lengths(self) -> bool:
        return True

    def waiting_key(self, request: Request, now_s: float) -> SortKey:
        return (point_prediction(request, self.config.point), request.arrival_time_s)

    def victim_key(self, request: Request) -> SortKey:
        return (-request.num_computed_tokens, request.arrival_time_s)
