"""State shared by the gateway's replicas: leases, windowed counters and a broadcast of small items.

One replica keeps everything in its own process (:class:`LocalSharedState`, the default: no Redis). Replicas
given ``shared_state.redis_url`` share it through Redis (:class:`RedisSharedState`, ``redis.asyncio``). Three
primitives, each generic (the gateway's uses are in :mod:`semsched.gateway.fleet` and
:mod:`semsched.gateway.quotas`):

* **Leases** (:meth:`~LocalSharedState.take`, :meth:`~LocalSharedState.release`,
  :meth:`~LocalSharedState.loads`): a *key* (``backend:vllm-0``, ``tier:PREMIUM``) holds leases, each a *member*
  (``replica:request``) with a *weight*. ``take`` adds one only if the key's total weight stays within a limit (a
  lease heavier than the limit is taken when the key holds nothing), atomically across replicas: a Lua script
  drops the expired leases (a sorted set scored by expiry, Redis's own clock), sums the weights (a hash) and
  compares. A replica renews its live leases every ``lease_ttl_s / 3``: those of a replica that died expire after
  ``lease_ttl_s``.
* **Windowed counters** (:meth:`~LocalSharedState.check_and_charge`, :meth:`~LocalSharedState.charge`): a
  counter's window opens at its first charge and lasts ``window_s`` (Redis ``PEXPIRE``); ``check_and_charge``
  charges several counters only if none is over its limit, atomically, and says which one refused and when its
  window ends.
* **Broadcast** (:meth:`~LocalSharedState.publish`, :meth:`~LocalSharedState.subscribe`): ``publish(channel,
  item)`` queues a JSON-able dict for the other replicas; every ``sync_interval_s`` :meth:`sync` appends the queue
  to the channel's Redis stream (``XADD ... MAXLEN ~`` :data:`STREAM_MAXLEN`) and reads the items the other
  replicas added since the last read (``XREAD`` from this replica's last id), handing each to the channel's
  callbacks. A replica never gets its own items; items published while Redis is unreachable are dropped (they
  were used locally). Locally there is no other replica: nothing is ever delivered.

**Redis unreachable.** An operation that fails or takes longer than ``op_timeout_s`` marks Redis unreachable
(``on_change(False)``, :meth:`status`) and the replica goes on with its local state: leases counted in this
process against the same limits, counters kept here. Every ``reconnect_interval_s`` :meth:`sync` tries again;
once Redis answers the replica re-joins (``on_change(True)``): its live leases are registered again (a restarted
Redis lost them), the leases it released meanwhile are released there, and reading the streams resumes. No
request waits on an unreachable Redis longer than ``op_timeout_s`` once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
import socket
import time
import uuid
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any

from semsched.gateway.config import SharedStateConfig

log = logging.getLogger("semsched.gateway")

Callback = Callable[[dict[str, Any]], None]
#: items kept per broadcast channel in Redis (approximately: ``MAXLEN ~``)
STREAM_MAXLEN = 10_000
#: items read per channel and sync at most
READ_COUNT = 1000


@dataclass(frozen=True)
class Taken:
    """What :meth:`LocalSharedState.take` did: ``ok``, and the key's total weight (with the new lease when taken,
    without it when refused)."""

    ok: bool
    total: int


@dataclass(frozen=True)
class Charge:
    """One counter of :meth:`LocalSharedState.check_and_charge`: add ``amount`` unless it is over ``limit``."""

    key: str
    amount: int
    limit: int | None


@dataclass(frozen=True)
class Verdict:
    """What :meth:`LocalSharedState.check_and_charge` did: ``ok`` (every counter charged), else the index of the
    first counter over its limit, what it had used and the seconds until its window ends."""

    ok: bool
    refused: int = -1
    used: int = 0
    retry_after_s: float = 0.0


def over(used: int, amount: int, limit: int | None) -> bool:
    """Whether a counter at ``used`` refuses ``amount`` more: it is spent, or would pass ``limit`` (a first charge
    of a window always passes, so that no single charge is refused forever)."""
    return limit is not None and (used >= limit or (used > 0 and used + amount > limit))


def default_replica_id() -> str:
    """``host-pid`` and a short random suffix (two gateways in one process, as in the tests, stay distinct)."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class LocalSharedState:
    """Everything in this process: one replica, or a replica that lost Redis. ``now`` is a monotonic clock."""

    mode = "local"

    def __init__(self, config: SharedStateConfig, *, now: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self.replica_id = config.replica_id or default_replica_id()
        self.now = now
        self.on_change: Callable[[bool], None] | None = None
        self._leases: dict[str, dict[str, int]] = {}
        self._windows: dict[str, tuple[int, float]] = {}  # key -> (used, window end)
        self._subscribers: dict[str, list[Callback]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()

    @property
    def connected(self) -> bool:
        return True

    async def start(self) -> None:
        """Connect (nothing to do locally)."""

    async def stop(self) -> None:
        """Wait for the background operations still running (:meth:`background`)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def background(self, operation: Coroutine[Any, Any, Any]) -> None:
        """Run ``operation`` without waiting for it (a release at a request's end); :meth:`stop` waits for it."""
        task = asyncio.ensure_future(operation)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def status(self) -> dict[str, Any]:
        """What ``/health`` shows: the mode, whether Redis is reachable (always locally), the last error."""
        return {"mode": self.mode, "connected": True, "error": None, "replica": self.replica_id}

    # ---- leases ----------------------------------------------------------------------------------------------
    async def take(self, key: str, member: str, weight: int, limit: int | None) -> Taken:
        """A lease of ``weight`` on ``key`` for ``member`` if the key's total stays within ``limit`` (None: no
        limit; a lease heavier than the limit is taken when the key holds nothing). Taking a member again
        replaces its lease."""
        return self._take_here(key, member, weight, limit)

    def _take_here(self, key: str, member: str, weight: int, limit: int | None) -> Taken:
        leases = self._leases.setdefault(key, {})
        total = sum(leases.values()) - leases.get(member, 0)
        if limit is not None and total > 0 and total + weight > limit:
            return Taken(False, total)
        leases[member] = weight
        return Taken(True, total + weight)

    async def release(self, key: str, member: str) -> None:
        """Drop ``member``'s lease on ``key`` (nothing if it holds none)."""
        self._release_here(key, member)

    def _release_here(self, key: str, member: str) -> None:
        leases = self._leases.get(key)
        if leases is not None:
            leases.pop(member, None)
            if not leases:
                del self._leases[key]

    async def loads(self, keys: Sequence[str]) -> dict[str, tuple[int, int]]:
        """Each key's total weight and number of leases, over every replica."""
        return {key: (sum(self._leases.get(key, {}).values()), len(self._leases.get(key, {}))) for key in keys}

    # ---- windowed counters -----------------------------------------------------------------------------------
    async def check_and_charge(self, charges: Sequence[Charge], window_s: float) -> Verdict:
        """Charge every counter of ``charges`` unless one is :func:`over` its limit (then none is charged). A
        counter's window opens at its first charge and lasts ``window_s``."""
        return self._check_here(charges, window_s)

    def _check_here(self, charges: Sequence[Charge], window_s: float) -> Verdict:
        now = self.now()
        for index, charge in enumerate(charges):
            used, end = self._window(charge.key, now)
            if over(used, charge.amount, charge.limit):
                return Verdict(False, index, used, max(end - now, 0.0))
        for charge in charges:
            self._charge_here(charge.key, charge.amount, window_s)
        return Verdict(True)

    async def charge(self, key: str, amount: int, window_s: float) -> None:
        """Add ``amount`` to the counter ``key`` (its window opens now if none is open)."""
        self._charge_here(key, amount, window_s)

    def _charge_here(self, key: str, amount: int, window_s: float) -> None:
        now = self.now()
        used, end = self._window(key, now)  # an expired window is dropped: a new one opens now
        self._windows[key] = (used + amount, end if key in self._windows else now + window_s)

    def _window(self, key: str, now: float) -> tuple[int, float]:
        found = self._windows.get(key)
        if found is None or found[1] <= now:
            self._windows.pop(key, None)
            return 0, math.inf
        return found

    # ---- broadcast -------------------------------------------------------------------------------------------
    def publish(self, channel: str, item: dict[str, Any]) -> None:
        """Send ``item`` (JSON-able) to the other replicas' callbacks of ``channel`` (locally: there are none)."""

    def subscribe(self, channel: str, callback: Callback) -> None:
        """Call ``callback(item)`` for every item another replica publishes on ``channel`` (from now on)."""
        self._subscribers.setdefault(channel, []).append(callback)

    async def sync(self) -> None:
        """Exchange with the other replicas (the gateway calls it every ``sync_interval_s``; locally nothing)."""


# ---- Redis ------------------------------------------------------------------------------------------------------
# KEYS: the leases' expiry set, their weight hash. ARGV: member, weight, limit (-1: none), ttl in ms.
_TAKE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
for _, m in ipairs(expired) do redis.call('HDEL', KEYS[2], m) end
local total = 0
for _, w in ipairs(redis.call('HVALS', KEYS[2])) do total = total + tonumber(w) end
local mine = redis.call('HGET', KEYS[2], ARGV[1])
if mine then total = total - tonumber(mine) end
local weight, limit = tonumber(ARGV[2]), tonumber(ARGV[3])
if limit >= 0 and total > 0 and total + weight > limit then return {0, total} end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[4]), ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], weight)
return {1, total + weight}
"""
# KEYS: pairs (expiry set, weight hash). Returns, per pair, the total weight and the number of leases.
_LOADS = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {}
for i = 1, #KEYS, 2 do
  local expired = redis.call('ZRANGEBYSCORE', KEYS[i], '-inf', now)
  redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now)
  for _, m in ipairs(expired) do redis.call('HDEL', KEYS[i + 1], m) end
  local total, count = 0, 0
  for _, w in ipairs(redis.call('HVALS', KEYS[i + 1])) do total = total + tonumber(w); count = count + 1 end
  out[#out + 1] = total
  out[#out + 1] = count
end
return out
"""
# KEYS: expiry set, weight hash. ARGV: ttl in ms, "rejoin" or "renew", then member, weight pairs. "renew" gives
# the members still there a fresh expiry (one released meanwhile is not brought back); "rejoin" registers them all
# again, whatever the limit (Redis lost them; their requests are running).
_RENEW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local rejoin = ARGV[2] == 'rejoin'
for i = 3, #ARGV, 2 do
  if rejoin or redis.call('ZSCORE', KEYS[1], ARGV[i]) then
    redis.call('ZADD', KEYS[1], now + tonumber(ARGV[1]), ARGV[i])
    redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1])
  end
