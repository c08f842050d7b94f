"""Strict priority as in vLLM's ``--scheduling-policy priority``.

Waiting order is (priority, arrival) with lower priority values first; under KV pressure the running request
with the worst (priority, arrival) is preempted. Like vLLM, a waiting request never displaces running work
(vLLM issue #40004); see ``priority-preempt`` for the variant that does.
"""

from __future__ import annotations

from typing import ClassVar

from semsched.core.policy import Policy, SortKey
from semsched.core.request import Request
from semsched.policies.registry import register_policy


@register_policy
class StrictPriority(Policy):
    """Strict priority: (priority, arrival) order; a waiting request never displaces running work.

    starvation: possible for low priorities under sustained higher-priority load (no aging).
    """

    name: ClassVar[str] = "priority"
    stable_between_events: ClassVar[bool] = True
    static_victim_key: ClassVar[bool] = True

    def waiting_key(self, request: Request, now_s: float) -> SortKey:
        return (request.priority, request.arrival_time_s)

    def victim_key(self, request: Request) -> SortKey:
        return (request.priority, request.arrival_time_s)
