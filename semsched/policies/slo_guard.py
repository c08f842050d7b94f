"""SLO monitor, admission and load shedding for the ``tiered`` policy (seed 003, §3.2 and §6).

:class:`SLOGuard` is not a policy: ``tiered`` owns one and forwards its ``admit``, ``on_arrival``, ``on_tokens``,
``on_preempt`` and ``on_finish`` hooks to it. It answers arrivals with :class:`~semsched.core.plan.Admission`,
and every rejection reason starts with a stable prefix (:data:`SHED`, :data:`QUEUE_FULL`, :data:`HOPELESS`) so
reports can count rejections by cause (:func:`guard_rejection_kind`; reports count any reason with
:func:`semsched.metrics.request_metrics.rejection_kind`). Schedulers call ``on_tokens`` only for a policy whose
``uses_hook("on_tokens")`` is true: the owner must say so while a guard is active, or nothing is observed.

Design, and where it departs from the seed's ``SLOMonitor``:

* **A time window, not a sample count.** :class:`SLOMonitor` keeps, per priority class and metric, the
  observations of the last ``window_s`` seconds of engine time (a deque evicted by time, capped at
  ``max_samples``). The seed's ``deque(maxlen=100)`` forgets at a rate set by traffic: a quiet class keeps
  hour-old samples. Times are arguments; nothing here reads a clock.
* **What is observed.** TTFT when a request's first token is reported (``now_s - arrival_time_s``), TPOT when it
  finishes, ``(finish - first token) / (tokens - 1)``: one sample per request, the very statistic
  :mod:`semsched.metrics` reports and the SLO is judged on. The seed records every running request's average so
  far at every iteration, which counts long requests many times and samples partial means. Per-token gaps
  would react sooner but measure a different distribution (a prefill chunk in a step makes one long gap that
  TPOT, a mean, absorbs), so p99 of gaps would shed for misses that never happen. A partial mean is no bound
  on the final TPOT either (later gaps may be shorter), so nothing sound is known before the finish; the lag
  is at most a request's decode time, short against the window for the tiers that have TPOT targets.
* **Requests still waiting count.** A request admitted without a first token whose wait already exceeds its
  class's TTFT target is counted as a TTFT observation equal to its wait: its TTFT can only be larger, and a
  quantile never falls when a sample grows or a sample above it is added, so the estimate stays a lower bound
  of the p99 that will be observed. The seed's monitor is blind exactly when a class's queue builds up (nobody
  gets a first token, so nothing is recorded).
* **Misses that shedding cannot fix are left out** when a latency model is given: a request whose prompt alone
  takes longer to prefill on an empty engine than its class's TTFT target misses whatever the load, so its TTFT
  says nothing about load (on the A100/Qwen1.5-4B profile a 2,000-token prompt misses PREMIUM's 200 ms alone).
* **Or that an idle engine misses too** when a ``feasible`` judge is given: a callable that says whether a
  request could meet its class's target for a metric on an idle engine (the gateway's judges by the latencies
  of requests that ran alone on their server). An observation of a request judged infeasible is not recorded,
  and such a request is not counted among the waiting ones: a target no request meets on an idle engine keeps
  its class at risk whatever is shed, so shedding for it only loses work.
* **Quantile and headroom.** The ``quantile`` (0.99) with numpy's default linear interpolation, as the reports
  compute it; headroom is the seed's ``1 - p99 / target``, per metric, and a class's headroom is its worst
  metric's. Targets are the class's, from the tier table (per-request overrides are judged by the reports, not
  here). A metric needs ``min_samples`` observations before it is judged.
* **Graded shedding with hysteresis.** The seed sheds BACKGROUND *and* STANDARD the moment PREMIUM's p99 is
  over its target. Here the shed level rises one class at a time, least important first: a class with targets
  whose headroom is below ``shed_headroom`` raises the level while classes less important than it remain
  admitted (PREMIUM may shed BACKGROUND, then STANDARD; STANDARD only BACKGROUND). Requests at
  ``protected_priority`` or more important are never shed. The next class is shed only if the at-risk class is
  *still* at risk on what was observed, or arrived, since the last change (the window still holds the samples
  that caused it). The level falls one class at a time (the most important shed class is readmitted first) when
  every class that justifies it has headroom at least ``resume_headroom`` over the whole window. Every change
  waits ``hold_s`` after the previous one. Two thresholds and a dwell time: no flapping.
* **Shedding must help.** When nothing more can be shed for it, a class still at risk that has won back less
  than ``min_gain`` of headroom since the last class was shed for it shows that its misses do not come from the
  classes below (on the A100/Qwen1.5-4B profile PREMIUM's p99 TTFT stays over 200 ms on PREMIUM and SYSTEM
  traffic alone): that class is readmitted and its level not tried again for ``window_s``. The seed would shed
  STANDARD for good.
* **Bounded queues.** ``max_waiting[p]`` caps the requests of priority ``p`` in the waiting queue (admitted and
  not running, preempted ones included). ``SchedulerView`` counts waiting requests only in total, so the guard
  keeps its own per-priority set from ``on_arrival`` and ``on_preempt`` and drops from it, when it counts, the
  requests whose state says they run or ended (a request dropped by the core gets no ``on_finish``).
* **Hopeless requests** (``reject_hopeless``, off by default): a request whose E2E cannot meet its own target
  even on an empty engine (prefill of its prompt, then the decodes of the fewest tokens it can produce: one, or
  the smallest length its ``predicted_output`` allows) is rejected at once instead of occupying the engine.
"""

