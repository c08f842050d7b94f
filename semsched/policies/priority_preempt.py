"""Strict priority with preemption: a waiting request displaces running lower-priority work.

What vLLM's priority policy lacks (vLLM issue #40004). When a more important request does not fit (no KV
blocks or no sequence slot), running requests of strictly lower priority are preempted, worst first, if
together they make room. With ``exclusive=true`` batching is class-exclusive: only the most important class
present runs, which enforces seed 000's constraint (eq. 2): no request finishes before a more important one
that had already arrived (at step granularity), at the cost of batch occupancy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, Literal

from semsched.core.plan import PreemptionMode
from semsched.core.policy import PolicyConfig, SchedulerView, SortKey
from semsched.core.request import Request
from semsched.policies.priority import StrictPriority
from semsched.policies.registry import register_policy


@dataclass(frozen=True)
class PriorityPreemptConfig(PolicyConfig):
    exclusive: bool = False
    mode: Literal["recompute", "swap"] = "recompute"


@register_policy
class PriorityPreempt(StrictPriority):
    """Strict priority whose waiting requests displace running lower-priority work.

    starvation: possible for low priorities under sustained higher-priority load, running or waiting: a
    running one is displaced by every more important arrival that needs its room.
    """

    name: ClassVar[str] = "priority-preempt"
    config_cls: ClassVar[type[PolicyConfig]] = PriorityPreemptConfig
    #: victim_key reads a request's progress, which changes every step (StrictPriority's key does not)
    static_victim_key: ClassVar[bool] = False
    config: PriorityPreemptConfig

    def victim_key(self, request: Request) -> SortKey:
        """Worst priority first, then least progress (seed 003's victim selection: least wasted compute,
        cheapest to recompute), then latest arrival."""
        return (request.priority, -request.num_computed_tokens, request.arrival_time_s)

    def victims_for(
        self, candidate: Request, running: Sequence[Request], view: SchedulerView, now_s: float
    ) -> Sequence[Request]:
        lower = [r for r in running if r.priority > candidate.priority]
        return sorted(lower, key=self.victim_key, reverse=True)

    def preemption_mode(self, request: Request, view: SchedulerView) -> PreemptionMode:
        return PreemptionMode(self.config.mode)

    def exclusive_class(self, request: Request) -> int | None:
        return request.priority if self.config.exclusive else None
