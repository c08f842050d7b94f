"""What a simulation records for monitoring (seed 003, §7.3): preemptions, queue depth and swap space in use.

The :class:`Monitor` belongs to one :meth:`Simulation.run <semsched.sim.engine.Simulation.run>` and fills a
:class:`MonitorLog`, returned in :class:`~semsched.sim.engine.SimResult`; :mod:`semsched.metrics.series` turns
it, with the requests, into per-minute series. What is recorded, and why it is the same in both simulator modes:

* **every preemption** (time, instance, mode, reason, the victim's priority and tier), from each plan's
  ``preempted`` list. Only plans that are not pure decode preempt, and those are formed identically with and
  without fast-forward.
* **the waiting queue per priority and the CPU (swap) blocks in use, summed over instances, on a fixed grid**
  ``t = k * sample_interval_s``: the value at ``t`` is the state after every event at or before ``t``. Both
  quantities change only at events (an arrival, a step's schedule or update), so the state is a step function
  of time, and it is the same function in both modes: the steps a fast-forwarded stretch skips change neither
  (no arrival falls inside a stretch, nobody is admitted, preempted, swapped or finished before its last step).
  The simulator checks the grid once per event (one comparison) and samples only when an event is the first
  after one or more grid points: the state then is the state since the previous event. The queue is thus exact
  at the grid points, not in between (a burst that comes and goes between two points is not seen). Consecutive
  grid points with the same state are one :class:`QueueSample` (``num_points`` of them), so an idle hour, or a
  step that ends very late, costs one entry, not one per point. The counts
  per priority are kept up to date as requests enter the queue (an accepted arrival, a preemption) and leave it
  (admitted into a plan's prefill or swap-in), so a sample costs O(priorities), not O(waiting requests), which
  matters under overload; a sample whose total differs from the schedulers' (a waiting request aborted) recounts
  the queues from the schedulers.
* **swap peaks**: the CPU blocks in use after every plan that moved KV to or from swap. Swap use grows only in
  such plans, so the grid samples plus these give the exact maximum over any interval that starts on the grid.

Tokens served per tier are not recorded here: every request keeps its token emission times.
"""

from __future__ import annotations

import math
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from mypy_extensions import mypyc_attr

from semsched.core.plan import BatchPlan, PreemptionMode, PreemptionReason
from semsched.core.request import Request, RequestState
from semsched.core.scheduler import Scheduler

DEFAULT_SAMPLE_INTERVAL_S = 1.0


# The records are named tuples: immutable, picklable, and built in a third of a frozen dataclass's time (a run
# under a preemptive policy makes one per preemption, several per request).
class PreemptionRecord(NamedTuple):
    """One preemption (or drop, ``mode`` DROP) as the plan formed at ``time_s`` on ``instance`` made it."""

    time_s: float
    instance: int
    request_id: str
    priority: int
    tier: str
    mode: PreemptionMode
    reason: PreemptionReason


class QueueSample(NamedTuple):
    """The cluster's state at ``num_points`` consecutive grid points, the first at ``time_s``: waiting requests
    per priority (priorities with none waiting are absent) and CPU (swap) blocks in use, summed over instances."""

    time_s: float
    waiting_by_priority: Mapping[int, int]
    swap_blocks_used: int
    num_points: int = 1


class SwapLevel(NamedTuple):
    """CPU (swap) blocks in use in the cluster right after a plan formed at ``time_s`` moved KV to or from swap."""

    time_s: float
    swap_blocks_used: int


@mypyc_attr(native_class=False)
@dataclass
class MonitorLog:
    """Everything one run recorded for monitoring (see the module docstring for what each list means).

    ``num_swap_blocks`` is the cluster's swap space (0: none); ``end_time_s`` the run's last event time.
    """

    sample_interval_s: float
    num_swap_blocks: int = 0
    preemptions: list[PreemptionRecord] = field(default_factory=list)
    queue_samples: list[QueueSample] = field(default_factory=list)
    swap_levels: list[SwapLevel] = field(default_factory=list)
    end_time_s: float = 0.0