from __future__ import annotations

import math
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from semsched.core.errors import SemschedError
from semsched.core.plan import Admission
from semsched.core.request import WAITING_STATES, Request
from semsched.core.tiers import DEFAULT_TIERS, TierSpec
from semsched.latency.base import LatencyModel

SHED = "shed:"
"""Reason prefix: the request's class is being shed to protect a more important class's SLO."""
QUEUE_FULL = "queue full:"
"""Reason prefix: its priority's waiting queue is at ``max_waiting``."""
HOPELESS = "hopeless:"
"""Reason prefix: it would miss its E2E target even on an empty engine."""
REJECTION_PREFIXES: tuple[str, ...] = (SHED, QUEUE_FULL, HOPELESS)

#: ``Request.policy_state`` key: when the request's first token was reported (engine time, seconds)
FIRST_TOKEN_KEY = "slo_guard.first_token_s"

Metric = Literal["ttft", "tpot"]
METRICS: tuple[Metric, ...] = ("ttft", "tpot")

Feasible = Callable[[Request, Metric], bool]
"""Whether a request could meet its class's target for a metric on an idle engine (see :class:`SLOGuard`)."""

_MAX_INT = 2**31 - 1


def guard_rejection_kind(reason: str) -> str | None:
    """The cause a rejection reason names (``"shed"``, ``"queue full"``, ``"hopeless"``), or None if not ours."""
    for prefix in REJECTION_PREFIXES:
        if reason.startswith(prefix):
            return prefix[:-1]
    return None


class SLOGuardError(SemschedError):
    """A bad :class:`SLOGuardConfig` value or guard setup; the message names the field and the limit."""


def _param(default: Any, doc: str) -> Any:
    return field(default=default, metadata={"doc": doc})


