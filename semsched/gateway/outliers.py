"""Outlier ejection (``routing.outlier_ejection``; off by default): a backend much slower than the others leaves
the pool for a cool-down.

Each backend keeps the TTFTs of its last ``window`` streamed requests, measured from the attempt's dispatch to
its first token (the wait in the gateway's own queue is not the backend's doing). After each one the backend is
judged: with ``min_requests`` TTFTs of its own, and at least one other backend in the pool with as many, it is
ejected when its p90 is over ``factor`` times the median of the other backends' p90s. (The others' median, not
the whole fleet's: with two backends the slow one would otherwise pull the median halfway to itself.)

An ejected backend takes no new request (its requests in flight finish) for ``cooldown_s``, then rejoins with
an empty window. The last backend in the pool is never ejected, nor more than ``max_ejected_fraction`` of the
backends at once (at least one). Each ejection counts in ``semsched_gateway_outlier_ejections_total{backend}``,
is logged at WARNING, and ``/health`` shows each ejected backend and until when.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from semsched.gateway.backends import Backend
    from semsched.gateway.service import Gateway

log = logging.getLogger("semsched.gateway")


class OutlierEjector:
    """The TTFT windows and the ejection rule of one gateway (reads ``gateway.config`` each time: a reload
    changes the settings)."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        self.windows: dict[int, deque[float]] = {}  # backend index -> its last TTFTs
        self._task: asyncio.Task[None] | None = None

    @property
    def now(self) -> Callable[[], float]:
        return self.gateway.now

    def observe(self, backend: Backend, ttft_s: float) -> None:
        """A first token came from ``backend`` ``ttft_s`` after the attempt was sent; may eject it."""
        settings = self.gateway.config.routing.outlier_ejection
        if not settings.enabled:
            return
        window = self.windows.get(backend.index)
        if window is None or window.maxlen != settings.window:
            window = self.windows[backend.index] = deque(window or (), maxlen=settings.window)
        window.append(ttft_s)
        if backend.in_pool and len(window) >= settings.min_requests:
            self._judge(backend)

    def p90(self, backend: Backend) -> float | None:
        """``backend``'s TTFT p90 over its window, None with fewer than ``min_requests`` TTFTs."""
        window = self.windows.get(backend.index)
        minimum = self.gateway.config.routing.outlier_ejection.min_requests
        if window is None or len(window) < minimum:
            return None
        return float(np.quantile(np.fromiter(window, dtype=float), 0.9))

    def _judge(self, backend: Backend) -> None:
        settings = self.gateway.config.routing.outlier_ejection
        own = self.p90(backend)
        pool = self.gateway.pool
        others = [p for b in pool.healthy() if b is not backend and (p := self.p90(b)) is not None]
        if own is None or not others:
            return
        median = float(np.median(others))
        if own <= settings.factor * median:
            return
        fleet = pool.active()
        ejected = sum(1 for b in fleet if b.ejected_until is not None)
        allowed = max(1, math.floor(settings.max_ejected_fraction * len(fleet)))
        if ejected >= allowed or len(pool.healthy()) <= 1:
            log.info("backend %s is a TTFT outlier (p90 %.3f s, others' median %.3f s) but stays: %d of %d "
                     "backends out by ejection, %d in the pool", backend.name, own, median, ejected, len(fleet),
                     len(pool.healthy()))
            return
        self.eject(backend, own, median)

    def eject(self, backend: Backend, p90_s: float, median_s: float) -> None:
        settings = self.gateway.config.routing.outlier_ejection
        backend.ejected_until = self.now() + settings.cooldown_s
        metrics = self.gateway.metrics
        metrics.child(metrics.outlier_ejections, backend.name).inc()
        log.warning("backend %s ejected for %g s: TTFT p90 %.3f s over the last %d requests is %.1f x the other "
                    "backends' median %.3f s (routing.outlier_ejection.factor %g)", backend.name,
                    settings.cooldown_s, p90_s, len(self.windows[backend.index]), p90_s / max(median_s, 1e-9),
                    median_s, settings.factor)
        self._ensure_timer()

    def release_expired(self) -> None:
        """Backends whose cool-down is over rejoin the pool, their windows emptied."""
        now = self.now()
        rejoined = False
        for backend in self.gateway.pool.backends:
            if backend.ejected_until is not None and now >= backend.ejected_until:
                backend.ejected_until = None
                self.windows.pop(backend.index, None)
                rejoined = True
                log.warning("backend %s is back in the pool after its outlier cool-down", backend.name)
        if rejoined:
            self.gateway.dispatcher.pump()

    def _ensure_timer(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._release_loop())

    async def _release_loop(self) -> None:
        """Sleeps until the next cool-down ends, releases, and stops when nobody is ejected."""
        while True:
            ends = [b.ejected_until for b in self.gateway.pool.backends if b.ejected_until is not None]
            if not ends:
                return
            await asyncio.sleep(max(min(ends) - self.now(), 0.0) + 0.001)
            self.release_expired()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
