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
from semsched.core.policy import Policy, PolicyConfig, SchedulerView, SortKey
from semsched.core.request import Request
from semsched.policies.params import check_float, param
from semsched.policies.passes import served_victims, service_then_arrival
from semsched.policies.registry import register_policy


@dataclass(frozen=True)
class LASConfig(PolicyConfig):
    quantum_s: float = param(1.0, "a running request yields to one with at least this much less service")
    preemption: Literal["swap", "recompute"] = param("swap", "how a displaced request gives up the GPU")

    def __post_init__(self) -> None:
        super().__post_init__()
        check_float("quantum_s", self.quantum_s, 0.0, 1e6)


@register_policy
class LAS(Policy):
    """Least attained service first; a request yields to one with at least ``quantum_s`` less service.

    starvation: possible: a request that has been served yields to every fresh arrival once it is ``quantum_s``
    ahead of it, so a long request waits, started or not, while new requests keep arriving.
    """

    name: ClassVar[str] = "las"
    config_cls: ClassVar[type[PolicyConfig]] = LASConfig
    config: LASConfig
    charges_service: ClassVar[bool] = True

    def __init__(self, config: PolicyConfig | None = None) -> None:
        super().__init__(config)
        self._mode = PreemptionMode.SWAP if self.config.preemption == "swap" else PreemptionMode.RECOMPUTE

    def waiting_key(self, request: Request, now_s: float) -> SortKey:
        return (request.service_s, request.arrival_time_s)

    #: (service, arrival), a compiled function: the core sorts its running requests by this key every step
    victim_key = staticmethod(service_then_arrival)

    def victims_for(
        self, candidate: Request, running: Sequence[Request], view: SchedulerView, now_s: float
    ) -> Sequence[Request]:
        return served_victims(candidate, running, self.config.quantum_s)  # (compiled)

    def preemption_mode(self, request: Request, view: SchedulerView) -> PreemptionMode:
        return self._mode  # (the core recomputes what the CPU pool cannot hold)
