"""Earliest deadline first on the TTFT or the end-to-end deadline (arrival + SLO).

Requests without the chosen SLO have an infinite deadline and run after those with one, in arrival order.
With ``preempt=true`` a waiting request displaces running requests with later deadlines.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, Literal

from semsched.core.policy import Policy, PolicyConfig, SchedulerView, SortKey
from semsched.core.request import Request
from semsched.policies.registry import register_policy


@dataclass(frozen=True)
class EDFConfig(PolicyConfig):
    deadline: Literal["ttft", "e2e"] = "ttft"
    preempt: bool = False


@register_policy
class EDF(Policy):
    """Earliest deadline first on the TTFT or the E2E deadline.

    starvation: possible for requests without the chosen SLO (an infinitely late deadline) while requests with
    one keep arriving; a request with a deadline is passed only by requests due before it, which arrived before
    its deadline less the smallest SLO.
    """

    name: ClassVar[str] = "edf"
    config_cls: ClassVar[type[PolicyConfig]] = EDFConfig
    stable_between_events: ClassVar[bool] = True
    static_victim_key: ClassVar[bool] = True
    config: EDFConfig

    def deadline_s(self, request: Request) -> float:
        return request.ttft_deadline_s if self.config.deadline == "ttft" else request.e2e_deadline_s

    def waiting_key(self, request: Request, now_s: float) -> SortKey:
        return (self.deadline_s(request), request.arrival_time_s)

    def victim_key(self, request: Request) -> SortKey:
        return (self.deadline_s(request), request.arrival_time_s)

    def victims_for(
        self, candidate: Request, running: Sequence[Request], view: SchedulerView, now_s: float
    ) -> Sequence[Request]:
        if not self.config.preempt:
            return ()
        mine = self.deadline_s(candidate)
        later = [r for r in running if self.deadline_s(r) > mine]
        return sorted(later, key=self.victim_key, reverse=True)
