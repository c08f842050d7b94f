"""Served-token shares per priority class over a window of engine time, for ``tiered``'s fair share (seed 003 §4).

:class:`ShareMeter` counts the output tokens served to each class in one-second buckets and keeps the last
``window_s`` seconds of them (memory bounded by the window, whatever the traffic). A class is *short* of its
target share when it has been served less than ``target`` of all tokens served in the window; ``tiered`` then
ranks its waiting requests ahead of every class that is not short, so a class with a positive target cannot be
starved by more important traffic (the seed's deficit boost, ``2 x deficit`` on the effective priority, never
lifts BACKGROUND above PREMIUM, so under sustained PREMIUM load it starves anyway).

Tokens are the measure of engine time here: a decode step's time is shared by the tokens it emits. Times are
arguments; nothing here reads a clock.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping

BUCKET_S = 1.0


class ShareMeter:
    """Output tokens served per priority class in the last ``window_s`` seconds (one-second buckets)."""

    def __init__(self, targets: Mapping[int, float], window_s: float) -> None:
        if not math.isfinite(window_s) or window_s < BUCKET_S:
            raise ValueError(f"share_window_s must be a number of seconds >= {BUCKET_S:g}, got {window_s!r}")
        bad = {p: t for p, t in targets.items() if not (math.isfinite(t) and 0.0 <= t <= 1.0)}
        if bad or math.fsum(targets.values()) > 1.0 + 1e-9:
            raise ValueError(f"fair_shares must each be from 0 to 1 and sum to at most 1, got {dict(targets)!r}")
        self.targets = dict(targets)
        self.window_s = window_s
        self._buckets: deque[tuple[int, dict[int, int]]] = deque()  # (bucket index, tokens per priority)
        self._totals: dict[int, int] = {}

    def record(self, priority: int, num_tokens: int, now_s: float) -> None:
        """``num_tokens`` output tokens served to ``priority`` at ``now_s``."""
        index = int(now_s // BUCKET_S)
        if not self._buckets or self._buckets[-1][0] < index:
            self._buckets.append((index, {}))
        counts = self._buckets[-1][1]
        counts[priority] = counts.get(priority, 0) + num_tokens
        self._totals[priority] = self._totals.get(priority, 0) + num_tokens
        self._evict(now_s)

    def shares(self, now_s: float) -> dict[int, float]:
        """Each class's part of the tokens served in the window (empty when none were)."""
        self._evict(now_s)
        total = sum(self._totals.values())
        return {p: n / total for p, n in self._totals.items() if n} if total else {}

    def short(self, now_s: float) -> frozenset[int]:
        """Classes with a positive target served less than it in the window (none while nothing was served:
        then strict priority decides)."""
        shares = self.shares(now_s)
        if not shares:
            return frozenset()
        return frozenset(p for p, target in self.targets.items() if target > 0 and shares.get(p, 0.0) < target)

    def _evict(self, now_s: float) -> None:
        oldest = int((now_s - self.window_s) // BUCKET_S)
        while self._buckets and self._buckets[0][0] <= oldest:
            _, counts = self._buckets.popleft()
            for priority, count in counts.items():
                self._totals[priority] -= count
