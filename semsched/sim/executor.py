"""The simulated GPU: an executor runs a scheduler's plan and reports when it ended.

The simulation drives each instance as nano-vllm's ``LLMEngine.step()`` does: the scheduler forms a plan, the
executor runs it (:meth:`Executor.execute` returns the :class:`~semsched.core.plan.StepResult`), the scheduler
applies the result. Here the executor is a model of the engine, :class:`ModelExecutor`: a step lasts what the
latency model says plus the engine time outside it (:class:`~semsched.latency.EngineOverheads`), all of it
scaled by the machine's speed (:class:`~semsched.sim.speed.SpeedTrace`) and, for an engine whose real times
differ from its profile, by a :class:`~semsched.sim.ground_truth.TruthSampler` (noise and drift); with
speculative decoding a :class:`DraftAcceptance` says how many tokens each decode emitted.

Fast-forward: when the scheduler says a decode-only plan would repeat unchanged for ``k`` steps, the executor
prices all of them at once (:meth:`Executor.execute_repeated`), bit for bit as ``k`` calls of ``execute`` would;
a speculative engine first says what each decode's next rounds would yield (:meth:`Executor.accepted_rounds`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Protocol

import numpy as np
from mypy_extensions import mypyc_attr

from semsched.core.errors import SemschedError
from semsched.core.plan import BatchPlan, StepResult
from semsched.latency.analytic import AnalyticLatencyModel
from semsched.latency.base import LatencyModel
from semsched.latency.profiles import EngineOverheads
from semsched.sim.ground_truth import TruthSampler
from semsched.sim.speed import SpeedTrace

#: a fast-forwarded stretch of at most this many steps is priced step by step (``LatencyModel.step_time_s``), a
#: longer one with one ``decode_times_s`` call: the same times (the latency model's promise), at less cost each way
SCALAR_STRETCH_STEPS = 32


class SimulationError(SemschedError):
    """The simulation cannot go on: e.g. a latency profile gave a step a time that is not a finite number."""


class DraftAcceptance(Protocol):
    """Speculative decoding's yield (seed 004): how many tokens each decode of a step emitted.

    Each value is 1 (no draft accepted) to ``1 + num_lookahead_tokens`` (every draft plus the bonus token);
    requests left out emitted one. The scheduler applies them (``StepResult.accepted_tokens``).
    """

    def accepted_tokens(self, plan: BatchPlan, end_time_s: float) -> Mapping[str, int]: ...


class Executor(Protocol):
    """What a simulated instance needs from the engine under its scheduler.

    Promises: ``execute`` returns a result ending no earlier than ``now_s``; ``execute_repeated`` returns the
    end times that the same number of ``execute`` calls would give for repetitions of a decode-only plan, or
    None when it cannot price them at once (the simulation then calls ``execute`` for one step).
    """

    def take_arrival(self, *, engine_idle: bool) -> None:
        """An arrival was accepted (``engine_idle``: the instance had nothing to run); its intake delays the
        next step."""
        ...

    def execute(self, plan: BatchPlan, now_s: float) -> StepResult:
        """Run ``plan``, starting at ``now_s``."""
        ...

    def can_repeat(self, plan: BatchPlan, now_s: float, until_s: float) -> bool:
        """Cheap check before fast-forward: repetitions of decode-only ``plan`` cost the same per step, and a
        second one could start before ``until_s`` (the next arrival)."""
        ...

    def accepted_rounds(self, plan: BatchPlan, rounds: int) -> np.ndarray | None:
        """For a speculative engine: the tokens each decode of ``plan`` would emit in each of its next ``rounds``
        rounds (an integer array, a row per round, a column per decode in ``plan.decode``'s order), drawing
        nothing; None when every decode emits one token."""
        ...

    def execute_repeated(
        self, plan: BatchPlan, now_s: float, steps: int, until_s: float, accepted: np.ndarray | None = None
    ) -> list[float] | None:
        """End times of up to ``steps`` repetitions of decode-only ``plan`` from ``now_s``, each ending
        before ``until_s`` (the next arrival is then handled between steps); None when fewer than two do.
        ``accepted``: the rounds' yields, as :meth:`accepted_rounds` gave them (the rounds returned are then
        drawn)."""
        ...


@mypyc_attr(allow_interpreted_subclasses=True)  # SpeculativeExecutor (semsched.sim.speculative) extends it
class ModelExecutor:
    """An engine as a latency model: a step's engine time is the request intake charged since the last step
    (``overheads.arrival_s`` per accepted arrival, plus ``idle_wakeup_s`` for one that found the engine idle),
    ``overheads.new_shape_s`` the first time a batch size (scheduled tokens) runs unless it is in
    ``warm_shapes``, and the latency model's step time (plus swap time); ``speed`` multiplies all of it by the
    machine's factor at the step's start. ``truth``, when given, multiplies it again by the ground truth's factor
    for the step (drift at its start times a noise draw from the sampler's own generator): the step's real time,
    which the profile the scheduler estimates with does not know; it turns fast-forward off, as ``speed`` does.
    ``drafts``, when given, decides each step's speculative yield."""

    def __init__(
        self,
        latency: LatencyModel,
        *,
        overheads: EngineOverheads | None = None,
        warm_shapes: Iterable[int] = (),
        speed: SpeedTrace | None = None,
        drafts: DraftAcceptance | None = None,
        truth: TruthSampler | None = None,
    ) -> None:
        overheads = EngineOverheads() if overheads is None else overheads
        if not isinstance(overheads, EngineOverheads):
            raise TypeError(f"overheads: expected EngineOverheads, got {type(overheads).__name__}")
        if speed is not None and not isinstance(speed, SpeedTrace):
            raise TypeError(f"speed: expected SpeedTrace or None, got {type(speed).__name__}")
        if truth is not None and not isinstance(truth, TruthSampler):
            raise TypeError(f"truth: expected TruthSampler or None, got {type(truth).__name__}")
        if not isinstance(latency, LatencyModel):
            raise TypeError(f"latency: expected a LatencyModel, got {type(latency).__name__}")
        self.latency = latency
        #: the latency model again when it is the analytic one, which the compiled executor then calls natively
        self.analytic = latency if isinstance(latency, AnalyticLatencyModel) else None
        self.overheads = overheads
        #: batch sizes this engine has run (or warmed up): they cost no ``new_shape_s``
        self.warm_shapes = set(warm_shapes)
        self.speed = speed
        self.drafts = drafts
        self.truth = truth
        #: intake time of arrivals since the last step started, charged to the next step
        self.pending_s = 0.0

    def take_arrival(self, *, engine_idle: bool) -> None:
        self.pending_s += self.overheads.arrival_s
        if engine_idle:  # an engine loop that slept meets cold caches
            self.pending_s += self.overheads.idle_wakeup_s

    def execute(self, plan: BatchPlan, now_s: float) -> StepResult:
        engine_s = self.pending_s + self._shape_cost_s(plan) + self.step_time_s(plan)
        self.pending_s = 0.0
        if self.speed is not None:
            engine_s *= self.speed.factor_at(now_s)
        if self.truth is not None:
            engine_s *= self.truth.factor(now_s)
        end_s = now_s + engine_s
        if not now_s <= end_s < math.inf:
            raise SimulationError(
                f"{self.latency.name}: a step of {plan.num_tokens} tokens starting at {now_s!r} s would end at "
                f"{end_s!r} s; the latency model and overheads must give every step a finite time >= 0"
            )
        if self.drafts is None:
            return StepResult(end_s)
        return StepResult(end_s, accepted_tokens=self.drafts.accepted_tokens(plan, end_s))

    def can_repeat(self, plan: BatchPlan, now_s: float, until_s: float) -> bool:
        return self._priced_alike(plan) and now_s + self.step_time_s(plan) < until_s

    def _priced_alike(self, plan: BatchPlan) -> bool:
        """Whether repetitions of ``plan`` are priced by the latency model alone, each as the one before."""
        if self.pending_s or self.speed is not None or self.drafts is not None or self.truth is not None:
            return False  # an intake to charge; a factor, or a yield, that may change from one step to the next
        # its first step costs extra; the steps after it can repeat
        return not (self.overheads.new_shape_s and plan.num_tokens not in self.warm_shapes)

    def accepted_rounds(self, plan: BatchPlan, rounds: int) -> np.ndarray | None:
        return None

    def execute_repeated(
        self, plan: BatchPlan, now_s: float, steps: int, until_s: float, accepted: np.ndarray | None = None
    ) -> list[float] | None:
        num_decode, context = len(plan.decode), plan.decode_context_tokens
        if steps <= SCALAR_STRETCH_STEPS:
            # a short stretch (most of them: the next arrival ends it) step by step, each step's time as
            # execute() prices it, up to the first that would not end before until_s: numpy's fixed cost per
            # call is more than a few steps' prices
            analytic = self.analytic
            step_time_s = self.latency.step_time_s
            ends: list[float] = []
            end_s = now_s
            for index in range(steps):
                tokens = context + index * num_decode
                if analytic is not None:
                    end_s += analytic.step_time_s((), num_decode, tokens)
                else:
                    end_s += step_time_s((), num_decode, tokens)
                if not end_s < until_s:  # (never one that ends at inf or NaN: execute() reports that one)
                    break
                ends.append(end_s)
            return ends if len(ends) >= 2 else None
        durations = self.latency.decode_times_s(num_decode, context, steps)
        # accumulated left to right, as consecutive execute() calls add them
        times = np.add.accumulate(np.concatenate(([now_s], durations)))[1:]
        # the steps that end before until_s (never one that ends at inf or NaN: execute() reports that one)
        fitting = int(np.searchsorted(times, until_s, side="left"))
        return times[:fitting].tolist() if fitting >= 2 else None

    def step_time_s(self, plan: BatchPlan) -> float:
        """What the latency model charges for ``plan`` (its swap traffic included), overheads excluded."""
        latency, analytic = self.latency, self.analytic
        prefill = [(c.num_tokens, c.context_tokens) for c in plan.prefill]
        if analytic is not None:
            duration = analytic.step_time_s(prefill, len(plan.decode), plan.decode_context_tokens)
        else:
            duration = latency.step_time_s(prefill, len(plan.decode), plan.decode_context_tokens)
        swap_tokens = plan.swap_in_tokens + plan.swap_out_tokens
        if swap_tokens:
            duration += latency.swap_time_s(swap_tokens)
        return duration

    def _shape_cost_s(self, plan: BatchPlan) -> float:
        """``new_shape_s`` if ``plan`` is the first step of its batch size (which it marks as run), else 0."""
        cost = self.overheads.new_shape_s
        if not cost or plan.num_tokens in self.warm_shapes:
            return 0.0
        self.warm_shapes.add(plan.num_tokens)
        return cost
