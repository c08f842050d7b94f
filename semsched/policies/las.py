"""Least attained service (LAS, seed 004's baseline): the request served least so far runs first, preemptively.

Service is engine time (:mod:`semsched.policies.attained`: the steps a request took part in, its speculation and
verification rounds included). A waiting request displaces a running one that has attained at least
``quantum_s`` more service than it (0: any more at all, the textbook rule, which switches after every round
between requests of equal service); a displaced request's KV is swapped out and back (``preemption=swap``), a
cost that grows with its KV, charged by the latency model. Ties in service go to the earlier arrival.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, Literal

from semsched.core.plan import PreemptionMode
from semsched.core.policy import PolicyConfig, SchedulerView, SortKey
from semsched.core.request import Request
from semsched.policies.attained import ATTAINED, ServicePolicy
from semsched.policies.params import check_float, param
from semsched.policies.registry import register_policy


@dataclass(frozen=True)
class LASConfig(PolicyConfig):
    quantum_s: float = param(1.0, "a running request yields to one with at least this much less service")
    preemption: Literal["swap", "recompute"] = param("swap", "how a displaced request gives up the GPU")

    def __post_init__(self) -> None:
        super().__post_init__()
        check_float("quantum_s", self.quantum_s, 0.0, 1e6)


@register_policy
class LAS(ServicePolicy):
    """Least attained service first; a request yields to one with at least ``quantum_s`` less service.

    starvation: possible: a request that has been served yields to every fresh arrival once it is ``quantum_s``
    ahead of it, so a long request waits, started or not, while new requests keep arriving.
    """

    name: ClassVar[str] = "las"
    config_cls: ClassVar[type[PolicyConfig]] = LASConfig
    config: LASConfig

    def __init__(self, config: PolicyConfig | None = None) -> None:
        super().__init__(config)
        self._mode = PreemptionMode.SWAP if self.config.preemption == "swap" else PreemptionMode.RECOMPUTE

    def on_tokens(self, request: Request, num_tokens: int, now_s: float) -> None:
        # (LAS reads only the attained service: no rounds counted; the meter's charge, its one-step path inline)
        meter = self.meter
        single_s = meter.single_s
        if single_s is not None and now_s == meter.end_s:
            meter.closed = True
            state = request.policy_state
            state[ATTAINED] = state.get(ATTAINED, 0.0) + single_s
            return
        meter.charge(request, now_s)

    def waiting_key(self, request: Request, now_s: float) -> SortKey:
        return (request.policy_state.get(ATTAINED, 0.0), request.arrival_time_s)  # (attained_s, inlined)

    def victim_key(self, request: Request) -> SortKey:
        # (attained_s, inlined: the core sorts its running requests by this key every step)
        return (request.policy_state.get(ATTAINED, 0.0), request.arrival_time_s)

    def victims_for(
        self, candidate: Request, running: Sequence[Request], view: SchedulerView, now_s: float
    ) -> Sequence[Request]:
        mine = candidate.policy_state.get(ATTAINED, 0.0)
        limit = mine + self.config.quantum_s
        # each victim decorated with its victim_key and its place, so the sort is by the key alone and keeps
        # the running order among equal keys (what a stable sort by victim_key, descending, gives)
        served: list[tuple[float, float, int, Request]] = []
        for request in running:
            attained = request.policy_state.get(ATTAINED, 0.0)
            if attained >= limit and attained > mine:
                served.append((attained, request.arrival_time_s, -len(served), request))
        served.sort(reverse=True)
        return [entry[3] for entry in served]

    def preemption_mode(self, request: Request, view: SchedulerView) -> PreemptionMode:
        return self._mode  # (the core recomputes what the CPU pool cannot hold)
