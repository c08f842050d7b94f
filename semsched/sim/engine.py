"""Discrete-event simulation of one or more vLLM-style engine instances driving the scheduling core.

Each instance steps as nano-vllm's ``LLMEngine.step()`` does: **schedule** (the core
:class:`~semsched.core.scheduler.Scheduler` forms a :class:`~semsched.core.plan.BatchPlan`), **execute** (the
instance's :class:`~semsched.sim.executor.Executor` runs it and says when it ends: latency model, engine
overheads, machine speed, speculative yield), **update** (the scheduler applies the
:class:`~semsched.core.plan.StepResult` when the step completes). Step completions are events in a heap ordered
by time then sequence number, merged with the time-sorted arrival stream; an arrival at the same instant as a
step completion is handled first, so it joins the next step, as in a real engine loop. A router
(:mod:`semsched.sim.router`) picks each arrival's instance from read-only views of them.

Hand-over: a request reaches the router at its :func:`handover_time_s`: its ``ready_time_s`` when a predictor
must process it first (:mod:`semsched.predict.cost`), else its arrival. The arrival stream is ordered by hand-over
time, and hand-over times are what steps and fast-forward stretches are cut at; metrics still count from
``arrival_time_s``, so the predictor's delay is part of a request's waiting time.

Hooks for what runs beside the engine (an online length predictor, :mod:`semsched.sim.prediction`):
``on_handover(request, now_s)`` is called at each hand-over, before the router sees the request (a prediction
made then is what the scheduler keys it by); ``on_finish(requests)`` after each step's (or fast-forwarded
stretch's) update, with the requests that reached FINISHED in it. A stretch never crosses a finish, so its
requests finish only at its end, at the same time as in per-step mode; events at the instant of a hand-over are
handled after it, so ``on_finish`` has reported exactly the requests that finished strictly before.

Fast-forward: a decode-only plan that nothing will disturb (no arrival, no finish, no block exhaustion, a policy
whose decisions do not drift; see :meth:`Scheduler.steady_decode_steps`) is executed for many steps in one
event (:meth:`Executor.execute_repeated`), with the step end times accumulated left to right exactly as the
per-step loop adds them, so both modes produce bit-identical metrics.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from semsched.core.plan import BatchPlan, StepResult
from semsched.core.request import Request, RequestState
from semsched.core.scheduler import Scheduler
from semsched.latency.base import LatencyModel
from semsched.latency.profiles import EngineOverheads
from semsched.sim.executor import Executor, ModelExecutor
from semsched.sim.monitor import DEFAULT_SAMPLE_INTERVAL_S, Monitor, MonitorLog
from semsched.sim.router import InstanceView, Router, RouterError
from semsched.sim.speed import SpeedTrace

ProgressCallback = Callable[[int, int], None]
HandoverHook = Callable[[Request, float], None]
FinishHook = Callable[[Sequence[Request]], None]


class Instance:
    """One simulated engine: a scheduler (what each step runs) and an executor (when the step ends).

    Give either a latency model, with the engine's ``overheads``, ``warm_shapes`` (batch sizes a warm-up ran:
    they cost no ``new_shape_s``) and the machine's ``speed`` (None: as profiled), which make a
    :class:`~semsched.sim.executor.ModelExecutor`; or an ``executor`` of your own.
    """

    def __init__(
        self,
        scheduler: Scheduler,
        latency: LatencyModel | None = None,
        *,
        overheads: EngineOverheads | None = None,
        warm_shapes: Iterable[int] = (),
        speed: SpeedTrace | None = None,
        executor: Executor | None = None,
    ) -> None:
        if executor is None:
            if latency is None:
                raise TypeError("Instance: give a latency model or an executor")
            executor = ModelExecutor(latency, overheads=overheads, warm_shapes=warm_shapes, speed=speed)
        elif latency is not None or overheads is not None or speed is not None or warm_shapes:
            raise TypeError("Instance: give either an executor or a latency model with its overheads, not both")
        self.scheduler = scheduler
        self.executor = executor
        self.busy = False  # a step is in flight
        self.num_steps = 0
        self.num_events = 0
        self.busy_time_s = 0.0


@dataclass
class SimResult:
    """Every request (terminal state) plus engine counters and what the run recorded for monitoring."""

    requests: list[Request]
    end_time_s: float
    num_steps: int
    num_events: int
    busy_time_s: list[float] = field(default_factory=list)
    monitor: MonitorLog = field(default_factory=lambda: MonitorLog(DEFAULT_SAMPLE_INTERVAL_S))

    @property
    def finished(self) -> list[Request]:
        return [r for r in self.requests if r.state is RequestState.FINISHED]


class _StepDone(NamedTuple):
    """Heap entry; ordered by (time, sequence number): the sequence is unique, so later fields never compare.
    ``outcome`` is one step's result, or the end times of a fast-forwarded stretch of repetitions of ``plan``."""

    time_s: float
    seq: int
    instance: int
    plan: BatchPlan
    outcome: StepResult | np.ndarray


