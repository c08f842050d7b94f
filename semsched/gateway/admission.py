"""Admission control and load shedding per tier, fed by the gateway's own measurements.

:class:`Admission` wraps seed 003's :class:`~semsched.policies.slo_guard.SLOGuard` (the same monitor the
``tiered`` policy uses inside an engine): the gateway reports each request's arrival, its first token (TTFT as
the client sees it, through the gateway) and its finish (TPOT), and asks :meth:`Admission.admit` before a
request is queued or forwarded. A shed tier's requests are answered 429 with Retry-After; the guard's hysteresis
and dwell time keep the level from flapping. Times are the gateway's monotonic clock, in seconds.

What the guard is told, and why:

* **Only what the gateway sees.** A streamed request's first token is its TTFT; a non-streamed answer comes whole,
  so its first token is never seen: such a request gives the guard no TTFT and no TPOT (and its wait is not
  counted as a TTFT lower bound).
* **Only feasible requests are judged.** :class:`IdleFloors` keeps the TTFT and TPOT of requests that had their
  server to themselves (no other request of the gateway in flight there from dispatch to first token, for TTFT;
  from first token to the end, for TPOT). Once a tier has :data:`IDLE_MIN_SAMPLES` of them in the guard's window,
  a metric whose quantile over them is not within the guard's ``shed_headroom`` of the tier's target is
  infeasible: an idle server misses it, so no shedding can make it met, and the guard leaves that tier's
  observations of it out (:data:`~semsched.policies.slo_guard.Feasible`). Without enough of them every request
  is judged.
* **Replicas shed on the fleet's quantile.** Every observation the guard records is handed to
  :attr:`SharedMonitor.on_record` (the gateway publishes it to the other replicas, :mod:`semsched.gateway.fleet`),
  and theirs are recorded with :meth:`SharedMonitor.record_remote`, as they arrive.
* **The level decays when idle.** :meth:`Admission.tick`, called every ``evaluate_every_s`` by the gateway,
  re-judges the level without waiting for an arrival: once the window holds too few observations to judge, the
  level falls one tier per ``hold_s``.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Callable, Sequence

import numpy as np

from semsched.core.errors import SemschedError
from semsched.core.request import Request
from semsched.core.tiers import TierSpec
from semsched.gateway.config import AdmissionConfig, GatewayConfigError
from semsched.policies.slo_guard import Metric, SLOGuard, SLOGuardConfig, SLOMonitor

#: observations of requests alone on their server a tier needs before its targets are judged feasible or not
IDLE_MIN_SAMPLES = 3
#: the most of them kept per tier and metric (the latest)
IDLE_MAX_SAMPLES = 1024


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


class IdleFloors:
    """TTFT and TPOT of requests that had their server to themselves, per tier (priority), over ``window_s`` (the
    last :data:`IDLE_MAX_SAMPLES`): what an idle server gives a tier, so whether its targets can be met at all
    (:meth:`feasible`). A tier's quantile is recomputed at most once per ``evaluate_every_s``: feasibility changes
    slowly, and the quantile of a few thousand values would cost every request a sort."""

    def __init__(self, config: SLOGuardConfig, tiers: Sequence[TierSpec]) -> None:
        self.config = config
        self._targets = {(t.priority, "ttft"): t.ttft_slo_s for t in tiers} | {
            (t.priority, "tpot"): t.tpot_slo_s for t in tiers}
        self._samples: dict[tuple[int, Metric], deque[tuple[float, float]]] = {}
        self._floors: dict[tuple[int, Metric], tuple[float, float | None]] = {}  # (computed at, floor)

    def record(self, priority: int, metric: Metric, value_s: float, now_s: float) -> None:
        samples = self._samples.setdefault((priority, metric), deque(maxlen=IDLE_MAX_SAMPLES))
        samples.append((now_s, value_s))

    def floor_s(self, priority: int, metric: Metric, now_s: float) -> float | None:
        """The guard's quantile of the tier's idle observations in the window; None with too few."""
        key = (priority, metric)
        samples = self._samples.get(key)
        if samples is None:
            return None
        cached = self._floors.get(key)
        if cached is not None and now_s - cached[0] < self.config.evaluate_every_s:
            return cached[1]
        while samples and samples[0][0] < now_s - self.config.window_s:
            samples.popleft()
        floor_s = None if len(samples) < IDLE_MIN_SAMPLES else float(
            np.quantile([v for _, v in samples], self.config.quantile))
        self._floors[key] = (now_s, floor_s)
        return floor_s

    def feasible(self, priority: int, metric: Metric, now_s: float) -> bool:
        """False when an idle server misses the tier's target for ``metric`` (its quantile over the idle
        observations is not within ``shed_headroom`` of the target); True when it meets it or is not known."""
        target_s = self._targets.get((priority, metric))
        floor_s = self.floor_s(priority, metric, now_s)
        if target_s is None or floor_s is None:
            return True
        return floor_s < target_s * (1.0 - self.config.shed_headroom)


class SharedMonitor(SLOMonitor):
    """The guard's monitor, shared with the other replicas: each observation recorded here is handed to
    ``on_record(priority, metric, value_s)``; :meth:`record_remote` records another replica's (not handed on)."""

    def __init__(self, window_s: float, max_samples: int, quantile: float) -> None:
        super().__init__(window_s, max_samples, quantile)
        self.on_record: Callable[[int, Metric, float], None] | None = None

    def record(self, priority: int, metric: Metric, value_s: float, now_s: float) -> None:
        super().record(priority, metric, value_s, now_s)
        if self.on_record is not None:
            self.on_record(priority, metric, value_s)

    def record_remote(self, priority: int, metric: Metric, value_s: float, now_s: float) -> None:
        """Another replica's observation, recorded at ``now_s`` (when it arrived here)."""
        super().record(priority, metric, value_s, now_s)