@dataclass(frozen=True)
class SLOGuardConfig:
    """Knobs of :class:`SLOGuard`; checked on construction (:class:`SLOGuardError` names field and limit)."""

    window_s: float = _param(60.0, "engine time over which TTFT and TPOT observations are kept (seconds)")
    max_samples: int = _param(4096, "most observations kept per priority class and metric")
    quantile: float = _param(0.99, "the quantile judged against the targets (p99)")
    min_samples: int = _param(20, "observations a metric needs before its class is judged")
    shedding: bool = _param(True, "shed less important classes while a class with targets is at risk")
    protected_priority: int = _param(1, "requests this important or more (PREMIUM, SYSTEM) are never shed")
    shed_headroom: float = _param(0.1, "a class is at risk when its headroom (1 - p99/target) is below this")
    resume_headroom: float = _param(0.3, "a shed class is readmitted when the classes it was shed for have at "
                                         "least this headroom over the whole window")
    min_gain: float = _param(0.05, "headroom a shed class must win back for the class it was shed for; less, "
                                   "with nothing more to shed, and it is readmitted")
    hold_s: float = _param(10.0, "least engine time between two changes of the shed level (seconds)")
    evaluate_every_s: float = _param(1.0, "shedding is re-judged at arrivals at most this often (seconds)")
    max_waiting: tuple[int, ...] = _param((), "most waiting requests of priority 0, 1, 2, ... (0: no limit; "
                                              "priorities past the list: no limit)")
    reject_hopeless: bool = _param(False, "reject at arrival a request that misses its E2E target even on an "
                                          "empty engine (needs a latency model)")

    def __post_init__(self) -> None:
        _check_number("window_s", self.window_s, 1e-3, 86_400.0)
        _check_int("max_samples", self.max_samples, 1, 10_000_000)
        _check_number("quantile", self.quantile, 0.5, 1.0)
        _check_int("min_samples", self.min_samples, 1, self.max_samples)
        _check_bool("shedding", self.shedding)
        _check_int("protected_priority", self.protected_priority, -_MAX_INT - 1, _MAX_INT)
        _check_number("shed_headroom", self.shed_headroom, 0.0, 0.9)
        _check_number("resume_headroom", self.resume_headroom, self.shed_headroom, 0.95)
        _check_number("min_gain", self.min_gain, 0.0, 1.0)
        _check_number("hold_s", self.hold_s, 0.0, 86_400.0)
        _check_number("evaluate_every_s", self.evaluate_every_s, 0.0, 3_600.0)
        if not isinstance(self.max_waiting, tuple) or len(self.max_waiting) > 1024:
            raise SLOGuardError(f"max_waiting must be a tuple of at most 1,024 limits, got {self.max_waiting!r}")
        for priority, limit in enumerate(self.max_waiting):
            _check_int(f"max_waiting[{priority}]", limit, 0, _MAX_INT)
        _check_bool("reject_hopeless", self.reject_hopeless)

    def waiting_limit(self, priority: int) -> int | None:
        """The most waiting requests of ``priority``, or None without a limit."""
        limit = self.max_waiting[priority] if 0 <= priority < len(self.max_waiting) else 0
        return limit or None