end
return #ARGV
"""
# KEYS: counters. ARGV: window in ms, then amount, limit (-1: none) per counter. Returns {ok, index, used, ttl ms}.
_CHECK = """
for i, key in ipairs(KEYS) do
  local used = tonumber(redis.call('GET', key) or '0')
  local amount, limit = tonumber(ARGV[2 * i]), tonumber(ARGV[2 * i + 1])
  if limit >= 0 and (used >= limit or (used > 0 and used + amount > limit)) then
    return {0, i - 1, used, redis.call('PTTL', key)}
  end
end
for i, key in ipairs(KEYS) do
  redis.call('INCRBY', key, tonumber(ARGV[2 * i]))
  if redis.call('PTTL', key) < 0 then redis.call('PEXPIRE', key, ARGV[1]) end
end
return {1, -1, 0, 0}
"""


class _Unreachable(Exception):
    """Redis did not answer (the replica goes on with its local state)."""


class RedisSharedState(LocalSharedState):
    """Shared through Redis; the inherited local state is the fallback while Redis is unreachable, and the
    record of this replica's own leases (renewed, and registered again on re-joining)."""

    mode = "redis"

    def __init__(self, config: SharedStateConfig, *, now: Callable[[], float] = time.monotonic) -> None:
        super().__init__(config, now=now)
        assert config.redis_url is not None
        self._client: Any = None
        self._connected = False
        self.error: str | None = "not connected yet"
        self.fallbacks = 0  # times this replica lost Redis and went on with its local state
        self._orphans: set[tuple[str, str]] = set()  # leases released while Redis was unreachable
        self._outbox: list[tuple[str, str]] = []  # (channel, JSON item) not sent yet
        self._last_ids: dict[str, str] = {}
        self._retry_at = -math.inf
        self._renewed_at = -math.inf
        self._scripts: dict[str, Any] = {}

    @property
    def connected(self) -> bool:
        return self._connected

    def _key(self, name: str) -> str:
        return f"{self.config.key_prefix}:{name}"

    def status(self) -> dict[str, Any]:
        return {"mode": self.mode, "connected": self._connected, "error": self.error, "replica": self.replica_id,
                "fallbacks": self.fallbacks}

    async def start(self) -> None:
        from redis.asyncio import Redis
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff

        config = self.config
        self._client = Redis.from_url(config.redis_url or "", socket_timeout=config.op_timeout_s,
                                      socket_connect_timeout=config.connect_timeout_s, retry=Retry(NoBackoff(), 0),
                                      decode_responses=True)
        self._scripts = {name: self._client.register_script(text) for name, text in
                         (("take", _TAKE), ("loads", _LOADS), ("renew", _RENEW), ("check", _CHECK))}
        await self._reconnect()
        if not self._connected:
            self.fallbacks += 1
            log.warning("shared state: Redis at %s unreachable (%s); serving on this replica's own state until "
                        "it answers", _safe_url(config.redis_url or ""), self.error)

    async def stop(self) -> None:
        await super().stop()
        if self._client is not None:
            with contextlib.suppress(Exception):
                await self._client.aclose()

    async def _call(self, operation: Coroutine[Any, Any, Any]) -> Any:
        """One Redis operation within ``op_timeout_s``; a failure marks Redis unreachable."""
        try:
            return await asyncio.wait_for(operation, self.config.op_timeout_s)
        except asyncio.CancelledError:
            raise
        except Exception as error:  # redis' errors, OSError, TimeoutError: all mean "not now"
            self._lost(f"{type(error).__name__}: {error}" if str(error) else type(error).__name__)
            raise _Unreachable() from None

    def _lost(self, error: str) -> None:
        self.error = error
        self._retry_at = self.now() + self.config.reconnect_interval_s
        if self._connected:
            self._connected = False
            self.fallbacks += 1
            log.warning("shared state: lost Redis (%s); serving on this replica's own state", error)
            if self.on_change is not None:
                self.on_change(False)

    async def _reconnect(self) -> None:
        """Ping Redis; once it answers, re-join: live leases registered again, orphans released."""
        try:
            await self._call(self._client.ping())
            self._connected = True  # _call marks it unreachable again if what follows fails
            await self._renew(rejoin=True)
            for key, member in list(self._orphans):
                await self._release_there(key, member)
                self._orphans.discard((key, member))
        except _Unreachable:
            return
        self.error = None
        log.log(logging.WARNING if self.fallbacks else logging.INFO, "shared state: Redis at %s reachable; this "
                "replica shares its state", _safe_url(self.config.redis_url or ""))
        if self.on_change is not None:
            self.on_change(True)

    # ---- leases ----------------------------------------------------------------------------------------------
    async def take(self, key: str, member: str, weight: int, limit: int | None) -> Taken:
        if self._connected:
            try:
                ok, total = await self._call(self._scripts["take"](
                    keys=[self._key(f"lease:{key}"), self._key(f"weight:{key}")],
                    args=[member, weight, -1 if limit is None else limit, int(self.config.lease_ttl_s * 1000)]))
            except _Unreachable:
                pass
            except asyncio.CancelledError:  # the script may have run: the lease is not left behind
                self.background(self.release(key, member))
                raise
            else:
                if ok:
                    self._leases.setdefault(key, {})[member] = weight
                return Taken(bool(ok), int(total))
        return self._take_here(key, member, weight, limit)

    async def release(self, key: str, member: str) -> None:
        self._release_here(key, member)
        if not self._connected:
            self._orphans.add((key, member))
            return
        with contextlib.suppress(_Unreachable):
            await self._release_there(key, member)
            return
        self._orphans.add((key, member))

    async def _release_there(self, key: str, member: str) -> None:
        async with self._client.pipeline(transaction=True) as pipe:
            pipe.zrem(self._key(f"lease:{key}"), member).hdel(self._key(f"weight:{key}"), member)
            await self._call(pipe.execute())

    async def loads(self, keys: Sequence[str]) -> dict[str, tuple[int, int]]:
        if self._connected and keys:
            names = [name for key in keys for name in (self._key(f"lease:{key}"), self._key(f"weight:{key}"))]
            with contextlib.suppress(_Unreachable):
                out = await self._call(self._scripts["loads"](keys=names))
                return {key: (int(out[2 * i]), int(out[2 * i + 1])) for i, key in enumerate(keys)}
        return await super().loads(keys)

    async def _renew(self, *, rejoin: bool = False) -> None:
        """This replica's live leases given a fresh expiry; ``rejoin``: registered again whatever Redis holds (a
        restarted Redis lost them)."""
        ttl_ms = int(self.config.lease_ttl_s * 1000)
        for key, leases in list(self._leases.items()):
            if leases:
                args: list[Any] = [ttl_ms, "rejoin" if rejoin else "renew"]
                for member, weight in leases.items():
                    args += [member, weight]
                await self._call(self._scripts["renew"](
                    keys=[self._key(f"lease:{key}"), self._key(f"weight:{key}")], args=args))
        self._renewed_at = self.now()

    # ---- windowed counters -----------------------------------------------------------------------------------
    async def check_and_charge(self, charges: Sequence[Charge], window_s: float) -> Verdict:
        if self._connected:
            args: list[Any] = [int(window_s * 1000)]
            for charge in charges:
                args += [charge.amount, -1 if charge.limit is None else charge.limit]
            with contextlib.suppress(_Unreachable):
                ok, index, used, ttl_ms = await self._call(self._scripts["check"](
                    keys=[self._key(f"count:{c.key}") for c in charges], args=args))
                if ok:
                    return Verdict(True)
                return Verdict(False, int(index), int(used), max(int(ttl_ms), 0) / 1000)
        return self._check_here(charges, window_s)

    async def charge(self, key: str, amount: int, window_s: float) -> None:
        if self._connected:
            with contextlib.suppress(_Unreachable):
                async with self._client.pipeline(transaction=True) as pipe:
                    name = self._key(f"count:{key}")
                    pipe.incrby(name, amount).pexpire(name, int(window_s * 1000), nx=True)
                    await self._call(pipe.execute())
                return
        self._charge_here(key, amount, window_s)

    # ---- broadcast -------------------------------------------------------------------------------------------
    def publish(self, channel: str, item: dict[str, Any]) -> None:
        if self._connected and len(self._outbox) < STREAM_MAXLEN:
            self._outbox.append((channel, json.dumps(item)))

    async def sync(self) -> None:
        """Push the queued items, read the other replicas', renew leases every ``lease_ttl_s / 3``; without
        Redis, try to reach it again every ``reconnect_interval_s``."""
        if not self._connected:
            if self.now() >= self._retry_at:
                await self._reconnect()
            if not self._connected:
                self._outbox.clear()
                return
        with contextlib.suppress(_Unreachable):
            await self._push()
            await self._pull()
            if self.now() - self._renewed_at >= self.config.lease_ttl_s / 3:
                await self._renew()

    async def _push(self) -> None:
        outbox, self._outbox = self._outbox, []
        if not outbox:
            return
        async with self._client.pipeline(transaction=False) as pipe:
            for channel, item in outbox:
                pipe.xadd(self._key(f"stream:{channel}"), {"r": self.replica_id, "d": item}, maxlen=STREAM_MAXLEN,
                          approximate=True)
            await self._call(pipe.execute())

    async def _pull(self) -> None:
        if not self._subscribers:
            return
        for channel in self._subscribers:
            if channel not in self._last_ids:  # from now on: the stream's last id when first read
                last = await self._call(self._client.xrevrange(self._key(f"stream:{channel}"), count=1))
                self._last_ids[channel] = last[0][0] if last else "0-0"
        streams = {self._key(f"stream:{channel}"): self._last_ids[channel] for channel in self._subscribers}
        answer = await self._call(self._client.xread(streams, count=READ_COUNT))
        prefix = len(self._key("stream:"))
        for stream, entries in answer or []:
            channel = stream[prefix:]
            for entry_id, fields in entries:
                self._last_ids[channel] = entry_id
                if fields.get("r") == self.replica_id:
                    continue
                try:
                    item = json.loads(fields.get("d", "null"))
                except ValueError:
                    continue
                if isinstance(item, dict):
                    for callback in self._subscribers.get(channel, ()):
                        callback(item)


def make_shared_state(config: SharedStateConfig, *, now: Callable[[], float] = time.monotonic
                      ) -> LocalSharedState:
    """Redis-backed when ``config.redis_url`` is set, else this process's own."""
    if config.redis_url is None:
        return LocalSharedState(config, now=now)
    return RedisSharedState(config, now=now)


def _safe_url(url: str) -> str:
    """``url`` without its password, for the logs."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    return parts._replace(netloc=parts.netloc.split("@")[-1]).geturl() if parts.password else url
