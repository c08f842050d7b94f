"""Where a replay's engine time differs from what a latency profile charges: the analysis half of
``semsched fidelity``.

Everything here is a pure function of the replay's :class:`~semsched.calibrate.replay.StepRecord` list and a
:class:`~semsched.latency.LatencyModel`: the wall time of the real steps split by where it went, the profile's
prediction for the very same batches, the split of the difference into named sources (step-time fit, time the
profile's timing does not cover, prefix-cache hits, idle wake-ups, warm-up), and the two counterfactual models the
report simulates with (:class:`ScaledLatency`: the profile scaled to the replay's engine time, and 5 % slower).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from semsched.calibrate.replay import ReplayResult, StepRecord
from semsched.latency import EngineOverheads, LatencyModel, ProfileInfo
from semsched.latency.base import FloatArray
from semsched.sim.speed import SpeedTrace

WARMUP_WINDOW_STEPS = 50
"""Steps at the start of a replay compared with the rest for a warm-up effect."""

PROFILED_TIMINGS = ("execute", "iteration", "step", "cycle")
"""What a profile's step time covers: ``execute`` (``schedule()`` return to ``update_from_output()`` entry: the
model), ``iteration`` (``schedule()`` entry to ``update_from_output()`` return), ``step`` (the whole
``LLMEngine.step()``, output processing included) or ``cycle`` (a step plus the serving loop's time before the
next one: everything the simulator's step stands for). Profiles that do not say are taken as ``cycle``."""


def profiled_time_s(step: StepRecord, timing: str) -> float:
    """The part of a real step that a profile measured with ``timing`` would cover."""
    if timing == "execute":
        return step.model_s
    if timing == "iteration":
        return step.schedule_s + step.model_s + step.update_s
    if timing == "step":
        return step.duration_s
    return step.duration_s + step.gap_before_s


def predicted_step_s(latency: LatencyModel, step: StepRecord) -> float:
    return latency.step_time_s(list(step.prefill), step.num_decode, step.decode_context_tokens)


@dataclass(frozen=True)
class StepTimes:
    """Where a real engine step's wall time went, in mean milliseconds per step; ``predicted_ms`` is what the
    profile charges for the same batches."""

    num_steps: int
    schedule_ms: float
    model_ms: float
    update_ms: float
    output_ms: float
    gap_ms: float
    predicted_ms: float

    @property
    def cycle_ms(self) -> float:
        return self.schedule_ms + self.model_ms + self.update_ms + self.output_ms + self.gap_ms

    @classmethod
    def of(cls, steps: Sequence[StepRecord], latency: LatencyModel) -> StepTimes:
        def mean_ms(values: Sequence[float]) -> float:
            return 1000.0 * float(np.mean(values)) if values else 0.0

        return cls(
            num_steps=len(steps),
            schedule_ms=mean_ms([s.schedule_s for s in steps]),
            model_ms=mean_ms([s.model_s for s in steps]),
            update_ms=mean_ms([s.update_s for s in steps]),
            output_ms=mean_ms([s.output_s for s in steps]),
            gap_ms=mean_ms([s.gap_before_s for s in steps]),
            predicted_ms=mean_ms([predicted_step_s(latency, s) for s in steps]),
        )


@dataclass(frozen=True)
class ErrorSource:
    """One reason the simulator's engine time differs from the real engine's: ``engine_s`` seconds over the run,
    positive when the real engine spent time the simulator does not charge (the simulator runs ahead)."""

    name: str
    engine_s: float
    note: str

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "engine_s": self.engine_s, "note": self.note}


@dataclass(frozen=True)
class StepClassFit:
    """How well the profile predicts one class of real steps (``real_ms``: the profiled quantity, mean)."""

    name: str
    num_steps: int
    real_ms: float
    predicted_ms: float

    @property
    def bias_s(self) -> float:
        """Real minus predicted seconds over the class's steps (+: the profile is too fast)."""
        return (self.real_ms - self.predicted_ms) * self.num_steps / 1000.0

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self) | {"bias_s": self.bias_s}


