"""A machine's speed over time, as a multiplier on every engine time the simulator charges.

A latency profile says what a step costs on the machine as it was while the profile was measured. A shared or
throttled machine does not stay that way: on the 2-core development VM the same vLLM step ran 0.56-1.81x its
profiled time from one minute to the next (``benchmarks/engine_speed_drift.py``). A :class:`SpeedTrace` gives
the simulator that drift: piecewise constant over fixed windows of simulated time, so a replay can be simulated
on the machine as it was while the replay ran (``semsched fidelity`` measures one per real replay).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class SpeedTrace:
    """Engine-time multipliers (``1.2``: everything takes 20 % longer than the profile says) over consecutive
    windows of ``window_s`` seconds from time 0; before the first window the first factor holds, after the
    last the last one."""

    window_s: float
    factors: tuple[float, ...]

    def __post_init__(self) -> None:
        if isinstance(self.window_s, bool) or not (math.isfinite(self.window_s) and self.window_s > 0):
            raise ValueError(f"window_s: must be a finite number of seconds > 0 (got {self.window_s!r})")
        if not self.factors:
            raise ValueError("factors: need at least one window")
        for index, factor in enumerate(self.factors):
            if isinstance(factor, bool) or not (math.isfinite(factor) and factor > 0):
                raise ValueError(f"factors[{index}]: must be a finite number > 0 (got {factor!r})")
        object.__setattr__(self, "factors", tuple(float(f) for f in self.factors))

    def factor_at(self, time_s: float) -> float:
        """The multiplier in force at ``time_s``."""
        index = min(max(int(time_s // self.window_s), 0), len(self.factors) - 1)
        return self.factors[index]

    @classmethod
    def from_windows(cls, window_s: float, factors: Sequence[float | None]) -> SpeedTrace:
        """A trace from per-window factors where ``None`` marks a window nothing measured: it takes the
        factor of the nearest measured window (the earlier one on a tie)."""
        measured = [i for i, f in enumerate(factors) if f is not None]
        if not measured:
            raise ValueError("factors: no window was measured")
        filled = []
        for index, factor in enumerate(factors):
            if factor is None:
                nearest = min(measured, key=lambda m: (abs(m - index), m))
                factor = factors[nearest]
            assert factor is not None
            filled.append(factor)
        return cls(window_s, tuple(filled))

    @property
    def low(self) -> float:
        return min(self.factors)

    @property
    def high(self) -> float:
        return max(self.factors)
