"""The gateway's replicas as one fleet, through :mod:`semsched.gateway.shared` (Redis, or this process alone).

:class:`Fleet` gives the request path what only the whole fleet knows:

* **In-flight caps over every replica.** A request takes a lease of its weight (its ``n``) on its tier
  (``tier:PREMIUM``, when ``admission.max_inflight`` gives the tier a cap) before it is routed, and one on its
  backend (``backend:vllm-0``, under ``backends[].max_inflight``) once the dispatcher chose it; both checks are
  atomic in Redis, so the caps hold for the fleet, not per replica. A request over its tier's cap waits for a slot
  of its tier (woken when this replica frees one, and at every sync for the other replicas'), bounded by the
  tier's queue bound (``admission.max_queued``, 429) and ``admission.queue_timeout_s`` (503), then goes on to the
  dispatcher's priority queue. A backend whose lease is refused (another replica took its last slot) counts as
  full until the next sync: the request goes to another backend or waits in the priority queue. Every lease is
  released when its request ends, however it ends (:meth:`release`); a replica that dies leaves leases that
  expire after ``shared_state.lease_ttl_s``. Limits are read from the gateway's configuration at each take.
* **Load books.** Every ``sync_interval_s`` each backend's ``remote_load`` and ``remote_requests`` become the
  fleet's leases there minus this replica's: routers see the fleet's in-flight (:class:`BackendView`), and the
  priority queue is pumped for the slots other replicas freed.
* **Prefix-affinity entries.** With ``routing.router: prefix-affinity`` each prefix this replica routes is
  published on the ``prefix`` channel (its block hashes and the backend's name) and the other replicas' are
  stored in this replica's table, so a conversation follows its cached prefix whichever replica it reaches.
* **The SLO guard's observations.** Each TTFT/TPOT the guard records is published on the ``slo`` channel; the
  other replicas' are recorded in this replica's guard as they arrive, so every replica sheds on the fleet's
  quantile.

Without Redis (none configured, or unreachable) the same calls use this replica's own state: the caps hold for
this replica, the books and the guard are its own. ``semsched_gateway_shared_state_up`` and ``/health``'s
``shared_state`` say which.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from semsched.core.request import Request
from semsched.gateway.admission import Admission
from semsched.gateway.backends import Backend, BackendPool
from semsched.gateway.config import GatewayConfig
from semsched.gateway.dispatch import Dispatcher, DispatchRefused
from semsched.gateway.metrics import GatewayMetrics
from semsched.gateway.shared import LocalSharedState
from semsched.policies.slo_guard import Metric
from semsched.sim.prefix_router import PrefixTable

log = logging.getLogger("semsched.gateway")

#: the broadcast channel of the SLO guard's observations: ``{"p": priority, "m": "ttft"|"tpot", "v": seconds}``
OBSERVATIONS = "slo"
#: the broadcast channel of the prefix-affinity router's entries: ``{"h": [block hashes], "b": backend name}``
PREFIXES = "prefix"


class Fleet:
    """This replica's part in the fleet: caps, load books and the guard's observations (module docstring).
    ``config`` returns the gateway's configuration in force (read at each check: it may be reloaded)."""

    def __init__(self, shared: LocalSharedState, config: Callable[[], GatewayConfig], pool: BackendPool,
                 dispatcher: Dispatcher, admission: Admission, metrics: GatewayMetrics,
                 now: Callable[[], float]) -> None:
        self.shared, self.config, self.pool, self.dispatcher = shared, config, pool, dispatcher
        self.admission, self.metrics, self.now = admission, metrics, now
        self.waiting: Counter[str] = Counter()  # sequences waiting for a slot of their tier's cap, by tier
        self.on_sync: list[Callable[[], Awaitable[None]]] = []  # run after each sync (quotas' streamed tokens)
        self._held: dict[str, list[str]] = {}  # request id -> keys of its leases
        self._freed: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def shared_mode(self) -> bool:
        """Whether replicas share state (a Redis is configured, reachable or not)."""
        return self.shared.mode != "local"

    def status(self) -> dict[str, Any]:
        return self.shared.status()

    # ---- lifecycle -------------------------------------------------------------------------------------------
    async def start(self) -> None:
        self._freed = asyncio.Event()
        self.shared.on_change = self._changed
        await self.shared.start()
        self.metrics.shared_state_up.set(int(self.shared.connected))
        if not self.shared.connected:
            self.metrics.shared_state_fallbacks.inc()
        if self.shared_mode:
            self.admission.monitor.on_record = self._publish
            self.shared.subscribe(OBSERVATIONS, self._observed)
            table = getattr(self.dispatcher.router, "table", None)
            if isinstance(table, PrefixTable):
                table.on_record = self._publish_prefix
                self.shared.subscribe(PREFIXES, self._prefix_of_another)
        self._task = asyncio.create_task(self._loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.sync_hooks()
        await self.shared.stop()

    def _changed(self, up: bool) -> None:
        self.metrics.shared_state_up.set(int(up))
        if not up:
            self.metrics.shared_state_fallbacks.inc()

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.shared.config.sync_interval_s)
            try:
                await self.sync()
            except Exception:  # a bug here must not stop the fleet's books for good
                log.exception("shared state: sync failed")

    async def sync(self) -> None:
        """Exchange with the other replicas, refresh the load books, wake whoever waits for a slot."""
        await self.shared.sync()
        await self.sync_hooks()
        if self.shared_mode:
            await self._refresh_loads()
            self._wake()
            self.dispatcher.pump()

    async def sync_hooks(self) -> None:
        for hook in self.on_sync:
            await hook()

    async def _refresh_loads(self) -> None:
        backends = self.pool.backends
        loads = await self.shared.loads([_backend_key(b) for b in backends])
        for backend in backends:
            total, count = loads.get(_backend_key(backend), (0, 0))
            backend.remote_load = max(0, total - backend.load)
            backend.remote_requests = max(0, count - len(backend.inflight))

    # ---- caps ------------------------------------------------------------------------------------------------
    def _member(self, request: Request) -> str:
        return f"{self.shared.replica_id}:{request.request_id}"

    def tier_limit(self, tier: str) -> int | None:
        admission = self.config().admission
        for name, limit in admission.max_inflight.items():
            if name.lower() == tier.lower():
                return limit
        return admission.default_max_inflight

    def _queue_bound(self, tier: str) -> int:
        admission = self.config().admission
        for name, limit in admission.max_queued.items():
            if name.lower() == tier.lower():
                return limit
        return admission.default_max_queued

    async def take_tier(self, request: Request, tier: str, weight: int) -> None:
        """A slot of ``tier``'s in-flight cap for ``request`` (now, or after a wait); nothing without a cap.
        Raises :class:`DispatchRefused` (429 queue full, 503 no slot within ``queue_timeout_s``)."""
        limit = self.tier_limit(tier)
        if limit is None:
            return
        key, member = f"tier:{tier}", self._member(request)
        timeout_s = self.config().admission.queue_timeout_s
        deadline_s = self.now() + timeout_s
        waiting = False
        try:
            while True:
                freed = self._freed or asyncio.Event()
                taken = await self.shared.take(key, member, weight, limit)
                if taken.ok:
                    self._held.setdefault(request.request_id, []).append(key)
                    return
                if not waiting:
                    bound = self._queue_bound(tier)
                    queued = self.dispatcher.queued[tier] + self.waiting[tier]
                    if queued + weight > bound:
                        raise DispatchRefused(429, "queue_full", f"queue full: {queued} {tier} sequences wait, "
                                                                 f"its limit {bound} (this request: {weight})")
                    waiting = True
                    self.waiting[tier] += weight
                remaining_s = deadline_s - self.now()
                if remaining_s <= 0:
                    raise DispatchRefused(503, "queue_timeout", f"no slot under admission.max_inflight for {tier} "
                                                                f"({limit} sequences in flight over the fleet) "
                                                                f"within admission.queue_timeout_s "
                                                                f"({timeout_s:g} s)")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(freed.wait(), min(remaining_s, self.shared.config.sync_interval_s))
        finally:
            if waiting:
                self.waiting[tier] -= weight

    async def take_backend(self, backend: Backend, request: Request, weight: int) -> bool:
        """A lease on ``backend`` (the dispatcher gave it ``request``) under its ``max_inflight`` over the fleet;
        False when another replica took the last slot (``backend`` then counts as full until the next sync).
        Always True without shared state: the dispatcher's own count is the whole fleet's."""
        if not self.shared_mode:
            return True
        key = _backend_key(backend)
        taken = await self.shared.take(key, self._member(request), weight, backend.config.max_inflight)
        if taken.ok:
            self._held.setdefault(request.request_id, []).append(key)
            backend.remote_load = max(0, taken.total - backend.load)
            return True
        backend.remote_load = max(0, taken.total - (backend.load - weight))
        return False

    def release(self, request: Request, backend: Backend | None = None) -> None:
        """Release ``request``'s leases (only its lease on ``backend`` when given); waiters are woken."""
        keys = self._held.get(request.request_id)
        if not keys:
            return
        if backend is None:
            released = self._held.pop(request.request_id)
        else:
            released = [key for key in keys if key == _backend_key(backend)]
            for key in released:
                keys.remove(key)
        member = self._member(request)
        for key in released:
            self.shared.background(self.shared.release(key, member))
        self._wake()

    def held(self) -> int:
        """Leases this replica holds now (0 once every request ended: nothing leaks)."""
        return sum(len(keys) for keys in self._held.values())

    def _wake(self) -> None:
        if self._freed is not None:
            self._freed.set()
            self._freed = asyncio.Event()

    # ---- the guard's observations ----------------------------------------------------------------------------
    def _publish(self, priority: int, metric: Metric, value_s: float) -> None:
        self.shared.publish(OBSERVATIONS, {"p": priority, "m": metric, "v": value_s})

    def _observed(self, item: dict[str, Any]) -> None:
        priority, metric, value_s = item.get("p"), item.get("m"), item.get("v")
        if isinstance(priority, int) and metric in ("ttft", "tpot") and isinstance(value_s, int | float):
            self.admission.monitor.record_remote(priority, metric, float(value_s), self.now())


    # ---- the prefix-affinity router's entries --------------------------------------------------------------
    def _publish_prefix(self, hashes: Sequence[int], instance: int, now_s: float) -> None:
        backends = self.pool.backends
        if 0 <= instance < len(backends):
            self.shared.publish(PREFIXES, {"h": list(hashes), "b": backends[instance].name})

    def _prefix_of_another(self, item: dict[str, Any]) -> None:
        hashes, name = item.get("h"), item.get("b")
        table = getattr(self.dispatcher.router, "table", None)
        if not (isinstance(table, PrefixTable) and isinstance(name, str) and isinstance(hashes, list)
                and all(isinstance(h, int) for h in hashes)):
            return
        # the backend of that name in this replica's pool (its newest: a reload may have replaced it)
        index = next((b.index for b in reversed(self.pool.backends) if b.name == name and not b.retired), None)
        if index is not None:
            table.store(hashes, index, self.now())


def _backend_key(backend: Backend) -> str:
    return f"backend:{backend.name}"
