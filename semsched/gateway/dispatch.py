"""Which backend gets a request, and the gateway's own priority queue for when none has room.

:class:`Dispatcher` asks the configured router (the simulator's: ``round-robin``, ``least-outstanding``,
``go-routing``, ``min-load``) for a backend among all of them, each seen through a ``BackendView``, and tells it
what a gateway learns (first tokens, finishes). A choice that is out of the pool or full falls
back to the next available backend after it (so round-robin still rotates); a cost-aware router's books are
moved to the backend actually used.

A request weighs its ``n`` (or ``best_of``, the larger): that many sequences count against ``max_inflight``
and the queue bounds. When no backend has room for it (``backends[].max_inflight``), the request waits in a
priority queue: most important tier first, then most urgent, then earliest; each tier's queue is bounded
(``admission.max_queued``: 429 beyond it), and a wait is bounded by ``admission.queue_timeout_s`` (503). A freed
slot goes to the head of the queue at once. With no healthy backend at all the answer is 503 at once: nothing
waits for a pool that is empty.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

from semsched.core.errors import SemschedError
from semsched.core.request import Request
from semsched.gateway.backends import Backend, BackendPool, BackendView
from semsched.gateway.config import AdmissionConfig, GatewayConfigError, RoutingConfig
from semsched.gateway.metrics import GatewayMetrics


class DispatchRefused(Exception):
    """No backend for this request: ``status`` (429 or 503), ``reason`` (a metric label) and a message."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status, self.reason, self.message = status, reason, message


@dataclass(order=True)
class _Waiter:
    key: tuple[int, int, int]
    request: Request = field(compare=False)
    tier: str = field(compare=False)
    weight: int = field(compare=False)
    exclude: frozenset[int] = field(compare=False)
    future: asyncio.Future[Backend] = field(compare=False)


