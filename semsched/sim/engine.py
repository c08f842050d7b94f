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

Router notifications: after each update the router's optional ``on_first_token(request, instance, now_s)`` hears
of every request whose first token the step emitted, and ``on_finish(request, instance, now_s)`` of every request
that ended (finished; rejected at admission; dropped by a DROP preemption), as a gateway would from the streams.

PD disaggregation (``disaggregation``, :mod:`semsched.sim.disagg`): the first instances prefill, the others
decode. A request is routed to a prefill instance (``Router.route`` sees only the prefill pool); when a step emits
its first token there, the instance hands it off (every block freed there), the decode instance is chosen
(``Router.route_decode`` if the router has one, else the most free blocks) and the request enters it after the KV
transfer time of its computed tokens, holding its KV (``Scheduler.add_transferred``). All instances of a PD
cluster append their step end times to one shared :class:`~semsched.core.request.TokenTimeline`, so a request's
step-index ranges index one array whichever instance emitted its tokens (that timeline is in event order, not
sorted by time, and its length is the cluster's step count).

Fast-forward: a decode-only plan that nothing will disturb (no arrival, no finish, no block exhaustion, a policy
whose decisions do not drift; see :meth:`Scheduler.steady_decode_steps`) is executed for many steps in one
event (:meth:`Executor.execute_repeated`), with the step end times accumulated left to right exactly as the
per-step loop adds them, so both modes produce bit-identical metrics. With speculative decoding the stretch is
one of verification rounds: each request's rounds are its own log or seeded draws, so the executor reads their
yields ahead (:meth:`Executor.accepted_rounds`), the scheduler ends the stretch at the first round in which a
request would finish or blocks would run out, and it applies the rounds one by one when the stretch ends. In a PD
cluster a stretch also ends before the end of any prefill step in flight (a hand-off reads the decode instances'
free blocks) and before any KV transfer in flight lands.

Nothing is lost: an instance may go idle only when it holds no work it could run. When a step's plan is empty
while requests are running, or while a waiting request would fit the idle engine, the run stops at that moment
with :class:`~semsched.sim.executor.SimulationError` (``allow_stalls``: those requests end STALLED, counted). A
waiting request that an idle engine cannot take (a reservation shuts it out, or its first chunk exceeds every
block it may hold) never will be: it is dropped then, its reason naming the blocks. The run ends only when every
instance is empty.
"""

from __future__ import annotations

import contextlib
import gc
import heapq
import itertools
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from semsched.core.plan import BatchPlan, PreemptionMode, StepResult
from semsched.core.request import Request, RequestState, TokenTimeline
from semsched.core.scheduler import Scheduler
from semsched.latency.base import LatencyModel
from semsched.latency.profiles import EngineOverheads
from semsched.sim.disagg import Disaggregation
from semsched.sim.executor import Executor, ModelExecutor, SimulationError
from semsched.sim.monitor import DEFAULT_SAMPLE_INTERVAL_S, Monitor, MonitorLog
from semsched.sim.router import InstanceView, Router, RouterError, most_free_blocks
from semsched.sim.speed import SpeedTrace

ProgressCallback = Callable[[int, int], None]
HandoverHook = Callable[[Request, float], None]
FinishHook = Callable[[Sequence[Request]], None]
RouterNotice = Callable[[Request, InstanceView, float], None]
DecodeChoice = Callable[[Request, Sequence[InstanceView], float], int]

#: collections of a younger generation between two of the next older one while a simulation runs (Python's
#: defaults: 10 and 10)
DEFERRED_THRESHOLD = 1000

#: speculative rounds looked ahead for one fast-forwarded stretch (a stretch costs work per round anyway, so a
#: longer one would save little; the next arrival ends most stretches well before)
ROUNDS_AHEAD = 64


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
        #: the executor again when it is a ModelExecutor (or a subclass), which the compiled engine then calls
        #: natively; None for an executor of another type, called through its protocol
        self.model_executor = executor if isinstance(executor, ModelExecutor) else None
        self.busy = False  # a step is in flight
        self.num_steps = 0
        self.num_events = 0
        self.busy_time_s = 0.0

    # the executor's calls (natively, through ``model_executor``, when it is a ModelExecutor)
    def take_arrival(self, *, engine_idle: bool) -> None:
        model = self.model_executor
        if model is not None:
            model.take_arrival(engine_idle=engine_idle)
        else:
            self.executor.take_arrival(engine_idle=engine_idle)

    def execute(self, plan: BatchPlan, now_s: float) -> StepResult:
        model = self.model_executor
        return model.execute(plan, now_s) if model is not None else self.executor.execute(plan, now_s)

    def can_repeat(self, plan: BatchPlan, now_s: float, until_s: float) -> bool:
        model = self.model_executor
        if model is not None:
            return model.can_repeat(plan, now_s, until_s)
        return self.executor.can_repeat(plan, now_s, until_s)

    def accepted_rounds(self, plan: BatchPlan, rounds: int) -> np.ndarray | None:
        model = self.model_executor
        if model is not None:
            return model.accepted_rounds(plan, rounds)
        return self.executor.accepted_rounds(plan, rounds)

    def execute_repeated(self, plan: BatchPlan, now_s: float, steps: int, until_s: float,
                         accepted: np.ndarray | None) -> list[float] | None:
        model = self.model_executor
        if model is not None:
            return model.execute_repeated(plan, now_s, steps, until_s, accepted)
        return self.executor.execute_repeated(plan, now_s, steps, until_s, accepted)


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


class _Event:
    """A heap entry, ordered by (time, sequence number): the sequence is unique, so nothing else compares. Events
    are native classes with written-out initialisers (compiled, a named tuple's constructor is interpreted)."""

    time_s: float
    seq: int

    def __lt__(self, other: _Event) -> bool:
        return self.time_s < other.time_s or (self.time_s == other.time_s and self.seq < other.seq)


class _Transfer(_Event):
    """A PD hand-off: ``request``'s KV lands on decode ``instance`` (cluster index) at ``time_s``."""

    def __init__(self, time_s: float, seq: int, instance: int, request: Request) -> None:
        self.time_s = time_s
        self.seq = seq
        self.instance = instance
        self.request = request


class _Stretch:
    """A fast-forwarded stretch of repetitions of a plan: each one's end time, and with speculative decoding the
    tokens each decode emits in each (a row per repetition), else None."""

    def __init__(self, end_times_s: list[float], accepted: np.ndarray | None) -> None:
        self.end_times_s = end_times_s
        self.accepted = accepted


class _StepDone(_Event):
    """The end of a step at ``time_s``: ``outcome`` is its result, or a fast-forwarded stretch of repetitions of
    ``plan``."""

    def __init__(self, time_s: float, seq: int, instance: int, plan: BatchPlan, outcome: StepResult | _Stretch
                 ) -> None:
        self.time_s = time_s
        self.seq = seq
        self.instance = instance
        self.plan = plan
        self.outcome = outcome


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
        disaggregation: Disaggregation | None = None,
        allow_stalls: bool = False,
    ) -> None:
        if not instances:
            raise ValueError("instances: need at least one")
        if disaggregation is not None and not 1 <= disaggregation.num_prefill < len(instances):
            raise ValueError(
                f"disaggregation.num_prefill: must be from 1 to {len(instances) - 1} (the {len(instances)} "
                f"instances include the decode instances; got {disaggregation.num_prefill})"
            )
        self.instances = list(instances)
        self.disaggregation = disaggregation
        self.router = router
        self.fast_forward = fast_forward
        self.max_steady_steps = max_steady_steps
        self.progress = progress
        self.sample_interval_s = sample_interval_s
        self.on_handover = on_handover
        self.on_finish = on_finish
        #: a stall (an instance idle while it holds work it could run) ends its requests STALLED, counted in
        #: ``num_stalled``, instead of raising :class:`SimulationError`
        self.allow_stalls = allow_stalls
        self.num_stalled = 0
        self._monitor = Monitor([i.scheduler for i in self.instances], sample_interval_s)  # checks the interval
        self._views = self._make_views()
        # what route() and route_decode() see: the cluster, or the prefill and the decode pool of a PD cluster
        num_prefill = len(self.instances) if disaggregation is None else disaggregation.num_prefill
        #: instances below this index are a PD cluster's prefill pool (0: not disaggregated)
        self._num_prefill = 0 if disaggregation is None else num_prefill
        self._route_views = self._views[:num_prefill]
        self._decode_views = self._views[num_prefill:]
        if disaggregation is not None:
            timeline = TokenTimeline()  # one for the cluster: a request's tokens come from two instances
            for instance in self.instances:
                instance.scheduler.timeline = timeline
        self._on_first_token: RouterNotice | None = getattr(router, "on_first_token", None)
        self._on_router_finish: RouterNotice | None = getattr(router, "on_finish", None)
        self._route_decode: DecodeChoice = getattr(router, "route_decode", None) or _most_free_blocks
        self._heap: list[_Event] = []
        self._seq = itertools.count()
        self._next_arrival_s = math.inf
        # PD: end times of the prefill steps and KV transfers in flight, which fast-forward stretches end before
        self._pd_marks: list[float] = []

    def _make_views(self) -> tuple[InstanceView, ...]:
        split = self.disaggregation
        if split is None:
            return tuple(InstanceView(i, inst.scheduler) for i, inst in enumerate(self.instances))
        return tuple(
            InstanceView(i, inst.scheduler, "prefill") if i < split.num_prefill
            else InstanceView(i - split.num_prefill, inst.scheduler, "decode")
            for i, inst in enumerate(self.instances)
        )

    def run(self, requests: Sequence[Request]) -> SimResult:
        """Simulate until every request has finished or been rejected; each request enters the cluster at its
        :func:`handover_time_s`."""
        with _older_collections_deferred():
            return self._run(requests)

    def _run(self, requests: Sequence[Request]) -> SimResult:
        arrivals = sorted(requests, key=handover_time_s)  # stable: ties keep the caller's order
        handovers_s = [handover_time_s(r) for r in arrivals]
        index, total, now_s = 0, len(arrivals), 0.0
        monitor = self._monitor = Monitor([i.scheduler for i in self.instances], self.sample_interval_s)
        next_sample_s = monitor.next_sample_s
        heap, pop = self._heap, heapq.heappop
        while index < total or heap:
            next_arrival_s = self._next_arrival_s = handovers_s[index] if index < total else math.inf
            while heap and heap[0].time_s < next_arrival_s:  # the events before the next arrival
                event = pop(heap)
                now_s = event.time_s
                if now_s > next_sample_s:  # the first event past a grid point: the state before it is sampled
                    next_sample_s = monitor.sample_before(now_s)
                if isinstance(event, _StepDone):
                    self._complete(event)
                else:
                    assert isinstance(event, _Transfer)
                    self._land(event)
            if index == total:
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
        self._check_nothing_left(now_s)
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
        views = self._route_views
        target = _checked_choice(self.router, self.router.route(request, views, now_s), len(views), "")
        self._admit(target, request, now_s, transferred=False)

    def _admit(self, index: int, request: Request, now_s: float, *, transferred: bool) -> None:
        """``request`` enters instance ``index`` (an arrival, or a PD hand-off landing with its KV)."""
        instance = self.instances[index]
        scheduler = instance.scheduler
        admission = (scheduler.add_transferred if transferred else scheduler.add_request)(request, now_s)
        if not admission.accepted:
            self._notify_finish(request, index, now_s)
            return
        self._monitor.enqueued(request)
        instance.take_arrival(engine_idle=not instance.busy)
        if not instance.busy:  # the instance had nothing to do: it wakes up and steps
            self._step(index, now_s)

    def _land(self, event: _Transfer) -> None:
        """A hand-off's KV has crossed the link: the request enters its decode instance."""
        self._admit(event.instance, event.request, event.time_s, transferred=True)

    def _complete(self, event: _StepDone) -> None:
        """Update: the scheduler applies the step's (or stretch's) outcome, the router hears of first tokens and
        ends, a PD prefill instance hands off the requests that got their first token; then the instance steps
        again."""
        index, now_s, plan, outcome = event.instance, event.time_s, event.plan, event.outcome
        instance = self.instances[index]
        scheduler = instance.scheduler
        done = scheduler.finished
        finished_before = len(done)
        prefill = index < self._num_prefill
        watch_first = plan.prefill and (prefill or self._on_first_token is not None)
        fresh = [c.request for c in plan.prefill if c.request.num_output_tokens == 0] if watch_first else []
        if type(outcome) is StepResult:
            scheduler.update(plan, outcome)
            instance.num_steps += 1
        else:
            assert isinstance(outcome, _Stretch)
            scheduler.update_steady(plan, outcome.end_times_s, outcome.accepted)
            instance.num_steps += len(outcome.end_times_s)
        first_tokens = [r for r in fresh if r.num_output_tokens > 0] if fresh else fresh
        finished = done[finished_before:] if len(done) > finished_before else ()
        if first_tokens or finished:
            self._notify(index, first_tokens, finished, now_s)
            if self.on_finish is not None and finished:
                self.on_finish(finished)
        if prefill:
            self._hand_off(index, first_tokens, now_s)
        instance.busy = False
        self._step(index, now_s)

    def _notify(self, index: int, first_tokens: list[Request], finished: Sequence[Request], now_s: float) -> None:
        if self._on_first_token is not None:
            view = self._views[index]
            for request in first_tokens:
                self._on_first_token(request, view, now_s)
        for request in finished:
            self._notify_finish(request, index, now_s)

    def _notify_finish(self, request: Request, index: int, now_s: float) -> None:
        if self._on_router_finish is not None:
            self._on_router_finish(request, self._views[index], now_s)

    def _is_prefill(self, index: int) -> bool:
        return index < self._num_prefill

    def _hand_off(self, index: int, first_tokens: list[Request], now_s: float) -> None:
        """PD: each request whose first token a prefill instance just emitted (and that goes on) leaves it with
        its KV for the decode instance the router picks, where it lands after the transfer."""
        assert self.disaggregation is not None
        link, num_prefill = self.disaggregation.link, self.disaggregation.num_prefill
        scheduler = self.instances[index].scheduler
        for request in first_tokens:
            if request.state is not RequestState.RUNNING:
                continue  # it finished with its first token
            scheduler.hand_off(request.request_id)
            views = self._decode_views
            choice = _checked_choice(self.router, self._route_decode(request, views, now_s), len(views), "decode ")
            arrival_s = now_s + link.transfer_time_s(request.num_computed_tokens)
            heapq.heappush(self._heap, _Transfer(arrival_s, next(self._seq), num_prefill + choice, request))
            heapq.heappush(self._pd_marks, arrival_s)

    def _step(self, index: int, now_s: float) -> None:
        """Schedule and execute one step (or a fast-forwarded stretch); its update waits for its end."""
        instance = self.instances[index]
        plan = self._schedule(index, now_s)
        if plan.is_empty and plan.preempted:  # it only moved work (preempted or dropped): the queue changed
            plan = self._schedule(index, now_s)
        if plan.is_empty:
            self._go_idle(index, now_s)  # idle until the next arrival, if it holds no work it could run
            return
        stretch = self._execute_repeated(instance, plan, now_s)
        if stretch is None:
            result = instance.execute(plan, now_s)
            outcome: StepResult | _Stretch = result
            end_s = result.end_time_s
        else:
            outcome, end_s = stretch, stretch.end_times_s[-1]
        instance.busy = True
        instance.num_events += 1
        instance.busy_time_s += end_s - now_s
        heapq.heappush(self._heap, _StepDone(end_s, next(self._seq), index, plan, outcome))
        if index < self._num_prefill:
            heapq.heappush(self._pd_marks, end_s)

    def _schedule(self, index: int, now_s: float) -> BatchPlan:
        plan = self.instances[index].scheduler.schedule(now_s)
        if plan.prefill or plan.preempted or plan.swapped_in:  # (a plan of decodes changes no queue)
            self._monitor.record_plan(index, plan, now_s)
            for preemption in plan.preempted:
                if preemption.mode is PreemptionMode.DROP:
                    self._notify_finish(preemption.request, index, now_s)
        return plan

    def _go_idle(self, index: int, now_s: float) -> None:
        """Instance ``index`` scheduled nothing at ``now_s``. Idle is right only when it holds no work it could
        run: nothing running, and every waiting request shut out of an idle engine's KV cache, which no later
        event can change (such requests are dropped here, the reason naming the blocks). Anything else is a
        stall, found now rather than at the end of the run: :class:`SimulationError` naming the policy, the
        requests and the engine's state, or with ``allow_stalls`` the requests end STALLED (counted)."""
        scheduler = self.instances[index].scheduler
        if not scheduler.has_unfinished():
            return
        stranded = list(scheduler.running_requests())
        if not stranded:
            for request in scheduler.waiting_requests():
                if scheduler.could_start_now(request):
                    stranded.append(request)
                else:
                    need, available = scheduler.block_need(request)
                    scheduler.abort(request.request_id, now_s, (
                        f"never schedulable: needs {need} KV blocks to start, at most {available} can be "
                        f"free for priority {request.priority}"))
                    self._notify_finish(request, index, now_s)
        if stranded:
            self._stall(index, stranded, now_s)

    def _stall(self, index: int, stranded: Sequence[Request], now_s: float) -> None:
        scheduler = self.instances[index].scheduler
        named = ", ".join(f"{r.request_id} ({r.state.value}, {r.num_computed_tokens}/{r.num_tokens} tokens "
                          f"computed)" for r in stranded[:5])
        more = f" and {len(stranded) - 5} more" if len(stranded) > 5 else ""
        message = (f"policy {scheduler.policy.name!r} left instance {index} idle at t={now_s:.6g} s with "
                   f"{len(stranded)} request(s) it could run: {named}{more}; {scheduler.describe_state()}")
        if not self.allow_stalls:
            raise SimulationError(f"stall: {message} (allow_stalls, --allow-stalls: count them as stalled)")
        self.num_stalled += len(stranded)
        for request in list(stranded):
            scheduler.strand(request.request_id, now_s, f"stalled: {message}")
            self._notify_finish(request, index, now_s)
        if scheduler.has_unfinished():
            self._step(index, now_s)  # what is left (now that the stranded requests are gone) may run

    def _execute_repeated(self, instance: Instance, plan: BatchPlan, now_s: float) -> _Stretch | None:
        """A fast-forwardable stretch of >= 2 repetitions of ``plan``, else None: with speculative decoding the
        executor says what each decode's next rounds would yield, the scheduler how many steps the plan would
        repeat unchanged, the executor how many of them end before the next arrival."""
        if not self.fast_forward or not plan.is_pure_decode:
            return None
        until_s = self._next_arrival_s
        if self.disaggregation is not None:
            until_s = min(until_s, self._next_pd_mark_s(now_s))
        if not instance.can_repeat(plan, now_s, until_s):  # cheap checks before the scheduler's count
            return None
        accepted = instance.accepted_rounds(plan, min(self.max_steady_steps, ROUNDS_AHEAD))
        steps = instance.scheduler.steady_decode_steps(plan, self.max_steady_steps, accepted)
        if steps <= 1:
            return None
        ends = instance.execute_repeated(plan, now_s, steps, until_s, accepted)
        return None if ends is None else _Stretch(ends, accepted)

    def _next_pd_mark_s(self, now_s: float) -> float:
        """The earliest end of a prefill step or KV transfer not before ``now_s`` (one at ``now_s`` may still be
        pending), or inf."""
        marks = self._pd_marks
        while marks and marks[0] < now_s:
            heapq.heappop(marks)
        return marks[0] if marks else math.inf

    def _check_nothing_left(self, now_s: float) -> None:
        """The last event is done: every instance must be empty (an idle instance with work was caught when it
        went idle; this is the backstop)."""
        for index, instance in enumerate(self.instances):
            scheduler = instance.scheduler
            if scheduler.has_unfinished():
                left = [*scheduler.running_requests(), *scheduler.waiting_requests()]
                self._stall(index, left, now_s)


@contextlib.contextmanager
def _older_collections_deferred() -> Iterator[None]:
    """Put off the garbage collector's collections of its older generations while a run lasts (the thresholds
    are restored after it). A run keeps alive a small list per range of emission steps of every request (one per
    token of a speculative round), and each older-generation collection walks all of them again: a third of a
    speculative run's CPU time (3,000 requests of azure-conv-trace, EAGLE). Results do not depend on it: the young
    generation is still collected, and reference counting frees everything else as before."""
    young, middle, old = gc.get_threshold()
    gc.set_threshold(young, max(middle, DEFERRED_THRESHOLD), max(old, DEFERRED_THRESHOLD))
    try:
        yield
    finally:
        gc.set_threshold(young, middle, old)


def _most_free_blocks(request: Request, instances: Sequence[InstanceView], now_s: float) -> int:
    """The default decode choice of a PD cluster: the most free KV blocks."""
    return most_free_blocks(instances)


def _checked_choice(router: Router, target: object, count: int, pool: str) -> int:
    """``target`` if it indexes one of ``count`` instances, else a :class:`RouterError` naming the router."""
    if not (isinstance(target, int | np.integer) and 0 <= target < count):
        raise RouterError(
            f"router {router.name!r} chose {pool}instance {target!r}; there are {count} (0 to {count - 1})"
        )
    return int(target)
