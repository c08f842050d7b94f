"""Discrete-event simulation of one or more vLLM-style engine instances driving the scheduling core.

Events are step completions (one per busy instance, in a heap ordered by time then sequence number) merged
with the time-sorted arrival stream; an arrival at the same instant as a step completion is handled first,
so it joins the next step, as in a real engine loop. Each step's duration comes from a latency model; an
instance's :class:`~semsched.latency.EngineOverheads` add engine time outside that model: ``arrival_s`` (the
engine's request intake) delays the step after each accepted arrival, ``idle_wakeup_s`` too when the arrival
finds the instance idle (an engine loop that slept meets cold caches), and ``new_shape_s`` is added to the first
step of every batch size (total scheduled tokens) the instance has not run before (an engine that builds a
kernel per batch shape, as vLLM's CPU backend does). An instance's :class:`~semsched.sim.speed.SpeedTrace`
multiplies all of that engine time by the machine's speed factor at the step's start (a machine that ran slower
or faster at times).

Fast-forward: a decode-only batch that nothing will disturb (no arrival, no finish, no block exhaustion; see
:meth:`Scheduler.steady_decode_steps`) is advanced many steps in one event with the vectorised
``decode_times_s``; the step end times are accumulated left to right exactly as the per-iteration loop adds
them, so both modes produce bit-identical metrics. Instances with a speed trace step one event per step.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from semsched.core.plan import BatchPlan, StepResult
from semsched.core.request import Request, RequestState
from semsched.core.scheduler import Scheduler
from semsched.latency.base import LatencyModel
from semsched.latency.profiles import EngineOverheads
from semsched.sim.router import Router
from semsched.sim.speed import SpeedTrace

ProgressCallback = Callable[[int, int], None]


@dataclass
class Instance:
    """One simulated engine: a scheduler plus the latency model that stands in for its GPU."""

    scheduler: Scheduler
    latency: LatencyModel
    #: engine time outside the latency model (request intake, waking from idle, batch sizes new to the engine);
    #: none by default, set from a profile's ``overheads`` section
    overheads: EngineOverheads = field(default_factory=EngineOverheads)
    #: batch sizes (scheduled tokens per step) this instance has already run: they cost no ``new_shape_s``;
    #: give the sizes a warm-up ran to model an engine that was warmed up before the clock started
    warm_shapes: set[int] = field(default_factory=set)
    #: the machine's speed over time: every engine time above is multiplied by its factor at the step's start;
    #: None: the machine as profiled
    speed: SpeedTrace | None = None
    busy: bool = False
    num_steps: int = 0
    num_events: int = 0
    busy_time_s: float = 0.0
    #: intake time of arrivals since the last step started, charged to the next step
    pending_overhead_s: float = 0.0

    def __post_init__(self) -> None:
        if not isinstance(self.overheads, EngineOverheads):
            raise TypeError(f"overheads: expected EngineOverheads, got {type(self.overheads).__name__}")
        if self.speed is not None and not isinstance(self.speed, SpeedTrace):
            raise TypeError(f"speed: expected SpeedTrace or None, got {type(self.speed).__name__}")
        self.warm_shapes = set(self.warm_shapes)

    def shape_cost_s(self, plan: BatchPlan) -> float:
        """``overheads.new_shape_s`` if ``plan`` is the first step of its batch size on this instance (which it
        marks as run), else 0."""
        cost = self.overheads.new_shape_s
        if not cost or plan.num_tokens in self.warm_shapes:
            return 0.0
        self.warm_shapes.add(plan.num_tokens)
        return cost


@dataclass
class SimResult:
    """Every request (terminal state) plus engine counters."""

    requests: list[Request]
    end_time_s: float
    num_steps: int
    num_events: int
    busy_time_s: list[float] = field(default_factory=list)

    @property
    def finished(self) -> list[Request]:
        return [r for r in self.requests if r.state is RequestState.FINISHED]


class _StepDone(NamedTuple):
    """Heap entry; ordered by (time, sequence number): the sequence is unique, so later fields never compare."""

    time_s: float
    seq: int
    instance: int
    plan: BatchPlan
    end_times_s: np.ndarray | None


class Simulation:
    """Runs a request stream through a cluster of instances behind a router."""

    def __init__(
        self,
        instances: Sequence[Instance],
        router: Router,
        *,
        fast_forward: bool = True,
        max_steady_steps: int = 1_000_000,
        progress: ProgressCallback | None = None,
    ) -> None:
        if not instances:
            raise ValueError("instances: need at least one")
        self.instances = list(instances)
        self.router = router
        self.fast_forward = fast_forward
        self.max_steady_steps = max_steady_steps
        self.progress = progress
        self._heap: list[_StepDone] = []
        self._seq = itertools.count()
        self._next_arrival_s = math.inf

    def run(self, requests: Sequence[Request]) -> SimResult:
        """Simulate until every request has finished or been rejected."""
        arrivals = sorted(requests, key=lambda r: r.arrival_time_s)
        schedulers = [inst.scheduler for inst in self.instances]
        index, total, now_s = 0, len(arrivals), 0.0
        while index < total or self._heap:
            self._next_arrival_s = arrivals[index].arrival_time_s if index < total else math.inf
            if self._heap and self._heap[0].time_s < self._next_arrival_s:
                event = heapq.heappop(self._heap)
                now_s = event.time_s
                self._complete(event)
                continue
            request = arrivals[index]
            index += 1
            now_s = request.arrival_time_s
            self._arrive(request, schedulers, now_s)
            if self.progress is not None and index % 512 == 0:
                self.progress(index, total)
        if self.progress is not None:
            self.progress(total, total)
        self._drop_stuck(now_s)
        return SimResult(
            requests=list(requests),
            end_time_s=now_s,
            num_steps=sum(i.num_steps for i in self.instances),
            num_events=sum(i.num_events for i in self.instances),
            busy_time_s=[i.busy_time_s for i in self.instances],
        )

    # ---- events ----------------------------------------------------------------------------------------
    def _arrive(self, request: Request, schedulers: list[Scheduler], now_s: float) -> None:
        target = self.router.route(request, schedulers, now_s)
        instance = self.instances[target]
        decision = instance.scheduler.add_request(request, now_s)
        if decision.accepted:
            instance.pending_overhead_s += instance.overheads.arrival_s
            if not instance.busy:  # the instance had nothing to do: it wakes up, then runs a step
                instance.pending_overhead_s += instance.overheads.idle_wakeup_s
                self._start_step(target, now_s)

    def _complete(self, event: _StepDone) -> None:
        instance = self.instances[event.instance]
        if event.end_times_s is None:
            instance.scheduler.update(event.plan, StepResult(end_time_s=event.time_s))
            instance.num_steps += 1
        else:
            instance.scheduler.update_steady(event.plan, event.end_times_s.tolist())
            instance.num_steps += len(event.end_times_s)
        instance.busy = False
        self._start_step(event.instance, event.time_s)

    def _start_step(self, index: int, now_s: float) -> None:
        instance = self.instances[index]
        plan = instance.scheduler.schedule(now_s)
        if plan.is_empty:
            return  # idle until the next arrival
        end_times = self._steady_end_times(instance, plan, now_s)
        if end_times is None:
            # arrivals taken in since the last step delay this one (a real engine adds them between steps)
            engine_s = instance.pending_overhead_s + instance.shape_cost_s(plan) + self._step_time_s(
                instance.latency, plan
            )
            end_s = now_s + (engine_s if instance.speed is None else engine_s * instance.speed.factor_at(now_s))
            instance.pending_overhead_s = 0.0
        else:
            end_s = float(end_times[-1])
        instance.busy = True
        instance.num_events += 1
        instance.busy_time_s += end_s - now_s
        heapq.heappush(self._heap, _StepDone(end_s, next(self._seq), index, plan, end_times))

    def _steady_end_times(self, instance: Instance, plan: BatchPlan, now_s: float) -> np.ndarray | None:
        """End times of a fast-forwardable stretch of >= 2 steps starting with ``plan``, else None."""
        if not self.fast_forward or not plan.is_pure_decode or instance.pending_overhead_s:
            return None
        if instance.speed is not None:
            return None  # its factor may change from one step to the next
        if instance.overheads.new_shape_s and plan.num_tokens not in instance.warm_shapes:
            return None  # its first step costs extra; the steps after it can fast-forward
        # cheap scalar check first: a second step can join only if the first ends before the next arrival
        if now_s + self._step_time_s(instance.latency, plan) >= self._next_arrival_s:
            return None
        steps = instance.scheduler.steady_decode_steps(plan, self.max_steady_steps)
        if steps <= 1:
            return None
        durations = instance.latency.decode_times_s(len(plan.decode), plan.decode_context_tokens, steps)
        ends = np.add.accumulate(np.concatenate(([now_s], durations)))[1:]
        # a step may join the stretch only if the previous one ended before the next arrival
        steps = int(np.searchsorted(ends, self._next_arrival_s, side="left"))
        return ends[:steps] if steps >= 2 else None

    @staticmethod
    def _step_time_s(latency: LatencyModel, plan: BatchPlan) -> float:
        prefill = [(c.num_tokens, c.context_tokens) for c in plan.prefill]
        duration = latency.step_time_s(prefill, len(plan.decode), plan.decode_context_tokens)
        swap_tokens = plan.swap_in_tokens + plan.swap_out_tokens
        if swap_tokens:
            duration += latency.swap_time_s(swap_tokens)
        return duration

    def _drop_stuck(self, now_s: float) -> None:
        """Requests that can never be scheduled (e.g. behind a reservation) are dropped explicitly."""
        for instance in self.instances:
            scheduler = instance.scheduler
            for request in scheduler.waiting_requests():
                scheduler.abort(request.request_id, now_s, "never schedulable")
