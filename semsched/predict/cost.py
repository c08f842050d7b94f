"""The cost of predicting (issue 15; seed 000 §5, Tables 1-2: "full batching vs immediate processing").

Before a semantic scheduler can order a request, a predictor (urgency and output length; a small model) must
process it. :class:`PredictorCost` models that predictor as ``workers`` identical workers (default one) that run
batches of at most ``batch_size`` requests, oldest first. A batch costs ``latency_s`` whatever its size (the
seed's "predictor latency": one forward pass of the small model over the batch), and every request in it is
ready when the batch ends. The simulator hands a request to the scheduler at that ready time
(``Request.ready_time_s``); its latency metrics still count from its arrival.

Two ways to start a batch (``mode``), both on a free worker:

* ``immediate``: as soon as a request is queued, take up to ``batch_size`` of the queued requests;
* ``full``: wait until ``batch_size`` requests are queued; a partial batch starts when ``max_wait_s`` has passed
  since its oldest request arrived, and without ``max_wait_s`` only at the last arrival of the stream (so nothing
  is left waiting for requests that never come).

Specs share the policy syntax (:mod:`semsched.core.specs`), the mode as the name:
``immediate:latency_s=0.01;batch_size=64`` or ``full:latency_s=0.1;batch_size=16;max_wait_s=2``.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from semsched.core.errors import SemschedError
from semsched.core.request import Request
from semsched.core.specs import SpecSyntax

PredictorMode = Literal["immediate", "full"]
MODES: tuple[PredictorMode, ...] = ("immediate", "full")
MAX_SECONDS = 3600.0
"""Upper limit of ``latency_s`` and ``max_wait_s``."""
MAX_COUNT = 2**31 - 1
"""Upper limit of ``batch_size`` and ``workers``."""
EXAMPLE_SPEC = "immediate:latency_s=0.01;batch_size=64"


class PredictorCostError(SemschedError):
    """A predictor cost setting or spec is invalid; the message names the field and its limits."""


@dataclass(frozen=True)
class PredictorBatch:
    """One predictor batch: when it starts and ends (its requests' ready time), and which requests it holds
    (indices into the arrival times given, oldest first)."""

    start_s: float
    ready_s: float
    requests: tuple[int, ...]


@dataclass(frozen=True)
class PredictorCost:
    """A predictor in front of the scheduler: ``latency_s`` per batch of at most ``batch_size`` requests, batches
    started as ``mode`` says (module docstring), on ``workers`` workers. Deterministic: the same arrival times
    always give the same ready times."""

    latency_s: float
    batch_size: int
    mode: PredictorMode
    max_wait_s: float | None = None
    workers: int = 1

    def __post_init__(self) -> None:
        if not _is_number(self.latency_s) or not 0.0 <= self.latency_s <= MAX_SECONDS:
            raise PredictorCostError(
                f"latency_s: must be a number from 0 to {MAX_SECONDS:g} s (got {self.latency_s!r})"
            )
        for name in ("batch_size", "workers"):
            value = getattr(self, name)
            if not _is_integer(value) or not 1 <= value <= MAX_COUNT:
                raise PredictorCostError(f"{name}: must be an integer from 1 to {MAX_COUNT} (got {value!r})")
        if self.mode not in MODES:
            raise PredictorCostError(f"mode: must be one of {', '.join(MODES)} (got {self.mode!r})")
        if self.max_wait_s is not None:
            if not _is_number(self.max_wait_s) or not 0.0 <= self.max_wait_s <= MAX_SECONDS:
                raise PredictorCostError(
                    f"max_wait_s: must be a number from 0 to {MAX_SECONDS:g} s, or unset (got {self.max_wait_s!r})"
                )
            if self.mode != "full":
                raise PredictorCostError("max_wait_s: only mode 'full' waits for a batch to fill; leave it unset")

    @property
    def spec(self) -> str:
        """The spec that gives this setting back through :func:`parse_predictor_cost`."""
        params = [f"latency_s={self.latency_s!r}", f"batch_size={self.batch_size}"]
        if self.max_wait_s is not None:
            params.append(f"max_wait_s={self.max_wait_s!r}")
        if self.workers != 1:
            params.append(f"workers={self.workers}")
        return f"{self.mode}:{';'.join(params)}"

    def ready_times(self, arrival_times_s: npt.ArrayLike) -> npt.NDArray[np.float64]:
        """When each request's prediction is ready (>= its arrival), in the order given; arrivals may be in any
        order (ties are batched in the order given). O(n) for sorted arrivals."""
        arrivals, order = _sorted_arrivals(arrival_times_s)
        starts_s, stops = self._plan(arrivals.tolist())
        sizes = np.diff(np.asarray([0, *stops], dtype=np.int64))
        ready = np.empty(arrivals.size, dtype=np.float64)
        ready[order] = np.repeat(np.asarray(starts_s, dtype=np.float64) + self.latency_s, sizes)
        return ready

    def batches(self, arrival_times_s: npt.ArrayLike) -> list[PredictorBatch]:
        """Every batch the predictor runs, in start order (for inspection and tests)."""
        arrivals, order = _sorted_arrivals(arrival_times_s)
        starts_s, stops = self._plan(arrivals.tolist())
        firsts = [0, *stops][:-1]
        return [
            PredictorBatch(start_s, start_s + self.latency_s, tuple(int(i) for i in order[first:stop]))
            for start_s, first, stop in zip(starts_s, firsts, stops, strict=True)
        ]

    def apply(self, requests: Sequence[Request]) -> None:
        """Set each request's ``ready_time_s`` from its ``arrival_time_s`` (a value already there is replaced)."""
        ready = self.ready_times([r.arrival_time_s for r in requests])
        for request, ready_s in zip(requests, ready.tolist(), strict=True):
            request.ready_time_s = ready_s

    # ---- the worker loop ---------------------------------------------------------------------------------
    def _plan(self, arrivals: list[float]) -> tuple[list[float], list[int]]:
        """Start time and end index (exclusive) of each batch over sorted ``arrivals``.

        Batch starts never decrease and every batch takes ``latency_s``, so batch k runs on the worker that ran
        batch k - ``workers``: the end times of the last ``workers`` batches, a FIFO, say when a worker is free."""
        starts_s: list[float] = []
        stops: list[int] = []
        busy_until_s: deque[float] = deque()
        first = queued = 0  # the oldest request not yet in a batch; how many have arrived by the current start
        while first < len(arrivals):
            free_s = busy_until_s.popleft() if len(busy_until_s) == self.workers else -math.inf
            start_s = max(free_s, self._trigger_s(arrivals, first))
            while queued < len(arrivals) and arrivals[queued] <= start_s:
                queued += 1
            first = min(first + self.batch_size, queued)
            starts_s.append(start_s)
            stops.append(first)
            busy_until_s.append(start_s + self.latency_s)
        return starts_s, stops

    def _trigger_s(self, arrivals: list[float], first: int) -> float:
        """When the batch whose oldest request is ``arrivals[first]`` may start, given a free worker."""
        if self.mode == "immediate":
            return arrivals[first]
        filled_s = arrivals[min(first + self.batch_size, len(arrivals)) - 1]  # full, or the stream's last arrival
        if self.max_wait_s is not None:
            filled_s = min(filled_s, arrivals[first] + self.max_wait_s)
        return filled_s


_SYNTAX = SpecSyntax("predictor", PredictorCostError)
_REQUIRED = ("latency_s", "batch_size")
_OPTIONAL = ("max_wait_s", "workers")


def parse_predictor_cost(spec: str) -> PredictorCost:
    """A :class:`PredictorCost` from ``mode:key=value;key=value``, the mode as the name (e.g.
    ``immediate:latency_s=0.01;batch_size=64``); a bad spec is a :class:`PredictorCostError` naming the
    parameter."""
    mode, params = _SYNTAX.parse(spec)
    if mode not in MODES:
        raise PredictorCostError(
            f"predictor spec {spec!r}: unknown mode {mode!r} (known: {', '.join(MODES)}; e.g. {EXAMPLE_SPEC})"
        )
    if "mode" in params:
        raise PredictorCostError(
            f"predictor {mode!r}: the mode is the spec's name, not a parameter (e.g. {EXAMPLE_SPEC})"
        )
    unknown = [key for key in params if key not in _REQUIRED + _OPTIONAL]
    if unknown:
        raise PredictorCostError(
            f"predictor {mode!r}: unknown parameter {unknown[0]!r} (known: {', '.join(_REQUIRED + _OPTIONAL)})"
        )
    missing = [key for key in _REQUIRED if key not in params]
    if missing:
        raise PredictorCostError(f"predictor {mode!r}: give {' and '.join(missing)} (e.g. {EXAMPLE_SPEC})")
    return _SYNTAX.config(PredictorCost, {**params, "mode": mode}, name=mode)


def _sorted_arrivals(arrival_times_s: npt.ArrayLike) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.intp]]:
    """The arrival times sorted (stable), and the order that sorts them; refuses non-finite times."""
    arrivals = np.asarray(arrival_times_s, dtype=np.float64)
    if arrivals.ndim != 1:
        raise PredictorCostError(f"arrival_times_s: must be one-dimensional (got shape {arrivals.shape})")
    if not np.isfinite(arrivals).all():
        bad = int(np.flatnonzero(~np.isfinite(arrivals))[0])
        raise PredictorCostError(f"arrival_times_s[{bad}]: must be finite (got {arrivals[bad]!r})")
    order = np.argsort(arrivals, kind="stable")
    return arrivals[order], order


def _is_number(value: object) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        return False
    return math.isfinite(float(value))


def _is_integer(value: object) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool)