PREFILL_CLASS = "with prefill"
DECODE_CLASSES: tuple[tuple[str, int, int], ...] = (
    ("1-2 decodes", 1, 2),
    ("3-8 decodes", 3, 8),
    ("9+ decodes", 9, 1 << 30),
)
"""Decode-only steps are split by batch size: eq. 4-7 is linear in it, real steps are not quite."""
STEP_CLASSES = (PREFILL_CLASS, *(name for name, _, _ in DECODE_CLASSES))


def step_class(prefill: Sequence[tuple[int, int]], num_decode: int) -> str | None:
    """The class of a step: :data:`PREFILL_CLASS` if it has a prefill chunk, else its decode batch size's
    (``None`` for an empty step)."""
    if prefill:
        return PREFILL_CLASS
    for name, low, high in DECODE_CLASSES:
        if low <= num_decode <= high:
            return name
    return None


def step_class_fits(steps: Sequence[StepRecord], latency: LatencyModel, timing: str) -> list[StepClassFit]:
    """The profile's fit on each class of :data:`STEP_CLASSES` (empty classes left out)."""
    members: dict[str, list[StepRecord]] = {name: [] for name in STEP_CLASSES}
    for record in steps:
        name = step_class(record.prefill, record.num_decode)
        if name is not None:
            members[name].append(record)
    return _class_fits(members, latency, timing)


def _class_fits(
    members: Mapping[str, Sequence[StepRecord]], latency: LatencyModel, timing: str
) -> list[StepClassFit]:
    """The fit on each non-empty group of steps, in the mapping's order."""
    return [
        StepClassFit(
            name,
            len(group),
            1000.0 * float(np.mean([profiled_time_s(s, timing) for s in group])),
            1000.0 * float(np.mean([predicted_step_s(latency, s) for s in group])),
        )
        for name, group in members.items()
        if group
    ]


AFTER_CHANGE_CLASS = "decode-only right after a batch change"
STEADY_DECODE_CLASS = "other decode-only"


def batch_change_fits(steps: Sequence[StepRecord], latency: LatencyModel, timing: str) -> list[StepClassFit]:
    """The profile's fit on decode-only steps right after the batch changed (the step before had a prefill
    chunk, or another number of decodes: a request joined or left) and on the other decode-only steps. The
    profile's grid measures decode-only steps only once a batch has settled, so a cost of changing the batch
    (vLLM's worker updating its persistent batch) shows here and nowhere in the step classes."""
    members: dict[str, list[StepRecord]] = {AFTER_CHANGE_CLASS: [], STEADY_DECODE_CLASS: []}
    for record, changed in _decode_only_steps(steps):
        members[AFTER_CHANGE_CLASS if changed else STEADY_DECODE_CLASS].append(record)
    return _class_fits(members, latency, timing)


def _decode_only_steps(steps: Sequence[StepRecord]) -> Iterator[tuple[StepRecord, bool]]:
    """The decode-only steps, each with whether the batch changed right before it (the step before had a
    prefill chunk, or another number of decodes)."""
    previous: StepRecord | None = None
    for record in steps:
        if not record.prefill and record.num_decode:
            changed = previous is not None and (bool(previous.prefill) or previous.num_decode != record.num_decode)
            yield record, changed
        previous = record


@dataclass(frozen=True)
class ClassScaledLatency:
    """``base`` with each step class's time multiplied by its factor (1 for classes not given): the report's
    what-if of a profile whose shape matched the replay. Decode-only stretches keep one batch size, hence one
    class and factor, so ``decode_times_s`` stays bit-for-bit equal to ``step_time_s``."""

    base: LatencyModel
    factors: Mapping[str, float]

    @property
    def name(self) -> str:
        return f"{self.base.name}-by-class"

    def step_time_s(
        self, prefill: Sequence[tuple[int, int]], num_decode: int, decode_context_tokens: int
    ) -> float:
        return self.base.step_time_s(prefill, num_decode, decode_context_tokens) * self._factor(
            prefill, num_decode
        )

    def decode_times_s(self, num_decode: int, decode_context_tokens: int, num_steps: int) -> FloatArray:
        base: FloatArray = self.base.decode_times_s(num_decode, decode_context_tokens, num_steps)
        scaled: FloatArray = base * self._factor((), num_decode)
        return scaled

    def swap_time_s(self, num_tokens: int) -> float:
        return self.base.swap_time_s(num_tokens)

    def _factor(self, prefill: Sequence[tuple[int, int]], num_decode: int) -> float:
        name = step_class(prefill, num_decode)
        return self.factors.get(name, 1.0) if name is not None else 1.0


