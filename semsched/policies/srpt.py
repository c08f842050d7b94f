"""Shortest remaining processing time, preemptive, on oracle or predicted remaining output.

A waiting request displaces running requests whose remaining output is longer than its own. Remaining work
only shrinks while a request runs, so decisions change only at arrivals, finishes and preemptions
(``stable_between_events``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from semsched.core.policy import Policy, PolicyConfig, SchedulerView, SortKey
from semsched.core.request import Request
from semsched.policies.registry import register_policy
from semsched.policies.sjf import LengthConfig, expected_remaining


@register_policy
class SRPT(Policy):
    name: ClassVar[str] = "srpt"
    config_cls: ClassVar[type[PolicyConfig]] = LengthConfig
    stable_between_events: ClassVar[bool] = True
    config: LengthConfig

    @property
    def uses_predicted_lengths(self) -> bool:
        return self.config.length == "predicted"

    def waiting_key(self, request: Request, now_s: float) -> SortKey:
        return (expected_remaining(request, self.config.length), request.arrival_time_s)

    def victim_key(self, request: Request) -> SortKey:
        return (expected_remaining(request, self.config.length), request.arrival_time_s)

    def victims_for(
        self, candidate: Request, running: Sequence[Request], view: SchedulerView, now_s: float
    ) -> Sequence[Request]:
        mine = expected_remaining(candidate, self.config.length)
        longer = [r for r in running if expected_remaining(r, self.config.length) > mine]
        return sorted(longer, key=self.victim_key, reverse=True)
