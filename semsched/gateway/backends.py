"""The backends behind the gateway: health, in-flight accounting and polled engine metrics.

A :class:`Backend` keeps what the gateway knows of one server: whether it is in the pool (``healthy``), the
requests the gateway has in flight there (exact: the gateway dispatched them) and how many of those have had no
first token yet, and the last values polled from its ``/metrics`` (vLLM's ``vllm:num_requests_running``,
``vllm:num_requests_waiting``, ``vllm:kv_cache_usage_perc``). :class:`BackendPool` runs the two polling loops.

Routers see backends through :class:`BackendView`, which has the attributes of the simulator's
:class:`~semsched.sim.router.InstanceView`, so the simulator's routers run here unchanged. The counts a view gives
are the larger of the gateway's own accounting (with the other replicas' requests there when they share state,
:mod:`semsched.gateway.fleet`) and the backend's last report: another gateway (or a client that bypasses this one)
may load the same server.

Polls are logged at DEBUG (a line per poll and backend); a backend leaving or rejoining the pool at WARNING.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from semsched.gateway.config import BackendConfig, RoutingConfig

if TYPE_CHECKING:
    from semsched.core.request import Request

log = logging.getLogger("semsched.gateway")

#: vLLM metric names the gateway reads (older servers call the KV usage ``gpu_cache_usage_perc``)
RUNNING_METRIC = "vllm:num_requests_running"
WAITING_METRIC = "vllm:num_requests_waiting"
KV_USAGE_METRICS = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
#: the KV capacity a view reports when it has no better number (free blocks are a fraction of it)
NOMINAL_BLOCKS = 1000


@dataclass
class Backend:
    """One server and what the gateway knows of it."""

    index: int
    config: BackendConfig
    healthy: bool = True  # optimistic until a check fails: a fresh gateway serves at once
    failures: int = 0
    inflight: dict[str, Request] = field(default_factory=dict)
    weights: dict[str, int] = field(default_factory=dict)  # of the in-flight requests: n (or best_of), else 1
    load: int = 0  # their sum: what max_inflight bounds
    started: set[str] = field(default_factory=set)  # in flight and past their first token
    dispatched: int = 0  # requests dispatched here so far (tells whether a request stayed alone here)
    reported_running: int = 0
    reported_waiting: int = 0
    kv_usage: float | None = None
    last_error: str | None = None
    draining: bool = False  # removed by a reload: takes no new request; retired once its last one ends
    retired: bool = False  # drained: no longer polled; its index is never reused (routers keep it)
    ejected_until: float | None = None  # out of the pool until then (gateway clock): a TTFT outlier
    remote_load: int = 0  # weight other gateway replicas have in flight here (shared_state; 0 without Redis)
    remote_requests: int = 0  # and their number of requests

    @property
    def in_pool(self) -> bool:
        """Whether new requests may go here: healthy, not draining, not ejected."""
        return self.healthy and not self.draining and self.ejected_until is None

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def url(self) -> str:
        return self.config.url

    def fits(self, weight: int = 1) -> bool:
        """Whether a request of ``weight`` (its ``n``) fits under ``max_inflight`` now, counting the other
        replicas' load here; one heavier than the cap runs alone."""
        limit = self.config.max_inflight
        load = self.load + self.remote_load
        return limit is None or load == 0 or load + weight <= limit

    def available(self, weight: int = 1) -> bool:
        return self.in_pool and self.fits(weight)

    def mark_failed(self, error: str, threshold: int) -> bool:
        """One failed check or refused connection; True when this takes the backend out of the pool."""
        self.failures += 1
        self.last_error = error
        if self.healthy and self.failures >= threshold:
            self.healthy = False
            return True
        return False

    def mark_ok(self) -> bool:
        """A passed check; True when this brings the backend back into the pool."""
        self.failures = 0
        self.last_error = None
        if not self.healthy:
            self.healthy = True
            return True
        return False

    def read_metrics(self, text: str) -> None:
        """Take the engine's load from a Prometheus text page (sums over the page's label sets)."""
        values: dict[str, float] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if math.isfinite(sample.value):
                    values[sample.name] = values.get(sample.name, 0.0) + sample.value
        self.reported_running = int(values.get(RUNNING_METRIC, 0))
        self.reported_waiting = int(values.get(WAITING_METRIC, 0))
        usage = next((values[name] for name in KV_USAGE_METRICS if name in values), None)
        self.kv_usage = None if usage is None else min(max(usage, 0.0), 1.0)


