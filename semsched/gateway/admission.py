"""Admission control and load shedding per tier, fed by the gateway's own measurements.

:class:`Admission` wraps seed 003's :class:`~semsched.policies.slo_guard.SLOGuard` (the same monitor the
``tiered`` policy uses inside an engine): the gateway reports each request's arrival, its first token (TTFT as
the client sees it, through the gateway) and its finish (TPOT), and asks :meth:`Admission.admit` before a
request is queued or forwarded. A shed tier's requests are answered 429 with Retry-After; the guard's hysteresis
and dwell time keep the level from flapping. Times are the gateway's monotonic clock, in seconds.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from semsched.core.errors import SemschedError
from semsched.core.request import Request
from semsched.core.tiers import TierSpec
from semsched.gateway.config import AdmissionConfig, GatewayConfigError
from semsched.policies.slo_guard import SLOGuard, SLOGuardConfig


def guard_config(config: AdmissionConfig) -> SLOGuardConfig:
    """The :class:`SLOGuardConfig` of ``admission.guard`` (field names checked; values by the guard)."""
    known = {f.name for f in dataclasses.fields(SLOGuardConfig)} - {"shedding", "reject_hopeless"}
    unknown = sorted(set(config.guard) - known)
    if unknown:
        raise GatewayConfigError(f"admission.guard.{unknown[0]}: unknown setting; known: "
                                 f"{', '.join(sorted(known))}")
    values = dict(config.guard)
    if isinstance(values.get("max_waiting"), list):
        values["max_waiting"] = tuple(values["max_waiting"])
    try:
        return SLOGuardConfig(**values, shedding=config.shedding)
    except (SemschedError, TypeError, ValueError) as error:
        raise GatewayConfigError(f"admission.guard: {error}") from None


class Admission:
    """Per-tier shedding for the whole gateway: one guard, every request reported to it."""

    def __init__(self, config: AdmissionConfig, tiers: Sequence[TierSpec]) -> None:
        self.config = config
        self.guard = SLOGuard(guard_config(config), tiers=tiers)

    @property
    def shed_level(self) -> int:
        return self.guard.shed_level

    def admit(self, request: Request, now_s: float) -> str | None:
        """None to accept ``request``, else the reason it is refused (starts with ``shed:`` or ``queue full:``).
        An accepted request must be reported with :meth:`finished` whatever becomes of it."""
        decision = self.guard.admit(request, now_s)
        if not decision.accepted:
            return decision.reason or "rejected"
        self.guard.on_arrival(request, now_s)
        return None

    def first_token(self, request: Request, now_s: float) -> None:
        """``request``'s first token reached the gateway at ``now_s``."""
        request.num_output_tokens = max(request.num_output_tokens, 1)
        self.guard.on_tokens(request, 1, now_s)

    def finished(self, request: Request, output_tokens: int, now_s: float) -> None:
        """``request`` ended at ``now_s`` with ``output_tokens`` tokens (0 when it never got one)."""
        request.num_output_tokens = output_tokens
        self.guard.on_finish(request, now_s)