class Dispatcher:
    """Routing and the wait for a backend slot; ``now`` is the gateway's clock (seconds)."""

    def __init__(self, pool: BackendPool, routing: RoutingConfig, admission: AdmissionConfig,
                 metrics: GatewayMetrics, now: Callable[[], float]) -> None:
        from semsched.sim.router import RouterContext, make_router

        self.pool, self.routing, self.admission, self.metrics, self.now = pool, routing, admission, metrics, now
        from semsched.latency.profiles import load_profile

        try:  # loaded whatever the router: a profile that does not load is an error at --check, not later
            latency = load_profile(routing.profile)
        except SemschedError as error:
            raise GatewayConfigError(f"routing.profile: {error}") from None
        try:
            self.router: Any = make_router(routing.router)
            if hasattr(self.router, "bind"):
                self.router.bind(RouterContext(latency=latency))
        except SemschedError as error:
            raise GatewayConfigError(f"routing: {error}") from None
        self.router_name = routing.router.split(":", 1)[0]
        self._heap: list[_Waiter] = []
        self._seq = itertools.count()
        self.queued: Counter[str] = Counter()
        self._limits = {tier.lower(): limit for tier, limit in admission.max_queued.items()}
        self.on_drained: Callable[[Backend], None] | None = None  # a draining backend's last request ended
        self.tracer: Any = None  # an OpenTelemetry tracer: a wait for a slot is a `queue` span

    def configure(self, routing: RoutingConfig, admission: AdmissionConfig) -> None:
        """Take a reloaded configuration's queue bounds and timeouts (the router and its profile stay)."""
        self.routing, self.admission = routing, admission
        self._limits = {tier.lower(): limit for tier, limit in admission.max_queued.items()}

    # ---- choosing --------------------------------------------------------------------------------------------
    def _choose(self, request: Request, exclude: frozenset[int], weight: int) -> tuple[Backend, str] | None:
        backends = self.pool.backends
        eligible = [b for b in backends if b.available(weight) and b.index not in exclude]
        if not eligible:
            return None
        views = cast(Any, self.pool.views())
        choice = self.router.route(request, views, self.now())
        if not 0 <= choice < len(backends):
            choice = 0
        chosen = backends[choice]
        if chosen in eligible:
            return chosen, "retry" if exclude else "chosen"
        after = [b for b in eligible if b.index > choice] or eligible
        fallback = after[0] if not chosen.draining else min(eligible, key=lambda b: (b.load, b.index))
        self._move_books(request, chosen, fallback)
        return fallback, "fallback"

    def _move_books(self, request: Request, chosen: Backend, used: Backend) -> None:
        """A queue-keeping router recorded ``chosen``: move the record to ``used``."""
        record = getattr(self.router, "record_dispatch", None)
        if record is None:
            return
        self.router.on_finish(request, BackendView(chosen), self.now())
        record(request, used.index, self.now())

    def _take(self, backend: Backend, request: Request, how: str, weight: int) -> Backend:
        backend.inflight[request.request_id] = request
        backend.weights[request.request_id] = weight
        backend.load += weight
        backend.dispatched += 1
        self.metrics.child(self.metrics.routed, backend.name, self.router_name, how).inc()
        self.metrics.child(self.metrics.backend_inflight, backend.name).set(len(backend.inflight))
        return backend

    # ---- the public path -------------------------------------------------------------------------------------
    async def acquire(self, request: Request, tier: str, exclude: frozenset[int] = frozenset(), *,
                      weight: int = 1) -> Backend:
        """A backend with room for ``request`` of ``weight`` (taken: call :meth:`release`), now or after a wait.
        Raises :class:`DispatchRefused`."""
        if not any(b.in_pool and b.index not in exclude for b in self.pool.backends):
            raise DispatchRefused(503, "no_backend", "no healthy backend: every server behind the gateway is "
                                                     "out of the pool")
        key = (request.priority, request.urgency if request.urgency is not None else 1 << 30, next(self._seq))
        if not self._heap or self._heap[0].key > key:
            chosen = self._choose(request, exclude, weight)
            if chosen is not None:
                return self._take(chosen[0], request, chosen[1], weight)
        limit = self._limits.get(tier.lower(), self.admission.default_max_queued)
        if self.queued[tier] + weight > limit:
            raise DispatchRefused(429, "queue_full", f"queue full: {self.queued[tier]} {tier} sequences wait "
                                                     f"for a backend, its limit {limit} (this request: {weight})")
        future: asyncio.Future[Backend] = asyncio.get_running_loop().create_future()
        waiter = _Waiter(key, request, tier, weight, exclude, future)
        heapq.heappush(self._heap, waiter)
        self._count(tier, +weight)
        span = self.tracer.start_span("queue", attributes={"semsched.tier": tier}) if self.tracer else None
        try:
            return await asyncio.wait_for(asyncio.shield(future), self.admission.queue_timeout_s)
        except TimeoutError:
            if _granted(future):
                return future.result()  # granted as the wait ran out
            raise DispatchRefused(503, "queue_timeout", f"no backend slot within admission.queue_timeout_s "
                                                        f"({self.admission.queue_timeout_s:g} s)") from None
        except asyncio.CancelledError:
            if _granted(future):
                self.release(future.result(), request)  # granted, but the caller went away meanwhile
            raise
        finally:
            if span is not None:
                span.end()
            if not future.done():
                future.cancel()
            if waiter in self._heap:
                self._heap.remove(waiter)
                heapq.heapify(self._heap)
                self._count(tier, -weight)

    def release(self, backend: Backend, request: Request) -> None:
        """``request`` no longer occupies ``backend``; the freed slot goes to the queue's head."""
        if backend.inflight.pop(request.request_id, None) is not None:
            backend.load -= backend.weights.pop(request.request_id, 1)
        backend.started.discard(request.request_id)
        self.metrics.child(self.metrics.backend_inflight, backend.name).set(len(backend.inflight))
        if backend.draining and not backend.inflight and self.on_drained is not None:
            self.on_drained(backend)
        self.pump()

    def pump(self) -> None:
        """Hand free slots to waiting requests, most important first; fail them all if no backend is healthy."""
        if self._heap and not self.pool.healthy():
            while self._heap:
                waiter = heapq.heappop(self._heap)
                self._count(waiter.tier, -waiter.weight)
                if not waiter.future.done():
                    waiter.future.set_exception(DispatchRefused(503, "no_backend", "no healthy backend"))
            return
        while self._heap:
            head = self._heap[0]
            if head.future.done():
                heapq.heappop(self._heap)
                self._count(head.tier, -head.weight)
                continue
            chosen = self._choose(head.request, head.exclude, head.weight)
            if chosen is None:
                return
            heapq.heappop(self._heap)
            self._count(head.tier, -head.weight)
            head.future.set_result(self._take(chosen[0], head.request, chosen[1], head.weight))

    def _count(self, tier: str, delta: int) -> None:
        self.queued[tier] += delta
        self.metrics.child(self.metrics.queue_depth, tier).set(self.queued[tier])

    # ---- what the gateway learns -----------------------------------------------------------------------------
    def first_token(self, backend: Backend, request: Request) -> None:
        backend.started.add(request.request_id)
        hook = getattr(self.router, "on_first_token", None)
        if hook is not None:
            hook(request, BackendView(backend), self.now())

    def finished(self, backend: Backend, request: Request) -> None:
        hook = getattr(self.router, "on_finish", None)
        if hook is not None:
            hook(request, BackendView(backend), self.now())


def _granted(future: asyncio.Future[Backend]) -> bool:
    return future.done() and not future.cancelled() and future.exception() is None