WINDOW_S = 3.0
"""Length of the replay windows over which :func:`window_ratios` compares real and predicted engine time."""


def window_ratios(
    steps: Sequence[StepRecord], latency: LatencyModel, window_s: float = WINDOW_S, min_busy: float = 0.3
) -> list[float]:
    """Real over predicted engine time in consecutive ``window_s`` windows of the replay that were at least
    ``min_busy`` busy. Against a class-corrected profile their spread is the machine's speed changing during
    the replay (plus the shape left inside each class)."""
    if not steps:
        return []
    real: dict[int, float] = {}
    predicted: dict[int, float] = {}
    for record in steps:
        window = int(record.start_s // window_s)
        real[window] = real.get(window, 0.0) + profiled_time_s(record, "cycle")
        predicted[window] = predicted.get(window, 0.0) + predicted_step_s(latency, record)
    return [real[w] / predicted[w] for w in sorted(real) if real[w] >= min_busy * window_s and predicted[w] > 0]


SPEED_WINDOW_S = 3.0
"""Window of :func:`machine_speed`: long enough to hold tens of settled decode-only steps while the engine is
busy, short against the minute-scale drift of the development machine's speed."""
SPEED_MIN_STEPS = 5
"""Settled decode-only steps a window needs for :func:`machine_speed` to measure it."""


def machine_speed(
    steps: Sequence[StepRecord],
    latency: LatencyModel,
    timing: str,
    window_s: float = SPEED_WINDOW_S,
    min_steps: int = SPEED_MIN_STEPS,
) -> SpeedTrace | None:
    """How fast the machine ran during a replay, against the profile: per ``window_s`` window, the real time of
    the settled decode-only steps (no prefill, same batch as the step before: the kind of step the profile's
    grid measures) over what ``latency`` charges for them, the part of each step the profile's ``timing``
    covers. A window with fewer than ``min_steps`` of them (the engine was idle or busy with prefills) takes its
    nearest measured neighbour's factor; ``None`` when no window was measured.

    The meter is the replay's own steady decode steps, so it also carries whatever the profile gets wrong on
    them on average; every other kind of step (prefills, the first step after a batch change), the overheads
    and every scheduling decision stay the simulator's own."""
    real: dict[int, list[float]] = {}
    predicted: dict[int, list[float]] = {}
    for record, changed in _decode_only_steps(steps):
        if changed:
            continue
        window = int(record.start_s // window_s)
        real.setdefault(window, []).append(profiled_time_s(record, timing))
        predicted.setdefault(window, []).append(predicted_step_s(latency, record))
    factors = {
        w: sum(real[w]) / sum(predicted[w]) for w in real if len(real[w]) >= min_steps and sum(predicted[w]) > 0
    }
    if not factors:
        return None
    return SpeedTrace.from_windows(window_s, [factors.get(w) for w in range(max(factors) + 1)])


def class_factors(steps: Sequence[StepRecord], latency: LatencyModel) -> dict[str, float]:
    """Per step class, the real steps' cycle time over what ``latency`` charges for them."""
    return {
        fit.name: fit.real_ms / fit.predicted_ms
        for fit in step_class_fits(steps, latency, "cycle")
        if fit.predicted_ms > 0
    }


def error_sources(
    result: ReplayResult, latency: LatencyModel, timing: str, overheads: EngineOverheads | None = None
) -> list[ErrorSource]:
    """The measurable sources, largest ``|engine_s|`` first. "step-time fit" and the overheads outside the
    profile's timing add up to the real steps' wall time minus what the profile charges for the same batches;
    the others act beside that per-step account. The two arrival sources count only what exceeds what the
    simulator charges for arrivals (the profile's ``overheads``: the request intake per arrival, and waking from
    idle per arrival that found the engine idle)."""
    overheads = overheads or EngineOverheads()
    arrival_overhead_s = overheads.arrival_s
    steps = result.steps
    busy_arrivals = sum(1 for r in result.requests if r.added_s is not None and not r.found_idle)
    covered = sum(profiled_time_s(s, timing) for s in steps)
    predicted = sum(predicted_step_s(latency, s) for s in steps)
    classes = step_class_fits(steps, latency, timing)
    worst = max(classes, key=lambda c: abs(c.bias_s), default=None)
    where = (
        f"; most in steps with {worst.name} ({worst.num_steps} steps, real {worst.real_ms:.2f} vs profile "
        f"{worst.predicted_ms:.2f} ms)"
        if worst is not None
        else ""
    )
    sources = [
        ErrorSource(
            "step-time fit",
            covered - predicted,
            f"the profile vs the same ('{timing}') time measured on this run's {len(steps)} steps{where}",
        )
    ]
    if timing == "execute":
        sources.append(
            ErrorSource(
                "scheduler and output bookkeeping",
                sum(s.schedule_s + s.update_s for s in steps),
                "semsched policy + vLLM schedule() and update_from_output(), outside 'execute' timing",
            )
        )
    if timing in ("execute", "iteration"):
        sources.append(
            ErrorSource(
                "output processing (detokenisation)",
                sum(s.output_s for s in steps),
                "inside LLMEngine.step() after the engine core returns; not in the profile",
            )
        )
    if timing != "cycle":
        sources.append(
            ErrorSource(
                "engine loop between steps",
                sum(s.gap_before_s for s in steps) - busy_arrivals * arrival_overhead_s,
                "adding arrivals (rendering, input processing), has_unfinished_requests"
                + _beyond_intake(busy_arrivals, arrival_overhead_s),
            )
        )
    sources.append(_prefix_cache_source(result, latency))
    sources.append(_idle_wakeup_source(result, overheads))
    sources.append(_warmup_source(steps, latency, timing))
    return sorted(sources, key=lambda s: -abs(s.engine_s))


def _prefix_cache_source(result: ReplayResult, latency: LatencyModel) -> ErrorSource:
    cached = [s.cached_tokens for s in result.steps if s.cached_tokens]
    saved_s = sum(
        latency.step_time_s([(tokens, 0)], 0, 0) - latency.step_time_s([(0, 0)], 0, 0) for tokens in cached
    )
    return ErrorSource(
        "prefix-cache hits",
        -saved_s,
        f"{sum(cached):,} prompt/recompute tokens found in the cache, which the simulator computes",
    )


def _idle_wakeup_source(result: ReplayResult, overheads: EngineOverheads) -> ErrorSource:
    delays = [r.loop_delay_s for r in result.requests if r.found_idle and r.loop_delay_s is not None]
    mean_ms = 1000.0 * float(np.mean(delays)) if delays else 0.0
    charged = overheads.arrival_s + overheads.idle_wakeup_s
    if charged <= 0:
        beyond = "; not in the profile"
    else:
        beyond = (
            f"; beyond what the simulator charges ({1000.0 * overheads.arrival_s:.2f} ms intake + "
            f"{1000.0 * overheads.idle_wakeup_s:.2f} ms wake-up x {len(delays)} arrivals; the wake-up also "
            "pays for their slower first step, which counts in the step-time fit)"
        )
    return ErrorSource(
        "arrival handling on an idle engine",
        sum(delays) - len(delays) * charged,
        f"{len(delays)} arrivals found the engine idle; {mean_ms:.2f} ms each from arrival to being added{beyond}",
    )


def _beyond_intake(arrivals: int, arrival_overhead_s: float) -> str:
    if arrival_overhead_s <= 0:
        return "; not in the profile"
    return (
        f"; beyond the profile's request intake ({1000.0 * arrival_overhead_s:.2f} ms x {arrivals} arrivals, "
        "charged by the simulator)"
    )


def _warmup_source(steps: Sequence[StepRecord], latency: LatencyModel, timing: str) -> ErrorSource:
    window = WARMUP_WINDOW_STEPS
    if len(steps) <= 2 * window:
        return ErrorSource("warm-up", 0.0, "too few steps to tell")
    residual = [profiled_time_s(s, timing) - predicted_step_s(latency, s) for s in steps]
    excess = (float(np.mean(residual[:window])) - float(np.mean(residual[window:]))) * window
    return ErrorSource(
        "warm-up", excess, f"the first {window} steps vs the rest, beyond the profile (after a warm-up batch)"
    )


def step_fit_mape(steps: Sequence[StepRecord], latency: LatencyModel, timing: str) -> float:
    """Mean absolute percentage error of the profile on this run's steps (against the ``timing`` quantity)."""
    apes = [
        abs(predicted_step_s(latency, s) - profiled_time_s(s, timing)) / profiled_time_s(s, timing)
        for s in steps
        if profiled_time_s(s, timing) > 0
    ]
    return float(np.mean(apes)) if apes else 0.0


@dataclass(frozen=True)
class ScaledLatency:
    """``base`` with every step (and transfer) time multiplied by ``factor``: the what-if models of the report.

    Keeps the :class:`~semsched.latency.LatencyModel` promises: an empty step costs 0, and ``decode_times_s``
    stays bit-for-bit equal to ``step_time_s`` (both are the base's value times the same factor)."""

    base: LatencyModel
    factor: float

    @property
    def name(self) -> str:
        return f"{self.base.name}x{self.factor:.3g}"

    def step_time_s(
        self, prefill: Sequence[tuple[int, int]], num_decode: int, decode_context_tokens: int
    ) -> float:
        return self.base.step_time_s(prefill, num_decode, decode_context_tokens) * self.factor

    def decode_times_s(self, num_decode: int, decode_context_tokens: int, num_steps: int) -> FloatArray:
        times: FloatArray = self.base.decode_times_s(num_decode, decode_context_tokens, num_steps) * self.factor
        return times

    def swap_time_s(self, num_tokens: int) -> float:
        return self.base.swap_time_s(num_tokens) * self.factor


def engine_time_ratio(steps: Sequence[StepRecord], latency: LatencyModel) -> float:
    """Real engine time (every step's cycle: its wall time plus the loop's time before the next) over what
    ``latency`` charges for the same batches; 1.0 when nothing was charged."""
    predicted = sum(predicted_step_s(latency, s) for s in steps)
    return sum(profiled_time_s(s, "cycle") for s in steps) / predicted if predicted > 0 else 1.0


PROBE_FIT_KEY = "probe_step_s"
"""The ``fit`` entry of a profile made by ``semsched fidelity``: the engine-speed probe when it was measured."""


def speed_drift(result: ReplayResult, profile: ProfileInfo) -> float | None:
    """How much slower the machine ran the engine-speed probe around this replay than when the profile was
    measured (1.1: 10 % slower); ``None`` when the profile or the replay has no probe."""
    profiled = profile.fit.get(PROBE_FIT_KEY)
    probes = [p for p in (result.probe_before_s, result.probe_after_s) if p is not None and np.isfinite(p)]
    if isinstance(profiled, bool) or not isinstance(profiled, int | float) or profiled <= 0 or not probes:
        return None
    return float(np.mean(probes)) / float(profiled)


def profile_timing(profile: ProfileInfo) -> str:
    """What the profile's step time covers (its ``fit.timing``; ``cycle`` when it does not say)."""
    timing = profile.fit.get("timing")
    return timing if isinstance(timing, str) and timing in PROFILED_TIMINGS else "cycle"
