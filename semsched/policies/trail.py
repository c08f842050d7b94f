"""TRAIL (Shahout et al. 2025): shortest predicted remaining output first, preemptive, with limited preemption.

TRAIL re-predicts each running request's remaining output every iteration and runs the shortest first. Ours reads
the remaining output off the predicted distribution, ``E[L - g | L > g]`` after ``g`` tokens (the truth without
a prediction), so it sharpens as the request ages. A waiting request displaces running requests with a longer
predicted remaining output, except those that have generated at least ``protect`` (default 0.8) of their
predicted length (the distribution's mean): TRAIL's limited preemption, which spares nearly finished requests
the KV they would lose. Under KV pressure unprotected requests go first, longest remaining first.

Stable between events while no unfinished request's predicted remaining can rise (``srpt``'s test): protection
and a falling remaining output only take victims away.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from semsched.core.policy import Policy, PolicyConfig, SchedulerView, SortKey
from semsched.core.request import Request
from semsched.policies.registry import register_policy
from semsched.policies.srpt import remaining_can_rise


@dataclass(frozen=True)
class TrailConfig(PolicyConfig):
    protect: float = field(
        default=0.8,
        metadata={
            "doc": "a request that has generated this share of its predicted length (mean) is never preempted"
        },
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if not math.isfinite(self.protect) or self.protect < 0:
            raise ValueError(f"protect must be a finite number >= 0, got {self.protect!r}")


@register_policy
class Trail(Policy):
    """TRAIL: shortest predicted remaining output first, preemptive except for nearly finished requests.

    starvation: possible for requests with a long predicted remaining output while shorter ones keep arriving
    (protection only keeps requests past ``protect`` of their predicted length running).
    """

    name: ClassVar[str] = "trail"
    config_cls: ClassVar[type[PolicyConfig]] = TrailConfig
    config: TrailConfig

    def __init__(self, config: PolicyConfig | None = None) -> None:
        super().__init__(config)
        self._rising: set[str] = set()  # unfinished requests whose predicted remaining output can rise

    @property
    def stable_between_events(self) -> bool:  # type: ignore[override]
        return not self._rising

    @property
    def uses_predicted_lengths(self) -> bool:
        return True

    def protected(self, request: Request) -> bool:
        """Whether the request has generated ``protect`` of its predicted length: never a victim."""
        return request.num_output_tokens >= self.config.protect * request.predicted_output_tokens()

    def on_arrival(self, request: Request, now_s: float) -> None:
        if request.predicted_output is not None and remaining_can_rise(request.predicted_output):
            self._rising.add(request.request_id)

    def on_finish(self, request: Request, now_s: float) -> None:
        self._rising.discard(request.request_id)

    def waiting_key(self, request: Request, now_s: float) -> SortKey:
        return (request.predicted_remaining_tokens(), request.arrival_time_s)

    def victim_key(self, request: Request) -> SortKey:
        return (
            0.0 if self.protected(request) else 1.0,
            request.predicted_remaining_tokens(),
            request.arrival_time_s,
        )

    def victims_for(
        self, candidate: Request, running: Sequence[Request], view: SchedulerView, now_s: float
    ) -> Sequence[Request]:
        mine = candidate.predicted_remaining_tokens()
        longer = [r for r in running if not self.protected(r) and r.predicted_remaining_tokens() > mine]
        return sorted(longer, key=self.victim_key, reverse=True)