def _check_int(name: str, value: object, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise SLOGuardError(f"{name} must be an integer from {low:,} to {high:,}, got {value!r}")


def _check_number(name: str, value: object, low: float, high: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
            or not low <= value <= high:
        raise SLOGuardError(f"{name} must be a number from {low:g} to {high:g}, got {value!r}")


def _check_bool(name: str, value: object) -> None:
    if not isinstance(value, bool):
        raise SLOGuardError(f"{name} must be true or false, got {value!r}")


# ---- the monitor -----------------------------------------------------------------------------------------------
class RollingSamples:
    """Observations ``(time_s, value_s)`` of one metric of one class: those of the last ``window_s`` seconds
    before the latest :meth:`evict`, at most ``max_samples`` of them (the oldest go first). Observations are
    expected in time order, as engines report them."""

    __slots__ = ("window_s", "_samples")

    def __init__(self, window_s: float, max_samples: int) -> None:
        self.window_s = window_s
        self._samples: deque[tuple[float, float]] = deque(maxlen=max_samples)

    def __len__(self) -> int:
        return len(self._samples)

    def add(self, time_s: float, value_s: float) -> None:
        self._samples.append((time_s, value_s))

    def evict(self, now_s: float) -> None:
        """Forget observations made before ``now_s - window_s``."""
        oldest_s, samples = now_s - self.window_s, self._samples
        while samples and samples[0][0] < oldest_s:
            samples.popleft()

    def values_s(self, since_s: float = -math.inf) -> np.ndarray:
        """Values observed after ``since_s``, oldest first."""
        return np.fromiter((v for t, v in self._samples if t > since_s), dtype=np.float64)


class SLOMonitor:
    """Rolling TTFT and TPOT observations per priority class over a window of engine time (seed 003's
    ``SLOMonitor``, made time-based and bounded): ``record`` them, read a class's quantile and headroom."""

    def __init__(self, window_s: float = 60.0, max_samples: int = 4096, quantile: float = 0.99) -> None:
        self.window_s, self.max_samples, self.quantile = window_s, max_samples, quantile
        self._series: dict[tuple[int, Metric], RollingSamples] = {}

    def record(self, priority: int, metric: Metric, value_s: float, now_s: float) -> None:
        """One observation of ``metric`` for class ``priority``, made at engine time ``now_s``."""
        series = self._series.get((priority, metric))
        if series is None:
            series = self._series[priority, metric] = RollingSamples(self.window_s, self.max_samples)
        series.evict(now_s)
        series.add(now_s, value_s)

    def evict(self, now_s: float) -> None:
        """Forget every observation older than the window before ``now_s``."""
        for series in self._series.values():
            series.evict(now_s)

    def values_s(self, priority: int, metric: Metric, since_s: float = -math.inf) -> np.ndarray:
        """The observations kept for ``priority`` and ``metric`` made after ``since_s``."""
        series = self._series.get((priority, metric))
        return series.values_s(since_s) if series is not None else np.empty(0, dtype=np.float64)

    def quantile_s(self, values_s: np.ndarray) -> float | None:
        """The monitor's quantile of ``values_s`` (linear interpolation, as the reports), None if empty."""
        return float(np.quantile(values_s, self.quantile)) if values_s.size else None


@dataclass(frozen=True, slots=True)
class SLOReading:
    """One class's standing on one metric: its quantile over ``count`` observations against its target."""

    priority: int
    metric: Metric
    quantile_s: float
    target_s: float
    count: int

    @property
    def headroom(self) -> float:
        """The seed's ``slo_headroom``: 1 at zero latency, 0 at the target, negative past it."""
        return 1.0 - self.quantile_s / self.target_s


# ---- the guard -------------------------------------------------------------------------------------------------
class SLOGuard:
    """SLO-driven admission for one scheduler: graded load shedding, bounded queues per priority and (optionally)
    rejection of hopeless requests. Every decision is a function of the callbacks received and the times they
    carried; two guards fed the same calls decide the same.

    ``tiers`` gives each priority class its name and its TTFT/TPOT targets (a priority appears once);
    ``latency``, the engine's step-latency model, leaves out misses no shedding can fix and prices hopeless
    requests (required with ``reject_hopeless``); ``feasible`` (:data:`Feasible`) leaves out the observations of
    requests it judges could not meet their target even on an idle engine.
    """

    def __init__(
        self,
        config: SLOGuardConfig | None = None,
        *,
        tiers: Sequence[TierSpec] = DEFAULT_TIERS,
        latency: LatencyModel | None = None,
        feasible: Feasible | None = None,
    ) -> None:
        self.config = config if config is not None else SLOGuardConfig()
        if self.config.reject_hopeless and latency is None:
            raise SLOGuardError("reject_hopeless needs a latency model (the engine's profile)")
        self.latency = latency
        self.feasible = feasible
        self._tiers = _tiers_by_priority(tiers)
        self.monitor = SLOMonitor(self.config.window_s, self.config.max_samples, self.config.quantile)
        # least important first: level k sheds every priority >= _sheddable[k - 1]
        self._sheddable = sorted((p for p in self._tiers if p > self.config.protected_priority), reverse=True)
        guarded = [t for t in self._tiers.values() if t.ttft_slo_s is not None or t.tpot_slo_s is not None]
        # a class with targets may shed the classes less important than itself
        self._ceiling = {t.priority: sum(1 for p in self._sheddable if p > t.priority) for t in guarded}
        self._guarded = sorted(p for p, ceiling in self._ceiling.items() if ceiling > 0)
        self._level = 0
        self._changed_s = -math.inf
        self._evaluated_s = -math.inf
        self._triggers: list[SLOReading] = []  # what raised each level in force, lowest level first
        self._futile_level, self._futile_until_s = 0, -math.inf  # levels from this one not tried again until
        self._pending: dict[int, dict[str, Request]] = {}  # admitted, no first token yet (TTFT lower bounds)
        self._queued: dict[int, dict[str, Request]] = {}  # waiting (only priorities with a limit)
        self.rejections: Counter[str] = Counter()  # by guard_rejection_kind

    # ---- state -----------------------------------------------------------------------------------------------
    @property
    def shed_level(self) -> int:
        """How many classes are shed now, least important first (0: none)."""
        return self._level

    @property
    def shed_from_priority(self) -> int | None:
        """Arrivals of this priority or less important are shed now; None when nothing is."""
        return self._sheddable[self._level - 1] if self._level else None

    def reading(self, priority: int, metric: Metric, now_s: float,
                since_s: float = -math.inf) -> SLOReading | None:
        """Class ``priority``'s quantile of ``metric`` over the window, with the waits of its requests still
        without a first token past the TTFT target; only what was observed, or arrived, after ``since_s``. None
        without a target or any observation."""
        target_s = self._target_s(priority, metric)
        if target_s is None:
            return None
        self.monitor.evict(now_s)
        values = self.monitor.values_s(priority, metric, since_s)
        if metric == "ttft":
            values = np.concatenate([values, self._late_waits_s(priority, target_s, now_s, since_s)])
        quantile_s = self.monitor.quantile_s(values)
        return None if quantile_s is None else SLOReading(priority, metric, quantile_s, target_s, values.size)

    def headroom(self, priority: int, now_s: float, since_s: float = -math.inf) -> float | None:
        """The class's worst headroom over the metrics with ``min_samples`` observations, or None."""
        worst = self._worst_reading(priority, now_s, since_s)
        return None if worst is None else worst.headroom

    # ---- admission -------------------------------------------------------------------------------------------
    def admit(self, request: Request, now_s: float) -> Admission:
        """Accept ``request`` or reject it with a reason that starts with one of :data:`REJECTION_PREFIXES`.
        Call it last in a policy's ``admit`` (it records the rejections it makes, and the admitted request
        must then reach :meth:`on_arrival`)."""
        if self.config.shedding and now_s >= self._evaluated_s + self.config.evaluate_every_s:
            self.evaluate(now_s)
        reason = self._hopeless(request, now_s) or self._shed(request) or self._queue_full(request)
        if reason is None:
            return Admission.accept()
        self.rejections[guard_rejection_kind(reason) or "other"] += 1
        return Admission.reject(reason)

    def _hopeless(self, request: Request, now_s: float) -> str | None:
        if not self.config.reject_hopeless or request.e2e_slo_s is None:
            return None
        bound_s = self.e2e_lower_bound_s(request, now_s)
        if bound_s <= request.e2e_slo_s:
            return None
        tokens = self._fewest_output_tokens(request)
        return (f"{HOPELESS} E2E at least {bound_s:.3g} s (prefill of {request.prompt_tokens} tokens and "
                f"{tokens} output token{'s' if tokens > 1 else ''} on an empty engine) over its "
                f"{request.e2e_slo_s:g} s target")

    def _shed(self, request: Request) -> str | None:
        threshold = self.shed_from_priority
        if threshold is None or request.priority < threshold:
            return None
        shed = [self._name(p) for p in self._sheddable[:self._level]]
        return f"{SHED} {self._describe(self._triggers[-1])}; {', '.join(shed)} shed"

    def _queue_full(self, request: Request) -> str | None:
        limit = self.config.waiting_limit(request.priority)
        if limit is None:
            return None
        waiting = self._count_waiting(request.priority)
        if waiting < limit:
            return None
        return f"{QUEUE_FULL} {waiting} {self._name(request.priority)} requests waiting, its limit {limit}"

    def e2e_lower_bound_s(self, request: Request, now_s: float) -> float:
        """A lower bound on ``request``'s E2E latency: time already waited, plus its prompt prefilled in one
        chunk and the decodes of the fewest tokens it can produce (:meth:`_fewest_output_tokens`), each step with
        nothing else in the batch. Exact for the step models here, which are sums over a batch's parts."""
        assert self.latency is not None, "e2e_lower_bound_s needs a latency model"
        prompt = request.prompt_tokens
        prefill_s = self.latency.step_time_s([(prompt, 0)], 0, 0)  # emits the first token
        # decode i computes output token i+1 on top of prompt + i cached tokens
        decodes_s = float(self.latency.decode_times_s(1, prompt, self._fewest_output_tokens(request) - 1).sum())
        return max(now_s - request.arrival_time_s, 0.0) + prefill_s + decodes_s

    @staticmethod
    def _fewest_output_tokens(request: Request) -> int:
        """One, or the smallest length ``predicted_output`` gives any probability, capped by the maximum."""
        predicted = request.predicted_output
        fewest = min(n for n, p in zip(predicted.lengths, predicted.probs, strict=True) if p > 0) \
            if predicted is not None else 1
        return max(1, min(fewest, request.max_output_tokens))

    # ---- callbacks -------------------------------------------------------------------------------------------
    def on_arrival(self, request: Request, now_s: float, *, ttft_reported: bool = True) -> None:
        """An admitted request enters the waiting queue. ``ttft_reported=False``: nobody will report its first
        token (a non-streamed answer seen through a gateway), so its wait is no lower bound on its TTFT and is not
        counted as one."""
        if ttft_reported and self._ttft_counts(request):
            self._pending.setdefault(request.priority, {})[request.request_id] = request
        self._enqueue(request)

    def on_preempt(self, request: Request, now_s: float) -> None:
        """A preempted request is back in the waiting queue."""
        self._enqueue(request)

    def on_tokens(self, request: Request, num_tokens: int, now_s: float) -> None:
        """Tokens emitted at ``now_s``: the first report is the request's TTFT. O(1) after that."""
        state = request.policy_state
        if FIRST_TOKEN_KEY in state or request.num_output_tokens < 1:
            return
        state[FIRST_TOKEN_KEY] = now_s
        pending = self._pending.get(request.priority)
        if pending is not None:
            pending.pop(request.request_id, None)
        if self._ttft_counts(request):
            self.monitor.record(request.priority, "ttft", now_s - request.arrival_time_s, now_s)

    def on_finish(self, request: Request, now_s: float) -> None:
        """A request ended at ``now_s``: with two tokens or more, one TPOT observation."""
        for tracked in (self._pending, self._queued):
            tracked.get(request.priority, {}).pop(request.request_id, None)
        first_s = request.policy_state.get(FIRST_TOKEN_KEY)
        tokens = request.num_output_tokens
        if first_s is not None and tokens >= 2 and (self.feasible is None or self.feasible(request, "tpot")):
            self.monitor.record(request.priority, "tpot", (now_s - first_s) / (tokens - 1), now_s)

    # ---- shedding --------------------------------------------------------------------------------------------
    def evaluate(self, now_s: float) -> None:
        """Re-judge the shed level at ``now_s``: raise it one class, undo a step that did not help, lower it one
        class, or keep it."""
        self._evaluated_s = now_s
        if now_s - self._changed_s < self.config.hold_s:
            return
        if not self._escalate(now_s) and not self._undo_futile(now_s):
            self._relax(now_s)

    def _escalate(self, now_s: float) -> bool:
        """One more class shed if a class that may shed it is at risk on what was observed since the last
        change (evidence the current level did not suffice), unless that level proved futile lately."""
        if self._level + 1 >= self._futile_level and now_s < self._futile_until_s:
            return False
        for priority in self._guarded:  # most important first: it names the cause
            if self._ceiling[priority] <= self._level:
                continue
            worst = self._worst_reading(priority, now_s, since_s=self._changed_s)
            if worst is not None and worst.headroom < self.config.shed_headroom:
                self._triggers.append(worst)
                self._change_level(self._level + 1, now_s)
                return True
        return False

    def _undo_futile(self, now_s: float) -> bool:
        """Readmit the last class shed when shedding it did not help: on what was observed since, the class it was
        shed for is still at risk and has won back less than ``min_gain`` of headroom (and nothing more may be shed
        for it). Shedding that does not restore the protected class's SLO only loses work (say the
        misses come from the protected class's own traffic); the level is not tried again for ``window_s``."""
        if not self._level:
            return False
        trigger = self._triggers[-1]
        fresh = self.reading(trigger.priority, trigger.metric, now_s, since_s=self._changed_s)
        if fresh is None or fresh.count < self.config.min_samples:
            return False
        helped = fresh.headroom >= trigger.headroom + self.config.min_gain
        if helped or fresh.headroom >= self.config.shed_headroom:
            return False
        self._futile_level, self._futile_until_s = self._level, now_s + self.config.window_s
        self._triggers.pop()
        self._change_level(self._level - 1, now_s)
        return True

    def _relax(self, now_s: float) -> None:
        """One class fewer shed when every class that justifies the level has ``resume_headroom`` over the
        whole window (or too few observations to judge)."""
        if not self._level:
            return
        for priority in self._guarded:
            if self._ceiling[priority] < self._level:
                continue
            worst = self._worst_reading(priority, now_s)
            if worst is not None and worst.headroom < self.config.resume_headroom:
                return
        self._triggers.pop()
        self._change_level(self._level - 1, now_s)

    def _change_level(self, level: int, now_s: float) -> None:
        self._level, self._changed_s = level, now_s

    def _worst_reading(self, priority: int, now_s: float, since_s: float = -math.inf) -> SLOReading | None:
        readings = [r for r in (self.reading(priority, m, now_s, since_s) for m in METRICS)
                    if r is not None and r.count >= self.config.min_samples]
        return min(readings, key=lambda r: r.headroom, default=None)

    def _describe(self, reading: SLOReading) -> str:
        label = f"p{self.config.quantile * 100:g} {reading.metric.upper()} {reading.quantile_s:.3g} s"
        if reading.headroom < 0:
            where = "over"
        else:
            where = f"within {self.config.shed_headroom:.0%} of"
        return f"{self._name(reading.priority)} {label} {where} its {reading.target_s:g} s target"

    # ---- bookkeeping -----------------------------------------------------------------------------------------
    def _target_s(self, priority: int, metric: Metric) -> float | None:
        tier = self._tiers.get(priority)
        if tier is None:
            return None
        return tier.ttft_slo_s if metric == "ttft" else tier.tpot_slo_s

    def _ttft_counts(self, request: Request) -> bool:
        """Whether the request's TTFT tells something about load: its class has a TTFT target that its prompt's
        prefill alone, on an empty engine, does not exceed (always, without a latency model), and the
        ``feasible`` judge, if any, finds it can be met on an idle engine."""
        target_s = self._target_s(request.priority, "ttft")
        if target_s is None:
            return False
        if self.feasible is not None and not self.feasible(request, "ttft"):
            return False
        return self.latency is None or self.latency.step_time_s([(request.prompt_tokens, 0)], 0, 0) <= target_s

    def _late_waits_s(self, priority: int, target_s: float, now_s: float, since_s: float) -> np.ndarray:
        """Waits of the class's requests that arrived after ``since_s``, have no first token yet and already
        waited longer than ``target_s`` (ended ones, which the core reports to no callback when dropped, are
        forgotten here)."""
        pending = self._pending.get(priority)
        if not pending:
            return np.empty(0, dtype=np.float64)
        for request_id in [i for i, r in pending.items() if r.state.is_terminal]:
            del pending[request_id]
        waits = (now_s - r.arrival_time_s for r in pending.values() if r.arrival_time_s > since_s)
        return np.fromiter((w for w in waits if w > target_s), dtype=np.float64)

    def _enqueue(self, request: Request) -> None:
        if self.config.waiting_limit(request.priority) is not None:
            self._queued.setdefault(request.priority, {})[request.request_id] = request

    def _count_waiting(self, priority: int) -> int:
        """Requests of ``priority`` in the waiting queue; forgets those that run or ended since (each request
        is forgotten once per wait, so the cost is the queue's length)."""
        queued = self._queued.get(priority)
        if not queued:
            return 0
        for request_id in [i for i, r in queued.items() if r.state not in WAITING_STATES]:
            del queued[request_id]
        return len(queued)

    def _name(self, priority: int) -> str:
        tier = self._tiers.get(priority)
        return tier.name if tier is not None else f"priority {priority}"


def _tiers_by_priority(tiers: Sequence[TierSpec]) -> dict[int, TierSpec]:
    by_priority: dict[int, TierSpec] = {}
    for tier in tiers:
        if tier.priority in by_priority:
            raise SLOGuardError(f"tiers: priority {tier.priority} is given to both "
                                f"{by_priority[tier.priority].name} and {tier.name}")
        by_priority[tier.priority] = tier
    return by_priority