class Monitor:
    """Records a :class:`MonitorLog` while a simulation drives ``schedulers`` (one per instance).

    The simulation calls :meth:`enqueued` for each accepted arrival, :meth:`record_plan` after each schedule
    whose plan preempts, prefills or swaps in, :meth:`sample_before` before each event whose time is past
    :attr:`next_sample_s`, then :meth:`finish` at the end.
    """

    def __init__(self, schedulers: Sequence[Scheduler], sample_interval_s: float = DEFAULT_SAMPLE_INTERVAL_S):
        if not (math.isfinite(sample_interval_s) and sample_interval_s > 0):
            raise ValueError(f"sample_interval_s: must be a finite number > 0 (got {sample_interval_s!r})")
        self._schedulers = list(schedulers)
        self._next_index = 0
        self._waiting: dict[str, int] = {}  # request id -> priority of every waiting request in the cluster
        self._waiting_counts: Counter[int] = Counter()
        self.next_sample_s = 0.0
        self.log = MonitorLog(
            sample_interval_s=sample_interval_s,
            num_swap_blocks=sum(s.config.num_cpu_blocks for s in self._schedulers),
        )

    def enqueued(self, request: Request) -> None:
        """``request`` joined a waiting queue (accepted on arrival, or preempted)."""
        if request.request_id not in self._waiting:
            self._waiting[request.request_id] = request.priority
            self._waiting_counts[request.priority] += 1

    def record_plan(self, instance: int, plan: BatchPlan, now_s: float) -> None:
        """A plan formed at ``now_s`` on ``instance``: its preemptions, the requests it admitted from the waiting
        queue and its swap traffic (needed only for plans that preempt, prefill or swap in)."""
        if plan.preempted:
            self._record_preemptions(instance, plan, now_s)
        waiting = self._waiting
        if waiting:  # a request in the plan that was waiting and now runs has left the queue (one admitted and
            # displaced again within the plan is not running: it still waits)
            running = RequestState.RUNNING
            for chunk in plan.prefill:
                if chunk.request.request_id in waiting and chunk.request.state is running:
                    self._admitted(chunk.request)
            for request in plan.swapped_in:
                if request.request_id in waiting and request.state is running:
                    self._admitted(request)
        if plan.swap_out_tokens or plan.swapped_in:
            self.log.swap_levels.append(SwapLevel(now_s, self._swap_blocks_used()))

    def _record_preemptions(self, instance: int, plan: BatchPlan, now_s: float) -> None:
        for preemption in plan.preempted:
            victim = preemption.request
            self.log.preemptions.append(
                PreemptionRecord(
                    now_s, instance, victim.request_id, victim.priority, victim.tier, preemption.mode,
                    preemption.reason,
                )
            )
            if preemption.mode is not PreemptionMode.DROP:
                self.enqueued(victim)

    def _admitted(self, request: Request) -> None:
        self._waiting_counts[self._waiting.pop(request.request_id)] -= 1

    def sample_before(self, now_s: float) -> float:
        """Sample every grid point before ``now_s`` not sampled yet, with the current state (the state since the
        previous event), and return the next grid point."""
        interval = self.log.sample_interval_s
        end_index = self._first_index_from(now_s)
        if end_index > self._next_index:
            waiting, swap_used = self._waiting_by_priority(), self._swap_blocks_used()
            samples, count = self.log.queue_samples, end_index - self._next_index
            last = samples[-1] if samples else None
            if last is not None and (last.waiting_by_priority, last.swap_blocks_used) == (waiting, swap_used):
                samples[-1] = QueueSample(last.time_s, waiting, swap_used, last.num_points + count)
            else:
                samples.append(QueueSample(self._next_index * interval, waiting, swap_used, count))
            self._next_index = end_index
        self.next_sample_s = self._next_index * interval
        return self.next_sample_s

    def _first_index_from(self, time_s: float) -> int:
        """The first grid index ``k`` whose point ``k * sample_interval_s`` is at or after ``time_s``."""
        interval = self.log.sample_interval_s
        index = max(math.ceil(min(time_s / interval, sys.float_info.max)), 0)
        # the division rounds by at most one unit in the last place: one step corrects it (where the points
        # are so far apart in time that floats cannot tell k from k - 1, no step is taken)
        if index > 0 and (index - 1) * interval >= time_s:
            index -= 1
        elif index * interval < time_s:
            index += 1
        return index

    def finish(self, end_time_s: float) -> MonitorLog:
        """Sample the grid points up to and including ``end_time_s`` and close the log."""
        self.sample_before(math.nextafter(end_time_s, math.inf))
        self.log.end_time_s = end_time_s
        return self.log

    def _waiting_by_priority(self) -> dict[int, int]:
        if len(self._waiting) != sum(s.num_waiting for s in self._schedulers):
            self._recount()
        return {p: n for p, n in sorted(self._waiting_counts.items()) if n}

    def _recount(self) -> None:
        """Rebuild the waiting counts from the schedulers' queues (after a waiting request left unseen)."""
        self._waiting = {r.request_id: r.priority for s in self._schedulers for r in s.waiting_requests()}
        self._waiting_counts = Counter(self._waiting.values())

    def _swap_blocks_used(self) -> int:
        if not self.log.num_swap_blocks:
            return 0
        return sum(s.config.num_cpu_blocks - s.num_free_cpu_blocks for s in self._schedulers)