class Admission:
    """Per-tier shedding for the whole gateway: one guard, every request reported to it; ``now`` is the
    gateway's clock (the guard's feasibility judge reads it)."""

    def __init__(self, config: AdmissionConfig, tiers: Sequence[TierSpec], now: Callable[[], float]) -> None:
        self.config = config
        guard = guard_config(config)
        self.idle = IdleFloors(guard, tiers)
        self._now = now
        self.guard = SLOGuard(guard, tiers=tiers, feasible=self._feasible)
        self.monitor = self.guard.monitor = SharedMonitor(guard.window_s, guard.max_samples, guard.quantile)

    def _feasible(self, request: Request, metric: Metric) -> bool:
        return self.idle.feasible(request.priority, metric, self._now())

    @property
    def shed_level(self) -> int:
        return self.guard.shed_level

    def admit(self, request: Request, now_s: float, *, streamed: bool = True) -> str | None:
        """None to accept ``request``, else the reason it is refused (starts with ``shed:`` or ``queue full:``).
        An accepted request must be reported with :meth:`finished` whatever becomes of it; ``streamed=False``:
        its first token will not be seen."""
        decision = self.guard.admit(request, now_s)
        if not decision.accepted:
            return decision.reason or "rejected"
        self.guard.on_arrival(request, now_s, ttft_reported=streamed)
        return None

    def tick(self, now_s: float) -> None:
        """Re-judge the shed level without an arrival (the gateway calls it every ``evaluate_every_s``)."""
        if self.guard.config.shedding:
            self.guard.evaluate(now_s)

    def first_token(self, request: Request, now_s: float, *, alone: bool = False) -> None:
        """``request``'s first token reached the gateway at ``now_s`` (streams only); ``alone``: no other request
        of the gateway was in flight on its server from its dispatch until now."""
        if alone:
            self.idle.record(request.priority, "ttft", now_s - request.arrival_time_s, now_s)
        request.num_output_tokens = max(request.num_output_tokens, 1)
        self.guard.on_tokens(request, 1, now_s)

    def finished(self, request: Request, output_tokens: int, now_s: float, *, alone_since_s: float | None = None
                 ) -> None:
        """``request`` ended at ``now_s`` with ``output_tokens`` tokens (0 when it never got one);
        ``alone_since_s``: its first token's time, when it ran alone on its server from then to the end."""
        if alone_since_s is not None and output_tokens >= 2:
            self.idle.record(request.priority, "tpot", (now_s - alone_since_s) / (output_tokens - 1), now_s)
        request.num_output_tokens = output_tokens
        self.guard.on_finish(request, now_s)