class BackendView:
    """A read-only view of one backend with :class:`~semsched.sim.router.InstanceView`'s attributes."""

    __slots__ = ("_backend",)

    def __init__(self, backend: Backend) -> None:
        self._backend = backend

    @property
    def index(self) -> int:
        return self._backend.index

    @property
    def role(self) -> str:
        return "mixed"

    @property
    def num_waiting(self) -> int:
        b = self._backend
        if b.draining:  # gone for good: looks full, so that load-reading routers choose it last
            return 1 << 30
        return max(len(b.inflight) - len(b.started), b.reported_waiting)

    @property
    def num_running(self) -> int:
        b = self._backend
        return max(len(b.started), b.reported_running)

    @property
    def num_unfinished(self) -> int:
        b = self._backend
        if b.draining:
            return 1 << 30
        return max(len(b.inflight) + b.remote_requests, b.reported_running + b.reported_waiting)

    @property
    def num_gpu_blocks(self) -> int:
        return NOMINAL_BLOCKS

    @property
    def num_free_gpu_blocks(self) -> int:
        usage = self._backend.kv_usage
        if self._backend.draining:
            return 0
        return NOMINAL_BLOCKS if usage is None else round(NOMINAL_BLOCKS * (1.0 - usage))

    @property
    def block_size(self) -> int:
        return 16

    def running_requests(self) -> tuple[Request, ...]:
        b = self._backend
        return tuple(r for rid, r in b.inflight.items() if rid in b.started)


class BackendPool:
    """The backends and their polling loops (``start``/``stop``); ``on_change(backend, healthy)`` is called when
    a backend leaves or rejoins the pool."""

    def __init__(self, backends: list[BackendConfig], routing: RoutingConfig,
                 on_change: Callable[[Backend, bool], None] | None = None) -> None:
        self.backends = [Backend(i, config) for i, config in enumerate(backends)]
        self.routing = routing
        self.on_change = on_change
        self._tasks: list[asyncio.Task[None]] = []
        self._client: aiohttp.ClientSession | None = None

    def views(self) -> list[BackendView]:
        return [BackendView(b) for b in self.backends]

    def healthy(self) -> list[Backend]:
        """The backends in the pool (healthy, neither draining nor ejected)."""
        return [b for b in self.backends if b.in_pool]

    def active(self) -> list[Backend]:
        """The backends of the configuration in force (not draining): what ``/health`` lists."""
        return [b for b in self.backends if not b.draining]

    def add(self, config: BackendConfig) -> Backend:
        """A new backend at the next index (indices are never reused: routers keep them); healthy until a check
        fails, like the first ones. The caller polls it (:meth:`check`)."""
        backend = Backend(len(self.backends), config)
        self.backends.append(backend)
        return backend

    def report_failure(self, backend: Backend, error: str) -> None:
        """A request could not reach ``backend`` (refused, reset before a response): counts as a failed check."""
        if backend.mark_failed(error, self.routing.unhealthy_after):
            log.warning("backend %s left the pool: %s", backend.name, error)
            if self.on_change:
                self.on_change(backend, False)

    async def start(self) -> None:
        # aiohttp, as the forwarding: httpx would log every poll at INFO
        self._client = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.routing.health_timeout_s))
        await asyncio.gather(*(self.check(b) for b in self.backends))
        self._tasks = [asyncio.create_task(self._every(self.routing.health_interval_s, self.check))]
        if self.routing.poll_metrics:
            self._tasks.append(asyncio.create_task(self._every(self.routing.metrics_interval_s, self.poll)))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._client is not None:
            await self._client.close()

    async def _every(self, interval_s: float, action: Callable[[Backend], Awaitable[None]]) -> None:
        while True:
            await asyncio.sleep(interval_s)
            await asyncio.gather(*(action(b) for b in self.backends if not b.retired))

    async def check(self, backend: Backend) -> None:
        """Poll ``/health``; a 200 counts as healthy, anything else (or no answer) as a failure."""
        assert self._client is not None
        try:
            async with self._client.get(f"{backend.url}/health", headers=_auth(backend)) as response:
                await response.read()
                ok, error = response.status == 200, f"/health answered {response.status}"
        except (aiohttp.ClientError, TimeoutError) as exc:
            ok, error = False, f"/health: {type(exc).__name__}: {exc}"
        log.debug("backend %s: %s", backend.name, "/health ok" if ok else error)
        if ok:
            if backend.mark_ok():
                log.warning("backend %s is back in the pool", backend.name)
                if self.on_change:
                    self.on_change(backend, True)
        else:
            self.report_failure(backend, error)

    async def poll(self, backend: Backend) -> None:
        """Read ``/metrics`` of a healthy backend; a page that cannot be read leaves the last values."""
        if not backend.healthy or self._client is None:
            return
        try:
            async with self._client.get(f"{backend.url}/metrics", headers=_auth(backend)) as response:
                text = await response.text()
                if response.status == 200:
                    backend.read_metrics(text)
                log.debug("backend %s: /metrics answered %d", backend.name, response.status)
        except (aiohttp.ClientError, TimeoutError, ValueError, UnicodeDecodeError) as exc:
            log.debug("backend %s: /metrics: %s: %s", backend.name, type(exc).__name__, exc)


def _auth(backend: Backend) -> dict[str, str]:
    key = backend.config.bearer
    return {"authorization": f"Bearer {key}"} if key else {}
