"""Highest-priority job first (seed 000's HPJF baseline): most urgent level first, FCFS within a level.

The level is ``Request.urgency`` (0 = most urgent), or the vLLM priority when no urgency is attached. A waiting
request never displaces running work; under KV pressure the least urgent, latest arrival is preempted.
"""

from __future__ import annotations

from typing import ClassVar

from semsched.core.policy import Policy, SortKey
from semsched.core.request import Request
from semsched.policies.registry import register_policy
from semsched.policies.semantic import urgency_level


@register_policy
class HPJF(Policy):
    """Most urgent level first, FCFS within a level; non-preemptive.

    starvation: possible for less urgent levels under sustained more urgent load (no aging).
    """

    name: ClassVar[str] = "hpjf"
    stable_between_events: ClassVar[bool] = True
    static_victim_key: ClassVar[bool] = True

    def waiting_key(self, request: Request, now_s: float) -> SortKey:
        return (urgency_level(request), request.arrival_time_s)

    def victim_key(self, request: Request) -> SortKey:
        return (urgency_level(request), request.arrival_time_s)
