"""Prefix-cache-aware routing (issue 32): ``prefix-affinity`` sends a request to the instance that served its
prompt's prefix recently, where that prefix's KV blocks are likely still cached, unless that instance is loaded
beyond its share.

The router keys prefixes by the request's ``prefix_hashes`` (chained block hashes, :mod:`semsched.core.prefix`;
in the gateway, hashes of the prompt text in fixed-size chunks). Its memory is a :class:`PrefixTable`: per block
hash, the instance that last got a request with that block and when, bounded in size (least recently recorded
entries go first) and in age (``ttl_s``). The table has a two-method interface, :meth:`PrefixTable.lookup` and
:meth:`PrefixTable.record`, so that gateway replicas can share one (a Redis hash per block, or each replica's
records published and applied to the others' tables) without the router changing.

Rule, at each arrival: the longest recorded prefix names an instance (the one that got its deepest block). If at
least ``min_match_blocks`` blocks match and that instance's unfinished requests are at most
``max(max_imbalance x the least-loaded instance's, the least-loaded instance's + slack_requests)``, it gets the
request; otherwise (no match, or the instance is over its share) the least-outstanding instance does. Either way
the chosen instance is recorded for every block of the request, so a prefix follows the instance that last took
it (the cache the fallback instance now builds).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar

from semsched.core.request import Request
from semsched.sim.router import InstanceView, RouterError, register_router


@dataclass(frozen=True)
class PrefixAffinityConfig:
    """``prefix-affinity``'s parameters (``prefix-affinity:max_imbalance=2;slack_requests=4``)."""

    #: the matched instance may hold up to this many times the least-loaded instance's unfinished requests
    max_imbalance: float = 1.5
    #: ... or this many more, whichever is larger (so a near-idle cluster still follows prefixes)
    slack_requests: int = 4
    #: fewer matched blocks than this is no match (one shared block saves little)
    min_match_blocks: int = 1
    #: the table's size bound, in block hashes (least recently recorded dropped first)
    max_entries: int = 200_000
    #: an entry older than this (seconds since it was recorded) is no match
    ttl_s: float = 600.0

    def __post_init__(self) -> None:
        if not math.isfinite(self.max_imbalance) or self.max_imbalance < 1.0:
            raise RouterError(f"max_imbalance: must be a finite number >= 1 (got {self.max_imbalance!r})")
        for name, least in (("slack_requests", 0), ("min_match_blocks", 1), ("max_entries", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise RouterError(f"{name}: must be an integer >= {least} (got {value!r})")
        if not self.ttl_s > 0:
            raise RouterError(f"ttl_s: must be > 0 (got {self.ttl_s!r})")


class PrefixTable:
    """Which instance got each block hash last, and when: at most ``max_entries`` entries, none older than
    ``ttl_s`` counted. Costs what a request's hashes hold, never a walk over the table."""

    def __init__(self, max_entries: int, ttl_s: float) -> None:
        self.max_entries = max_entries
        self.ttl_s = ttl_s
        self._entries: OrderedDict[int, tuple[int, float]] = OrderedDict()
        #: called after each :meth:`record` (not :meth:`store`): how a gateway replica tells the others
        self.on_record: Callable[[Sequence[int], int, float], None] | None = None

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, hashes: Sequence[int], now_s: float) -> tuple[int | None, int]:
        """(the instance that got the deepest block of ``hashes``' longest recorded prefix, how many blocks that
        prefix has); ``(None, 0)`` when even the first block is unknown or stale."""
        entries, oldest_s = self._entries, now_s - self.ttl_s
        instance: int | None = None
        matched = 0
        for key in hashes:
            entry = entries.get(key)
            if entry is None or entry[1] < oldest_s:
                break
            instance, matched = entry[0], matched + 1
        return instance, matched

    def record(self, hashes: Sequence[int], instance: int, now_s: float) -> None:
        """``instance`` got a request with ``hashes`` at ``now_s`` (:meth:`store`, then ``on_record``)."""
        self.store(hashes, instance, now_s)
        if self.on_record is not None:
            self.on_record(hashes, instance, now_s)

    def store(self, hashes: Sequence[int], instance: int, now_s: float) -> None:
        """Enter ``hashes`` as ``instance``'s at ``now_s``, without telling anyone (another replica's entries).
        The deepest block is stored first, so the first blocks are the most recent and a prefix is dropped from
        its end, never from its start."""
        entries = self._entries
        for key in reversed(hashes):
            entries[key] = (instance, now_s)
            entries.move_to_end(key)
        while len(entries) > self.max_entries:
            entries.popitem(last=False)


@register_router
class PrefixAffinityRouter:
    """The instance that served the request's prefix recently, bounded by load; else least-outstanding.

    Counts its decisions: ``affinity`` (followed a prefix), ``overloaded`` (a prefix matched, its instance was
    over its share), ``unmatched`` (no prefix known, or the request has no hashes)."""

    name: ClassVar[str] = "prefix-affinity"
    config_class: ClassVar[type[PrefixAffinityConfig]] = PrefixAffinityConfig

    def __init__(self, config: PrefixAffinityConfig | None = None) -> None:
        self.config = config or PrefixAffinityConfig()
        self.table = PrefixTable(self.config.max_entries, self.config.ttl_s)
        self.decisions = {"affinity": 0, "overloaded": 0, "unmatched": 0}

    def route(self, request: Request, instances: Sequence[InstanceView], now_s: float) -> int:
        loads = [view.num_unfinished for view in instances]
        least = min(range(len(loads)), key=loads.__getitem__)
        hashes = request.prefix_hashes
        if not hashes:
            self.decisions["unmatched"] += 1
            return least
        choice = self._affine(hashes, loads, least, now_s)
        self.table.record(hashes, choice, now_s)
        return choice

    def _affine(self, hashes: Sequence[int], loads: list[int], least: int, now_s: float) -> int:
        config = self.config
        instance, matched = self.table.lookup(hashes, now_s)
        if instance is None or matched < config.min_match_blocks or instance >= len(loads):
            self.decisions["unmatched"] += 1
            return least
        bound = max(config.max_imbalance * loads[least], loads[least] + config.slack_requests)
        if loads[instance] > bound:
            self.decisions["overloaded"] += 1
            return least
        self.decisions["affinity"] += 1
        return instance

    def record_dispatch(self, request: Request, instance: int, now_s: float) -> None:
        """The gateway used ``instance`` instead of the one chosen (it was full): the prefix is recorded there."""
        if request.prefix_hashes:
            self.table.record(request.prefix_hashes, instance, now_s)

    def on_finish(self, request: Request, instance: InstanceView, now_s: float) -> None:
        """Nothing to settle: the table is updated at routing time (the gateway calls this before
        :meth:`record_dispatch` when it moves a request's books)."""
