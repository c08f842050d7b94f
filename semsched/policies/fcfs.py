"""FCFS: vLLM's default. Arrival order; under KV pressure the latest arrival is preempted (recompute)."""

from __future__ import annotations

from typing import ClassVar

from semsched.core.policy import Policy
from semsched.policies.registry import register_policy


@register_policy
class FCFS(Policy):
    """First come, first served; never preempts running work for waiting work.

    starvation: none: requests start in arrival order (a preempted request keeps its place in the queue).
    """

    name: ClassVar[str] = "fcfs"
    stable_between_events: ClassVar[bool] = True
    static_victim_key: ClassVar[bool] = True