def handover_time_s(request: Request) -> float:
    """When the simulator hands ``request`` to the router: when its predictions are ready (``ready_time_s``),
    else at its arrival."""
    return request.arrival_time_s if request.ready_time_s is None else request.ready_time_s


class Simulation:
    """Runs a request stream through a cluster of instances behind a router.

    Each run records a :class:`~semsched.sim.monitor.MonitorLog` (preemptions, and the waiting queue per priority
    and swap space in use every ``sample_interval_s`` of simulated time), returned in :class:`SimResult`.
    ``on_handover`` and ``on_finish`` are the hooks of the module docstring (None: not called).
    """

    def __init__(
        self,
        instances: Sequence[Instance],
        router: Router,
        *,
        fast_forward: bool = True,
        max_steady_steps: int = 1_000_000,
        progress: ProgressCallback | None = None,
        sample_interval_s: float = DEFAULT_SAMPLE_INTERVAL_S,
        on_handover: HandoverHook | None = None,
        on_finish: FinishHook | None = None,
    ) -> None:
        if not instances:
            raise ValueError("instances: need at least one")
        self.instances = list(instances)
        self.router = router
        self.fast_forward = fast_forward
        self.max_steady_steps = max_steady_steps
        self.progress = progress
        self.sample_interval_s = sample_interval_s
        self.on_handover = on_handover
        self.on_finish = on_finish
        self._monitor = Monitor([i.scheduler for i in self.instances], sample_interval_s)  # checks the interval
        self._views = tuple(InstanceView(i, inst.scheduler) for i, inst in enumerate(self.instances))
        self._heap: list[_StepDone] = []
        self._seq = itertools.count()
        self._next_arrival_s = math.inf

    def run(self, requests: Sequence[Request]) -> SimResult:
        """Simulate until every request has finished or been rejected; each request enters the cluster at its
        :func:`handover_time_s`."""
        arrivals = sorted(requests, key=handover_time_s)  # stable: ties keep the caller's order
        handovers_s = [handover_time_s(r) for r in arrivals]
        index, total, now_s = 0, len(arrivals), 0.0
        monitor = self._monitor = Monitor([i.scheduler for i in self.instances], self.sample_interval_s)
        next_sample_s = monitor.next_sample_s
        while index < total or self._heap:
            self._next_arrival_s = handovers_s[index] if index < total else math.inf
            if self._heap and self._heap[0].time_s < self._next_arrival_s:
                event = heapq.heappop(self._heap)
                now_s = event.time_s
                if now_s > next_sample_s:  # the first event past a grid point: the state before it is sampled
                    next_sample_s = monitor.sample_before(now_s)
                self._complete(event)
                continue
            request = arrivals[index]
            now_s = handovers_s[index]
            index += 1
            if now_s > next_sample_s:
                next_sample_s = monitor.sample_before(now_s)
            if self.on_handover is not None:
                self.on_handover(request, now_s)
            self._arrive(request, now_s)
            if self.progress is not None and index % 512 == 0:
                self.progress(index, total)
        if self.progress is not None:
            self.progress(total, total)
        monitor_log = monitor.finish(now_s)
        self._drop_stuck(now_s)
        return SimResult(
            requests=list(requests),
            end_time_s=now_s,
            num_steps=sum(i.num_steps for i in self.instances),
            num_events=sum(i.num_events for i in self.instances),
            busy_time_s=[i.busy_time_s for i in self.instances],
            monitor=monitor_log,
        )

    # ---- events ----------------------------------------------------------------------------------------
    def _arrive(self, request: Request, now_s: float) -> None:
        target = self.router.route(request, self._views, now_s)
        if not (isinstance(target, int | np.integer) and 0 <= target < len(self.instances)):
            raise RouterError(
                f"router {self.router.name!r} chose instance {target!r}; there are {len(self.instances)} "
                f"(0 to {len(self.instances) - 1})"
            )
        instance = self.instances[target]
        if instance.scheduler.add_request(request, now_s).accepted:
            self._monitor.enqueued(request)
            instance.executor.take_arrival(engine_idle=not instance.busy)
            if not instance.busy:  # the instance had nothing to do: it wakes up and steps
                self._step(target, now_s)

    def _complete(self, event: _StepDone) -> None:
        """Update: the scheduler applies the step's (or stretch's) outcome; then the instance steps again."""
        instance = self.instances[event.instance]
        outcome = event.outcome
        finished_before = len(instance.scheduler.finished)
        if isinstance(outcome, StepResult):
            instance.scheduler.update(event.plan, outcome)
            instance.num_steps += 1
        else:
            instance.scheduler.update_steady(event.plan, outcome.tolist())
            instance.num_steps += len(outcome)
        if self.on_finish is not None and len(instance.scheduler.finished) > finished_before:
            self.on_finish(instance.scheduler.finished[finished_before:])
        instance.busy = False
        self._step(event.instance, event.time_s)

    def _step(self, index: int, now_s: float) -> None:
        """Schedule and execute one step (or a fast-forwarded stretch); its update waits for its end."""
        instance = self.instances[index]
        plan = instance.scheduler.schedule(now_s)
        if plan.prefill or plan.preempted or plan.swapped_in:  # (a plan of decodes changes no queue)
            self._monitor.record_plan(index, plan, now_s)
        if plan.is_empty:
            return  # idle until the next arrival
        stretch = self._execute_repeated(instance, plan, now_s)
        if stretch is None:
            result = instance.executor.execute(plan, now_s)
            outcome: StepResult | np.ndarray = result
            end_s = result.end_time_s
        else:
            outcome, end_s = stretch, float(stretch[-1])
        instance.busy = True
        instance.num_events += 1
        instance.busy_time_s += end_s - now_s
        heapq.heappush(self._heap, _StepDone(end_s, next(self._seq), index, plan, outcome))

    def _execute_repeated(self, instance: Instance, plan: BatchPlan, now_s: float) -> np.ndarray | None:
        """End times of a fast-forwardable stretch of >= 2 repetitions of ``plan``, else None: the scheduler
        says how many steps the plan would repeat unchanged, the executor how many of them end before the
        next arrival."""
        if not self.fast_forward or not plan.is_pure_decode:
            return None
        executor, until_s = instance.executor, self._next_arrival_s
        if not executor.can_repeat(plan, now_s, until_s):  # cheap checks before the scheduler's count
            return None
        steps = instance.scheduler.steady_decode_steps(plan, self.max_steady_steps)
        return executor.execute_repeated(plan, now_s, steps, until_s) if steps > 1 else None

    def _drop_stuck(self, now_s: float) -> None:
        """Requests that can never be scheduled (e.g. behind a reservation) are dropped explicitly."""
        for instance in self.instances:
            scheduler = instance.scheduler
            for request in scheduler.waiting_requests():
                scheduler.abort(request.request_id, now_s, "never schedulable")
