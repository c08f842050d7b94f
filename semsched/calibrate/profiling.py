"""Measure a real vLLM engine's step latencies and fit the simulator's batch model to them (``semsched profile``).

How a profile is made:

1. **Recording.** :func:`recording_scheduler_cls` is vLLM's own ``Scheduler`` plus a :class:`StepRecorder`. For
   every step it records the batch composition in the simulator's terms (prefill chunks as ``(lq, lkv)``
   pairs, the number of decodes and their summed context; :func:`step_composition`) and two durations:
   ``execute_s`` from ``schedule()`` returning to ``update_from_output()`` being entered (the model's forward
   pass and sampling) and ``iteration_s`` from ``schedule()`` entry to ``update_from_output()`` return (adds
   the scheduler's own work). The engine runs in-process and without async scheduling, so steps do not
   overlap and the driver reads the records straight from the scheduler.
2. **Driving.** :func:`measure_grid` makes the engine run the compositions of a :class:`ProfileGrid`: per
   *block* it admits ``D`` requests with ``C``-token prompts that decode until aborted, runs ``decode_steps``
   decode-only steps, then injects one ``P``-token prefill per ``P``, which vLLM's chunked prefill cuts into the
   chunks :func:`expected_chunks` predicts. The whole grid is run ``repeats`` times, one round after another.
   Prompts are random token ids (no tokenizer effects) and prefix caching is off (no accidental cache hits).
   Every measured step is checked against the composition the driver expected; a mismatch (a preemption, a
   changed batching rule) stops the run with :class:`ProfilingError` rather than fitting mislabelled data.
3. **Outliers.** The ``repeats`` measurements of one step form a group, and one of them becomes the group's fit
   sample, with its own exact composition (:func:`representative_steps`). A repeat that was the first step of
   its batch size (tokens computed) on the engine is left out: vLLM's CPU backend builds a matmul primitive per
   new size, a one-time cost the profile keeps apart as ``overheads.new_shape_s``
   (:func:`new_shape_overhead_s`). By default it is the fastest (``min``):
   another process on the machine, a page fault or a first-time kernel shape only ever *slows* a step, so the
   fastest repeat is the best estimate of what the step costs the engine alone (the argument of Python's
   ``timeit``). ``median`` keeps the typical repeat instead, for a machine the engine has to itself; ``mean``
   keeps the median repeat's composition with the repeats' mean times, for a simulator that must reproduce
   *mean* latencies on a machine whose slow moments are part of what the engine costs there.
4. **Fit.** Relative-error, non-negative least squares of PROSERVE eq. 4-7 plus a fixed cost per prefill chunk
   ``d_p`` (:func:`fit_steps`); a profile file needs coefficients >= 0. On the tiny CPU model ``d_p`` takes about
   a millisecond that eq. 4-7 alone would put into ``t_c``, overcharging every small decode-only step.

vLLM (and torch) are imported only when an engine starts, so the grid, the recorder and the fitting code can be
used and tested without them.
"""

from __future__ import annotations

import csv
import functools
import gc
import itertools
import math
import os
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, Self, cast

import numpy as np

from semsched.core.errors import SemschedError
from semsched.latency.base import BatchSample
from semsched.latency.batch import CHUNK_FEATURE, FEATURE_NAMES, BatchLatencyModel, FitReport, evaluate, fit
from semsched.latency.profiles import FitValue, ProfiledEngine, check_profile_name, save_profile
from semsched.vllm.environ import temporary_environ

if TYPE_CHECKING:
    from vllm import LLM

Timing = Literal["execute", "iteration"]
TIMINGS: tuple[Timing, ...] = ("execute", "iteration")
Statistic = Literal["min", "median", "mean"]
STATISTICS: tuple[Statistic, ...] = ("min", "median", "mean")
Dtype = Literal["auto", "half", "float16", "bfloat16", "float", "float32"]
DTYPES: tuple[Dtype, ...] = ("auto", "half", "float16", "bfloat16", "float", "float32")
GRID_NAMES = ("quick", "full")
ProgressCallback = Callable[[int, int], None]
"""Called with (measured steps done, measured steps in the grid)."""

_CPU_KV_CACHE_BYTES = 1 << 30
FIRST_PROMPT_TOKEN_ID = 10
"""Random prompt token ids start here: clear of special tokens (bos/eos/unk/pad are single digits in common
vocabularies). The profiler and the replay draw prompts the same way."""


class ProfilingError(SemschedError):
    """The engine could not be profiled as asked: bad settings, or it ran a batch the driver did not expect."""


# ---- what one step was --------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class StepComposition:
    """A batch in the simulator's terms: prefill chunks ``(lq, lkv)``, decodes and their summed context."""

    prefill: tuple[tuple[int, int], ...]
    num_decode: int
    decode_context_tokens: int

    @property
    def num_tokens(self) -> int:
        """Tokens the step computes (its batch size): see :func:`batch_tokens`."""
        return batch_tokens(self.prefill, self.num_decode)


def batch_tokens(prefill: Sequence[tuple[int, int]], num_decode: int) -> int:
    """Tokens a step computes, its batch size (the row count of every matmul): the prefill chunks' query tokens
    plus one per decode."""
    return sum(lq for lq, _ in prefill) + num_decode


@dataclass(frozen=True, slots=True)
class StepRecord:
    """One engine step as the recording scheduler saw it. Durations are seconds of wall time
    (``time.perf_counter``), except ``execute_cpu_s``: the CPU time this process used meanwhile
    (``time.process_time``, all threads), a diagnostic: on a CPU engine, a repeat with much less CPU time per
    wall second than its siblings was kept waiting for a core by another process."""

    composition: StepComposition
    execute_s: float
    iteration_s: float
    execute_cpu_s: float = math.nan

    def time_s(self, timing: Timing) -> float:
        return self.execute_s if timing == "execute" else self.iteration_s

    def sample(self, timing: Timing = "execute") -> BatchSample:
        c = self.composition
        return BatchSample(c.prefill, c.num_decode, c.decode_context_tokens, self.time_s(timing))


class _NewRequestData(Protocol):
    @property
    def req_id(self) -> str: ...

    @property
    def num_computed_tokens(self) -> int: ...


class _CachedRequestData(Protocol):
    @property
    def req_ids(self) -> Sequence[str]: ...

    @property
    def num_computed_tokens(self) -> Sequence[int]: ...


class SchedulerOutputLike(Protocol):
    """The fields of vLLM's ``SchedulerOutput`` that a composition is read from (computed counts are the
    values before the step, as vLLM sends them to the model runner)."""

    @property
    def scheduled_new_reqs(self) -> Sequence[_NewRequestData]: ...

    @property
    def scheduled_cached_reqs(self) -> _CachedRequestData: ...

    @property
    def num_scheduled_tokens(self) -> Mapping[str, int]: ...


class RequestLike(Protocol):
    """The fields of vLLM's ``Request`` that tell a decode from a prefill chunk."""

    @property
    def num_prompt_tokens(self) -> int: ...

    @property
    def num_tokens(self) -> int: ...


def step_composition(output: SchedulerOutputLike, requests: Mapping[str, RequestLike]) -> StepComposition:
    """The composition of the step that ``output`` schedules; ``requests`` maps request ids to vLLM requests.

    A decode computes the one token sampled last (``num_prompt_tokens <= computed == num_tokens - 1`` and one
    scheduled token), exactly the simulator's rule; anything else, including a one-token chunk of a prompt or
    of a recompute after preemption, is a prefill chunk ``(scheduled, computed)``.
    """
    computed_before = {new.req_id: new.num_computed_tokens for new in output.scheduled_new_reqs}
    cached = output.scheduled_cached_reqs
    computed_before.update(zip(cached.req_ids, cached.num_computed_tokens, strict=True))
    prefill: list[tuple[int, int]] = []
    num_decode = decode_context_tokens = 0
    for req_id, num_new in output.num_scheduled_tokens.items():
        computed = computed_before[req_id]
        request = requests[req_id]
        if num_new == 1 and request.num_prompt_tokens <= computed == request.num_tokens - 1:
            num_decode += 1
            decode_context_tokens += computed
        elif num_new > 0:
            prefill.append((num_new, computed))
    return StepComposition(tuple(prefill), num_decode, decode_context_tokens)


class StepRecorder:
    """Collects a :class:`StepRecord` per non-empty step; the recording scheduler calls it around vLLM's code.

    Call order per step: :meth:`schedule_started`, :meth:`scheduled`, :meth:`update_started`,
    :meth:`update_finished`. The clocks are injectable so tests are deterministic.
    """

    def __init__(
        self,
        clock: Callable[[], float] = time.perf_counter,
        cpu_clock: Callable[[], float] = time.process_time,
    ) -> None:
        self._clock = clock
        self._cpu_clock = cpu_clock
        self._records: list[StepRecord] = []
        self._pending: StepComposition | None = None
        self._schedule_start_s = self._execute_start_s = self._execute_end_s = 0.0
        self._cpu_start_s = self._cpu_end_s = 0.0

    def schedule_started(self) -> None:
        self._schedule_start_s = self._clock()

    def scheduled(self, output: SchedulerOutputLike, requests: Mapping[str, RequestLike]) -> None:
        composition = step_composition(output, requests)
        empty = not composition.prefill and composition.num_decode == 0
        self._pending = None if empty else composition
        # last: the composition bookkeeping is not execution
        self._cpu_start_s = self._cpu_clock()
        self._execute_start_s = self._clock()

    def update_started(self) -> None:
        self._execute_end_s = self._clock()
        self._cpu_end_s = self._cpu_clock()

    def update_finished(self) -> None:
        if self._pending is None:
            return
        execute_s = self._execute_end_s - self._execute_start_s
        iteration_s = self._clock() - self._schedule_start_s
        cpu_s = self._cpu_end_s - self._cpu_start_s
        self._records.append(StepRecord(self._pending, execute_s, iteration_s, cpu_s))
        self._pending = None

    def take(self) -> list[StepRecord]:
        """The records since the last call, oldest first."""
        records, self._records = self._records, []
        return records


@functools.cache
def recording_scheduler_cls() -> type[Any]:
    """vLLM's ``Scheduler`` with a :class:`StepRecorder` in its ``recorder`` attribute (imports vLLM).

    Pass it as ``scheduler_cls`` to an in-process engine; it changes no scheduling decision.
    """
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.engine import EngineCoreOutputs
    from vllm.v1.outputs import ModelRunnerOutput

    class RecordingScheduler(Scheduler):
        """vLLM's scheduler, unchanged, recording each step's composition and duration."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.recorder = StepRecorder()

        def schedule(self, throttle_prefills: bool = False) -> SchedulerOutput:
            self.recorder.schedule_started()
            output = super().schedule(throttle_prefills)
            self.recorder.scheduled(output, self.requests)
            return output

        def update_from_output(
            self, scheduler_output: SchedulerOutput, model_runner_output: ModelRunnerOutput
        ) -> dict[int, EngineCoreOutputs]:
            self.recorder.update_started()
            outputs = super().update_from_output(scheduler_output, model_runner_output)
            self.recorder.update_finished()
            return outputs

    return RecordingScheduler


# ---- the engine and the grid ----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class EngineSettings:
    """How the profiled vLLM engine is configured (vLLM's argument names).

    ``num_gpu_blocks=None`` sizes the KV cache so that every sequence can reach ``max_model_len``:
    ``max_num_seqs * ceil(max_model_len / block_size)`` blocks (:attr:`kv_blocks`). On CPU, vLLM needs
    ``block_size`` to be a multiple of 32. ``enforce_eager=False`` lets vLLM compile the model (slow to start on
    CPU); profile with what you serve with.
    """

    model: str
    max_model_len: int = 2048
    max_num_seqs: int = 16
    max_num_batched_tokens: int = 512
    block_size: int = 32
    num_gpu_blocks: int | None = None
    dtype: Dtype = "bfloat16"
    seed: int = 0
    enforce_eager: bool = True

    def __post_init__(self) -> None:
        for name in ("max_model_len", "max_num_seqs", "max_num_batched_tokens", "block_size"):
            _require_int(name, getattr(self, name), 1)
        _require_int("max_num_seqs", self.max_num_seqs, 2)  # one prefill beside at least one decode
        _require_int("max_num_batched_tokens", self.max_num_batched_tokens, self.max_num_seqs)
        if self.num_gpu_blocks is not None:
            _require_int("num_gpu_blocks", self.num_gpu_blocks, _blocks(self.max_model_len, self.block_size))
        if not self.model:
            raise ProfilingError("model: give the model directory")
        if self.dtype not in DTYPES:
            raise ProfilingError(f"dtype: expected one of {', '.join(DTYPES)} (got {self.dtype!r})")
        _require_int("seed", self.seed, 0)

    @property
    def kv_blocks(self) -> int:
        """KV blocks the engine gets."""
        if self.num_gpu_blocks is not None:
            return self.num_gpu_blocks
        return self.max_num_seqs * _blocks(self.max_model_len, self.block_size)


@dataclass(frozen=True, slots=True)
class ProfileGrid:
    """Which batch compositions to measure.

    A *block* is ``D`` decoding requests (from ``decode_batch_sizes``; 0 means prefill-only) whose prompts were
    ``C`` tokens long (from ``decode_context_tokens``; unused when ``D`` is 0). One run of a block is
    ``decode_steps`` decode-only steps (when ``D`` > 0), then, for every ``P`` in ``prefill_tokens``, one
    request with a ``P``-token prompt whose prefill runs beside the ``D`` decodes, cut into
    :func:`expected_chunks` by the token budget (prompts longer than the budget give chunks with ``lkv`` > 0).

    The grid is run ``repeats`` times over, every block once per round, so the repeats of one step lie far apart
    in time and a burst of load from another process rarely hits all of them. ``warmup_repeats`` unmeasured runs
    of the largest-``D``, shortest-``C`` block come first.
    """

    decode_batch_sizes: tuple[int, ...]
    decode_context_tokens: tuple[int, ...]
    prefill_tokens: tuple[int, ...]
    decode_steps: int = 4
    repeats: int = 3
    warmup_repeats: int = 1

    def __post_init__(self) -> None:
        for name, minimum in (("decode_batch_sizes", 0), ("decode_context_tokens", 1), ("prefill_tokens", 1)):
            values = getattr(self, name)
            if not values:
                raise ProfilingError(f"{name}: give at least one value")
            for value in values:
                _require_int(name, value, minimum)
            if len(set(values)) != len(values):
                raise ProfilingError(f"{name}: values must be distinct (got {values})")
        _require_int("decode_steps", self.decode_steps, 0)
        _require_int("repeats", self.repeats, 1)
        _require_int("warmup_repeats", self.warmup_repeats, 0)

    def blocks(self) -> list[tuple[int, int]]:
        """The ``(D, C)`` blocks in measuring order; the prefill-only block is ``(0, 0)``."""
        prefill_only = [(0, 0)] if 0 in self.decode_batch_sizes else []
        decoding = sorted(d for d in self.decode_batch_sizes if d > 0)
        return prefill_only + [(d, c) for d in decoding for c in sorted(self.decode_context_tokens)]

    def describe(self) -> str:
        """The grid in one line, e.g. ``D=0,1 C=64 P=16,512 decode_steps=4``."""
        values = (self.decode_batch_sizes, self.decode_context_tokens, self.prefill_tokens)
        d, c, p = (",".join(map(str, v)) for v in values)
        return f"D={d} C={c} P={p} decode_steps={self.decode_steps}"

    def warmup_block(self) -> tuple[int, int]:
        return max(self.blocks(), key=lambda block: (block[0], -block[1]))

    def steps_per_repeat(self, num_decode: int, token_budget: int) -> int:
        """Measured steps in one run of a block with ``num_decode`` decodes."""
        decode_steps = self.decode_steps if num_decode else 0
        chunks = sum(len(expected_chunks(p, token_budget, num_decode)) for p in self.prefill_tokens)
        return decode_steps + chunks

    def num_measured_steps(self, token_budget: int) -> int:
        return sum(self.repeats * self.steps_per_repeat(d, token_budget) for d, _ in self.blocks())

    def check(self, settings: EngineSettings) -> None:
        """Raise :class:`ProfilingError`, naming the field and the limit, if the engine cannot run the grid."""
        if max(self.decode_batch_sizes) > settings.max_num_seqs - 1:
            raise ProfilingError(
                f"decode_batch_sizes: at most max_num_seqs - 1 = {settings.max_num_seqs - 1} decodes leave room "
                f"for a prefill (got {max(self.decode_batch_sizes)})"
            )
        if max(self.prefill_tokens) > settings.max_model_len - 1:
            raise ProfilingError(
                f"prefill_tokens: at most max_model_len - 1 = {settings.max_model_len - 1} "
                f"(got {max(self.prefill_tokens)})"
            )
        for num_decode, context in self.blocks():
            if num_decode:
                self._check_block(settings, num_decode, context)

    def _check_block(self, settings: EngineSettings, num_decode: int, context: int) -> None:
        length = _decoder_length_bound(self, settings, num_decode, context)
        if length > settings.max_model_len:
            limit = context - (length - settings.max_model_len)
            raise ProfilingError(
                f"decode_context_tokens: {context} tokens with {num_decode} decodes grow to {length} tokens in "
                f"their block, over max_model_len = {settings.max_model_len}; use at most {limit} or a larger "
                "max_model_len"
            )
        blocks = num_decode * _blocks(length, settings.block_size) + _blocks(
            max(self.prefill_tokens) + 1, settings.block_size
        )
        if blocks > settings.kv_blocks:
            raise ProfilingError(
                f"num_gpu_blocks: the block D={num_decode}, C={context} needs {blocks} KV blocks of "
                f"{settings.block_size} tokens, more than the {settings.kv_blocks} available"
            )


def expected_chunks(prompt_tokens: int, token_budget: int, num_decode: int) -> list[tuple[int, int]]:
    """The ``(lq, lkv)`` chunks vLLM's chunked prefill cuts a ``prompt_tokens`` prompt into while
    ``num_decode`` requests decode beside it: running decodes are scheduled first, the prefill gets the rest of
    the token budget each step."""
    room = token_budget - num_decode
    if room < 1 or prompt_tokens < 1:
        raise ValueError(f"no prefill room: budget {token_budget}, {num_decode} decodes, {prompt_tokens} tokens")
    return [(min(room, prompt_tokens - done), done) for done in range(0, prompt_tokens, room)]


def make_grid(name: str, settings: EngineSettings, *, repeats: int | None = None) -> ProfileGrid:
    """The named grid scaled to the engine: ``quick`` (hundreds of steps) or ``full`` (thousands).

    Decode batches span 1 to ``max_num_seqs - 1``, contexts a fraction of ``max_model_len`` to about half of
    it (``full``: to three quarters), prefills 16 tokens to twice the token budget (``full``: four times).
    """
    seqs, length, budget = settings.max_num_seqs, settings.max_model_len, settings.max_num_batched_tokens
    sizes: tuple[int, ...]
    contexts: tuple[int, ...]
    prefills: tuple[int, ...]
    if name == "quick":
        sizes = (0, 1, seqs // 4, seqs // 2, seqs - 1)
        contexts = (length // 16, length // 4, length // 2)
        prefills = (16, 64, budget // 2, budget, 2 * budget)
        grid = ProfileGrid(_distinct(sizes, 0), _distinct(contexts, 1), _distinct(prefills, 1, length - 1))
    elif name == "full":
        sizes = (0, *(2**k for k in range(seqs.bit_length()) if 2**k < seqs - 1), seqs - 1)
        contexts = (length // 32, length // 8, length // 4, length // 2, 3 * length // 4)
        prefills = (8, 32, 128, budget // 4, budget // 2, budget, 2 * budget, 4 * budget)
        grid = ProfileGrid(_distinct(sizes, 0), _distinct(contexts, 1), _distinct(prefills, 1, length - 1), 8, 5)
    else:
        raise ProfilingError(f"grid: unknown grid {name!r}; expected one of {', '.join(GRID_NAMES)}")
    if repeats is not None:
        grid = replace(grid, repeats=repeats)
    return _fit_contexts(grid, settings)


def _fit_contexts(grid: ProfileGrid, settings: EngineSettings) -> ProfileGrid:
    """Lower contexts that would outgrow ``max_model_len`` during their block (a named grid must always run)."""
    contexts = []
    for context in grid.decode_context_tokens:
        worst = max(
            (_decoder_length_bound(grid, settings, d, context) for d in grid.decode_batch_sizes if d), default=0
        )
        contexts.append(context - max(0, worst - settings.max_model_len))
    return replace(grid, decode_context_tokens=_distinct(contexts, 1))


def _decoder_length_bound(grid: ProfileGrid, settings: EngineSettings, num_decode: int, context: int) -> int:
    """Longest a decoding request of a block gets: its prompt, the steps while the others are admitted, the
    first decode-only step and the measured steps."""
    budget = settings.max_num_batched_tokens
    admission_steps = math.ceil(num_decode * context / max(1, budget - num_decode)) + 1
    return context + admission_steps + 1 + grid.steps_per_repeat(num_decode, budget)


# ---- measuring ------------------------------------------------------------------------------------------------
class ProfilingEngine(Protocol):
    """What :func:`measure_grid` steers: an engine that runs one step at a time and says what it ran."""

    def add_request(self, request_id: str, prompt_tokens: int, max_tokens: int) -> None:
        """Queue a request with a ``prompt_tokens``-token prompt that generates ``max_tokens`` tokens."""
        ...

    def step(self) -> StepRecord | None:
        """Run one engine step; its record, or ``None`` if nothing was scheduled."""
        ...

    def abort(self, request_ids: Sequence[str]) -> None:
        """Abort the requests and free their KV cache now."""
        ...

    def has_unfinished(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class StepKey:
    """Which step of a block a measurement is: its repeats share a key and form one outlier group."""

    num_decode: int
    context_tokens: int
    phase: Literal["decode", "prefill"]
    prefill_tokens: int  # P of the injected prefill; 0 in the decode phase
    index: int  # decode step, or chunk of the prefill

    @property
    def label(self) -> str:
        if self.phase == "decode":
            return f"D={self.num_decode} C={self.context_tokens} decode step {self.index}"
        return f"D={self.num_decode} C={self.context_tokens} P={self.prefill_tokens} chunk {self.index}"


@dataclass(frozen=True, slots=True)
class MeasuredStep:
    """A recorded step, labelled with its place in the grid and the round (0-based) it was measured in.
    ``first_shape``: no earlier step on this engine had its batch size (see :func:`new_shape_overhead_s`)."""

    key: StepKey
    repeat: int
    record: StepRecord
    first_shape: bool = False


@dataclass(frozen=True, slots=True)
class _Expected:
    key: StepKey
    prefill: tuple[tuple[int, int], ...]


@dataclass
class _Driver:
    """Runs the blocks of a grid on an engine and checks every step against the expected composition."""

    engine: ProfilingEngine
    grid: ProfileGrid
    settings: EngineSettings
    progress: ProgressCallback | None = None
    measured: list[MeasuredStep] = field(default_factory=list)
    _ids: Iterator[int] = field(default_factory=itertools.count)
    #: batch sizes of every step this driver ran (warm-ups and admissions included)
    _shapes: set[int] = field(default_factory=set)
    _last_was_new: bool = False

    def run(self) -> list[MeasuredStep]:
        for _ in range(self.grid.warmup_repeats):
            self._block(*self.grid.warmup_block(), repeat=None)
        for repeat in range(self.grid.repeats):
            for num_decode, context in self.grid.blocks():
                self._block(num_decode, context, repeat=repeat)
        return self.measured

    def _block(self, num_decode: int, context: int, *, repeat: int | None) -> None:
        """Run one block; record its steps as repeat ``repeat`` (``None``: a warm-up, not recorded)."""
        total = self.grid.num_measured_steps(self.settings.max_num_batched_tokens)
        decoders = self._admit(num_decode, context)
        for expected in self._block_plan(num_decode, context):
            step = self._step(expected, num_decode)
            if repeat is not None:
                self.measured.append(MeasuredStep(expected.key, repeat, step, first_shape=self._last_was_new))
                if self.progress is not None:
                    self.progress(len(self.measured), total)
        self.engine.abort(decoders)
        if self.engine.has_unfinished():
            raise ProfilingError("requests were left in the engine after a block: it ran steps nobody planned")

    def _admit(self, num_decode: int, context: int) -> list[str]:
        """Start ``num_decode`` requests that decode until aborted; step until all of them decode (that first
        decode-only step is not measured)."""
        decoders = [f"decode-{next(self._ids)}" for _ in range(num_decode)]
        if not decoders:
            return decoders
        for request_id in decoders:
            self.engine.add_request(request_id, context, self.settings.max_model_len - context)
        budget = self.settings.max_num_batched_tokens
        limit = math.ceil(num_decode * context / (budget - num_decode)) + 2
        for _ in range(limit):
            step = self._engine_step()
            if step is None or step.composition.prefill:
                continue
            if step.composition.num_decode != num_decode:
                raise ProfilingError(
                    f"admitting {num_decode} decodes of {context} tokens: a decode-only step ran "
                    f"{step.composition.num_decode} (was a request preempted? give more KV blocks)"
                )
            return decoders
        raise ProfilingError(f"admitting {num_decode} decodes of {context} tokens took over {limit} steps")

    def _block_plan(self, num_decode: int, context: int) -> Iterator[_Expected]:
        """The measured steps of a block, in order; queues each prefill request just before its first chunk."""
        if num_decode:
            for index in range(self.grid.decode_steps):
                yield _Expected(StepKey(num_decode, context, "decode", 0, index), ())
        for prompt in self.grid.prefill_tokens:
            self.engine.add_request(f"prefill-{next(self._ids)}", prompt, 1)
            chunks = expected_chunks(prompt, self.settings.max_num_batched_tokens, num_decode)
            for index, chunk in enumerate(chunks):
                yield _Expected(StepKey(num_decode, context, "prefill", prompt, index), (chunk,))

    def _engine_step(self) -> StepRecord | None:
        """One engine step; ``_last_was_new`` says whether its batch size was new to this engine."""
        step = self.engine.step()
        self._last_was_new = step is not None and step.composition.num_tokens not in self._shapes
        if step is not None:
            self._shapes.add(step.composition.num_tokens)
        return step

    def _step(self, expected: _Expected, num_decode: int) -> StepRecord:
        step = self._engine_step()
        if step is not None and (step.composition.prefill, step.composition.num_decode) == (
            expected.prefill,
            num_decode,
        ):
            return step
        raise ProfilingError(
            f"{expected.key.label}: expected prefill chunks {list(expected.prefill)} beside {num_decode} decodes, "
            f"the engine ran {step.composition if step else 'nothing'} (a preemption, or a batching rule this "
            "driver does not know)"
        )


def measure_grid(
    engine: ProfilingEngine,
    grid: ProfileGrid,
    settings: EngineSettings,
    progress: ProgressCallback | None = None,
) -> list[MeasuredStep]:
    """Run ``grid`` on ``engine`` (configured as ``settings``) and return every measured step in order."""
    grid.check(settings)
    return _Driver(engine, grid, settings, progress).run()


def representative_steps(
    steps: Sequence[MeasuredStep], timing: Timing = "execute", statistic: Statistic = "min"
) -> list[MeasuredStep]:
    """One step per :class:`StepKey`, in the order the groups were first measured: the fastest of its repeats
    (``min``), the median one (``median``; the lower median for an even count), or the median one with its
    times replaced by the repeats' means (``mean``: what a latency sum over many such steps adds up to).

    A repeat that was the first step of its batch size on its engine (``first_shape``) is left out when its
    group has others: its one-time cost is :func:`new_shape_overhead_s`, which the simulator charges apart."""
    groups = _groups(steps)
    chosen = []
    for group in groups.values():
        group = [s for s in group if not s.first_shape] or group
        ordered = sorted(group, key=lambda s: s.record.time_s(timing))
        step = ordered[0] if statistic == "min" else ordered[(len(ordered) - 1) // 2]
        if statistic == "mean":
            record = replace(
                step.record,
                execute_s=float(np.mean([s.record.execute_s for s in group])),
                iteration_s=float(np.mean([s.record.iteration_s for s in group])),
            )
            step = replace(step, record=record)
        chosen.append(step)
    return chosen


def new_shape_overhead_s(steps: Sequence[MeasuredStep], timing: Timing = "execute") -> float | None:
    """The one-time cost of a batch size new to the engine: over the step groups that have both, the median of
    (a first-shape repeat's time - the mean of the group's other repeats), at least 0; ``None`` when no group
    has both (a single round, or an engine that had run every size before).

    vLLM's CPU backend builds a oneDNN matmul primitive per number of scheduled tokens the first time it runs
    one (and keeps a bounded number of them), so on the tiny test model a prefill of a size never run before took
    about 3 ms longer than the same prefill run again, whatever the size."""
    excess: list[float] = []
    for group in _groups(steps).values():
        first = [s.record.time_s(timing) for s in group if s.first_shape]
        others = [s.record.time_s(timing) for s in group if not s.first_shape]
        if first and others:
            excess.extend(t - float(np.mean(others)) for t in first)
    return max(0.0, float(np.median(excess))) if excess else None


_lone_ids = itertools.count()  # ids of the requests intake_times_s and wakeup_times_s add
INTAKE_REQUESTS = 32
"""Requests whose intake :func:`intake_times_s` times: the profile's ``overheads.arrival_s`` is the median."""
INTAKE_DECODES = 4
INTAKE_CONTEXT_TOKENS = 256


def intake_times_s(
    engine: ProfilingEngine, settings: EngineSettings, num_requests: int = INTAKE_REQUESTS
) -> list[float]:
    """Seconds each of ``num_requests`` ``add_request`` calls took (drawing the prompt's token ids included) with
    prompts of half the token budget, each made right after a decode step of :data:`INTAKE_DECODES` running
    requests, as a serving loop adds arrivals between steps (the profile's ``overheads.arrival_s`` is the median).
    Timed so, an add of a 256-token prompt took a median 0.50 ms on the tiny model; back to back on an idle
    engine, 0.16-0.24 ms: the step before leaves the caches cold. Every timed request is aborted before it runs;
    the decodes are aborted at the end."""
    if isinstance(num_requests, bool) or not isinstance(num_requests, int) or num_requests < 1:
        raise ProfilingError(f"num_requests: must be an integer >= 1 (got {num_requests!r})")
    if engine.has_unfinished():
        raise ProfilingError("intake_times_s: the engine still has requests; it must be idle to start")
    prompt_tokens = max(1, settings.max_num_batched_tokens // 2)
    context_tokens = max(1, min(INTAKE_CONTEXT_TOKENS, settings.max_model_len - num_requests - 32))
    decoders = [f"intake-decode-{next(_lone_ids)}" for _ in range(INTAKE_DECODES)]
    for request_id in decoders:
        engine.add_request(request_id, context_tokens, num_requests + 16)
    for _ in range(context_tokens + 16):  # their prefills first: the timed adds follow decode steps
        step = engine.step()
        if step is not None and not step.composition.prefill:
            break
    times = []
    for _ in range(num_requests):
        engine.step()
        request_id = f"intake-{next(_lone_ids)}"
        started = time.perf_counter()
        engine.add_request(request_id, prompt_tokens, 4)
        times.append(time.perf_counter() - started)
        engine.abort([request_id])
    engine.abort(decoders)
    while engine.has_unfinished():
        engine.step()
    return times


WAKEUP_IDLE_S = 0.1
"""How long :func:`wakeup_times_s` leaves the engine idle: the replayed Azure slice's idle stretches last a median
0.18 s, and the cost of waking was about the same from 20 ms on (``benchmarks/idle_wakeup.py``)."""
WAKEUP_TRIALS = 8
"""Lone requests :func:`wakeup_times_s` serves after an idle stretch, and as many after a busy one."""


def wakeup_times_s(
    engine: ProfilingEngine, trials: int, prompt_tokens: int, idle_s: float = WAKEUP_IDLE_S
) -> tuple[list[float], list[float]]:
    """Seconds from arrival to first token of a lone ``prompt_tokens``-token request (``add_request``, then steps
    until it is done, as a serving loop does): ``(busy, idle)``, ``trials`` each, alternating. A *busy* one
    arrives as the request before it finishes; an *idle* one after the loop slept ``idle_s`` (until its arrival
    time, as a serving loop sleeps). :func:`idle_wakeup_overhead_s` turns them into the profile's
    ``overheads.idle_wakeup_s``. On this CPU waking cost 1.4-1.7 ms after 20 to 500 ms of idleness and 0.6 ms
    after 2 ms (one run of ``benchmarks/idle_wakeup.py``, which sweeps ``idle_s``)."""
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 1:
        raise ProfilingError(f"trials: must be an integer >= 1 (got {trials!r})")
    if not (math.isfinite(idle_s) and idle_s > 0):
        raise ProfilingError(f"idle_s: must be a number > 0 (got {idle_s!r})")

    def serve() -> None:
        engine.add_request(f"lone-{next(_lone_ids)}", prompt_tokens, 1)
        while engine.has_unfinished():
            engine.step()

    if engine.has_unfinished():
        raise ProfilingError("wakeup_times_s: the engine still has requests; it must be idle to start")
    busy: list[float] = []
    idle: list[float] = []
    serve()  # the first timed request then follows a finished one, like the rest
    for _ in range(trials):
        for times, sleep_s in ((busy, 0.0), (idle, idle_s)):
            arrival = time.perf_counter() + sleep_s
            if sleep_s:
                time.sleep(max(0.0, arrival - time.perf_counter()))
            serve()
            times.append(time.perf_counter() - arrival)
    return busy, idle


def idle_wakeup_overhead_s(busy: Sequence[float], idle: Sequence[float]) -> float | None:
    """What waking from idle costs (the profile's ``overheads.idle_wakeup_s``): the median idle arrival-to-first-
    token time minus the median busy one, at least 0; ``None`` without both."""
    if not busy or not idle:
        return None
    return max(0.0, float(np.median(idle)) - float(np.median(busy)))


def _groups(steps: Sequence[MeasuredStep]) -> dict[StepKey, list[MeasuredStep]]:
    groups: dict[StepKey, list[MeasuredStep]] = {}
    for step in steps:
        groups.setdefault(step.key, []).append(step)
    return groups


def repeat_spread(steps: Sequence[MeasuredStep], timing: Timing = "execute") -> float:
    """Median over step groups of (median repeat time / fastest repeat time - 1); 0 with one repeat."""
    spreads = []
    for group in _groups(steps).values():
        times = [step.record.time_s(timing) for step in group]
        spreads.append(np.median(times) / min(times) - 1.0)
    return float(np.median(spreads))


def fit_steps(
    steps: Sequence[MeasuredStep], *, name: str, timing: Timing = "execute", statistic: Statistic = "min"
) -> tuple[BatchLatencyModel, FitReport, FitReport]:
    """Fit eq. 4-7 to the :func:`representative_steps` of ``steps``: the model, its report on those samples and
    its report on every measured step. Raises :class:`ProfilingError` if the steps cannot identify every
    coefficient."""
    samples = [step.record.sample(timing) for step in representative_steps(steps, timing, statistic)]
    try:
        model, report = fit(samples, name=name, relative_error=True, nonnegative=True, per_chunk_constant=True)
    except ValueError as error:
        raise ProfilingError(f"cannot fit the batch model to this grid: {error}") from None
    return model, report, evaluate(model, [step.record.sample(timing) for step in steps])


# ---- vLLM ---------------------------------------------------------------------------------------------------
class InProcessEngine:
    """What the in-process engines that profile and replay share: a running ``LLMEngine`` stepped one step at a
    time, prompts of random token ids drawn from ``settings.seed``, abort, and shutdown. :class:`VllmEngine`
    (the recording scheduler, for ``semsched profile``) and :class:`semsched.calibrate.replay.ServedEngine` (the
    replay's engine, for ``semsched fidelity``) start their engines and time their steps differently. Use as a
    context manager, or call :meth:`close`."""

    def __init__(self, settings: EngineSettings, engine: Any, *, owner: object = None) -> None:
        self.settings = settings
        self._engine: Any = engine
        self._owner = owner  # what must stay alive with the engine (the vllm.LLM it belongs to), if anything
        try:
            config = engine.vllm_config
            self._vocab_size = int(config.model_config.get_vocab_size())
            self.profiled_engine = describe_engine(settings, config)
        except BaseException:
            self.close()
            raise
        self._rng = np.random.default_rng(settings.seed)

    @property
    def llm_engine(self) -> Any:
        """The running ``LLMEngine``; an error once closed."""
        if self._engine is None:
            raise ProfilingError("the engine is closed")
        return self._engine

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def prompt_token_ids(self, prompt_tokens: int) -> list[int]:
        """``prompt_tokens`` random token ids (the engine's next draw)."""
        ids: list[int] = self._rng.integers(FIRST_PROMPT_TOKEN_ID, self._vocab_size, size=prompt_tokens).tolist()
        return ids

    def abort(self, request_ids: Sequence[str]) -> None:
        self.llm_engine.abort_request(list(request_ids))

    def has_unfinished(self) -> bool:
        return bool(self.llm_engine.has_unfinished_requests())

    def close(self) -> None:
        """Shut the engine down and free its memory (idempotent)."""
        if self._engine is not None:
            self._engine.engine_core.shutdown()
            self._engine = self._owner = None
            gc.collect()


class VllmEngine(InProcessEngine):
    """An in-process ``vllm.LLM`` with the recording scheduler: the :class:`ProfilingEngine` of ``semsched
    profile``. Steps report the recording scheduler's timings."""

    def __init__(self, settings: EngineSettings) -> None:
        llm = _start_llm(settings)
        try:
            scheduler = _in_process_core(llm).scheduler
            recorder = getattr(scheduler, "recorder", None)
            if not isinstance(recorder, StepRecorder):
                raise ProfilingError(f"vLLM did not use the recording scheduler (it made {type(scheduler)})")
        except BaseException:
            llm.llm_engine.engine_core.shutdown()
            raise
        super().__init__(settings, llm.llm_engine, owner=llm)
        self._recorder = recorder

    @property
    def llm(self) -> LLM:
        """The running ``vllm.LLM``; an error once closed."""
        if self._owner is None:
            raise ProfilingError("the profiling engine is closed")
        return cast("LLM", self._owner)

    def add_request(self, request_id: str, prompt_tokens: int, max_tokens: int) -> None:
        from vllm import SamplingParams

        # greedy, as the replay samples: random sampling costs a little more per step and the profile would
        # charge it to every simulated step of a greedy workload
        params = SamplingParams(max_tokens=max_tokens, ignore_eos=True, detokenize=False, temperature=0.0)
        token_ids = self.prompt_token_ids(prompt_tokens)
        (prompt,) = self.llm_engine.renderer.render_cmpl([{"prompt_token_ids": token_ids}])
        self.llm_engine.add_request(request_id, prompt, params)

    def step(self) -> StepRecord | None:
        self.llm_engine.step()
        records = self._recorder.take()
        if len(records) > 1:
            raise ProfilingError(f"one engine step ran {len(records)} batches; is async scheduling on?")
        return records[0] if records else None


def _start_llm(settings: EngineSettings) -> LLM:
    # In-process engine core: the driver steps it and reads the scheduler's records directly.
    with temporary_environ({"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}):
        from vllm import LLM
        from vllm.platforms import current_platform

        kv_cache_memory_bytes = None
        if current_platform.is_cpu():
            if settings.block_size % 32:
                raise ProfilingError(f"block_size: must be a multiple of 32 on CPU (got {settings.block_size})")
            if not os.environ.get("VLLM_CPU_KVCACHE_SPACE"):
                # Without an explicit KV size, vLLM-CPU refuses to start unless 92 % of the machine's memory is
                # free; the block override decides what is allocated, so any explicit size that fits will do.
                kv_cache_memory_bytes = _CPU_KV_CACHE_BYTES
        llm = LLM(
            model=settings.model,
            max_model_len=settings.max_model_len,
            max_num_seqs=settings.max_num_seqs,
            max_num_batched_tokens=settings.max_num_batched_tokens,
            block_size=settings.block_size,
            num_gpu_blocks_override=settings.kv_blocks,
            dtype=settings.dtype,
            seed=settings.seed,
            enforce_eager=settings.enforce_eager,
            scheduler_cls=recording_scheduler_cls(),
            enable_chunked_prefill=True,
            enable_prefix_caching=False,
            async_scheduling=False,
            kv_cache_memory_bytes=kv_cache_memory_bytes,
        )
    return llm


def _in_process_core(llm: LLM) -> Any:
    """The engine core of an in-process engine (``llm.llm_engine.engine_core.engine_core``), checked to run
    one step at a time."""
    core = getattr(llm.llm_engine.engine_core, "engine_core", None)
    if core is None:
        raise ProfilingError(
            "vLLM runs its engine core in a subprocess here; profiling needs it in-process "
            "(VLLM_ENABLE_V1_MULTIPROCESSING=0 before vLLM is first used in this process)"
        )
    if core.batch_queue is not None:
        raise ProfilingError("vLLM overlaps steps (batch queue / async scheduling); profiling needs one at a time")
    return core


def describe_engine(settings: EngineSettings, vllm_config: Any) -> ProfiledEngine:
    """The profile file's ``engine`` section for an engine built from ``settings`` (the model path resolved when
    it is a local directory)."""
    import vllm
    from vllm.platforms import current_platform

    cache = vllm_config.cache_config
    scheduler = vllm_config.scheduler_config
    return ProfiledEngine(
        engine="vllm",
        engine_version=str(vllm.__version__),
        model=str(Path(settings.model).resolve()) if Path(settings.model).exists() else settings.model,
        device=str(current_platform.device_type),
        dtype=str(vllm_config.model_config.dtype).removeprefix("torch."),
        block_size=int(cache.block_size),
        num_gpu_blocks=int(cache.num_gpu_blocks),
        max_num_batched_tokens=int(scheduler.max_num_batched_tokens),
        max_num_seqs=int(scheduler.max_num_seqs),
        max_model_len=int(vllm_config.model_config.max_model_len),
    )


# ---- the result -----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ProfileResult:
    """A measured and fitted profile. ``report`` is the fit on its samples (one representative repeat per step
    of the grid), ``all_steps_report`` the same model on every measured step (disturbed repeats included)."""

    model: BatchLatencyModel
    report: FitReport
    all_steps_report: FitReport
    engine: ProfiledEngine
    settings: EngineSettings
    grid: ProfileGrid
    grid_name: str
    timing: Timing
    statistic: Statistic
    steps: tuple[MeasuredStep, ...]
    wall_s: float
    #: arrival-to-first-token seconds of lone requests after a busy and after an idle loop (:func:`wakeup_times_s`)
    wakeup_s: tuple[tuple[float, ...], tuple[float, ...]] = ((), ())
    #: seconds of each timed request intake (:func:`intake_times_s`)
    intake_s: tuple[float, ...] = ()

    @property
    def samples(self) -> list[BatchSample]:
        """The fit's samples: one representative repeat per step of the grid."""
        return [step.record.sample(self.timing) for step in self._representatives()]

    def _representatives(self) -> list[MeasuredStep]:
        return representative_steps(self.steps, self.timing, self.statistic)

    @property
    def median_overhead_s(self) -> float:
        """Median scheduler time per step that ``execute`` timing leaves out (iteration - execute)."""
        return float(np.median([s.record.iteration_s - s.record.execute_s for s in self.steps]))

    @property
    def repeat_spread(self) -> float:
        """How much the repeats of one step disagree: the median over steps of (median repeat / fastest
        repeat - 1). Small on a quiet machine; large when other processes competed for it, which limits the
        fit."""
        return repeat_spread(self.steps, self.timing)

    @property
    def new_shape_s(self) -> float | None:
        """The one-time cost of a batch size new to the engine (:func:`new_shape_overhead_s`)."""
        return new_shape_overhead_s(self.steps, self.timing)

    @property
    def idle_wakeup_s(self) -> float | None:
        """What waking from idle costs the engine (:func:`idle_wakeup_overhead_s`)."""
        return idle_wakeup_overhead_s(*self.wakeup_s)

    def overheads(self) -> dict[str, float]:
        """The profile file's ``overheads``: what was measured of them."""
        measured = {
            "arrival_s": float(np.median(self.intake_s)) if self.intake_s else None,
            "new_shape_s": self.new_shape_s,
            "idle_wakeup_s": self.idle_wakeup_s,
        }
        return {name: value for name, value in measured.items() if value is not None}

    @property
    def zero_coefficients(self) -> list[str]:
        """Coefficients the non-negative fit pinned at 0 (terms too small to resolve in these measurements)."""
        return [name for name in _COEFFICIENTS if getattr(self.model.config, name) == 0.0]

    def fit_metadata(self) -> dict[str, FitValue]:
        """The profile file's ``fit`` section."""
        return {
            "method": f"relative-error non-negative least squares on the {self.statistic} of each step's repeats",
            "statistic": self.statistic,
            "timing": self.timing,
            "grid": self.grid_name,
            "grid_spec": self.grid.describe(),
            "repeats": self.grid.repeats,
            "num_samples": self.report.num_samples,
            "num_measured_steps": len(self.steps),
            "mape": self.report.mape,
            "median_ape": self.report.median_ape,
            "p90_ape": self.report.p90_ape,
            "max_ape": self.report.max_ape,
            "residual_rms_s": self.report.residual_rms_s,
            "all_steps_mape": self.all_steps_report.mape,
            "repeat_spread": self.repeat_spread,
            "median_overhead_s": self.median_overhead_s,
            "wall_s": round(self.wall_s, 1),
            "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }

    def description(self) -> str:
        """The profile file's ``description``: the engine, the grid and the fit in one paragraph."""
        e = self.engine
        return (
            f"PROSERVE batch model (eq. 4-7) measured on {e.engine} {e.engine_version} ({e.device}, {e.dtype}) "
            f"with {Path(e.model).name}: block_size {e.block_size}, {e.num_gpu_blocks} KV blocks, "
            f"max_num_batched_tokens {e.max_num_batched_tokens}, max_num_seqs {e.max_num_seqs}, max_model_len "
            f"{e.max_model_len}, chunked prefill on, prefix caching off, "
            f"{'eager' if self.settings.enforce_eager else 'compiled'}. Grid '{self.grid_name}': "
            f"{len(self.steps)} measured steps, {self.report.num_samples} fit samples (the {self.statistic} of "
            f"{self.grid.repeats} repeats each); MAPE {self.report.mape:.1%}, p90 APE {self.report.p90_ape:.1%}. "
            f"Step time = {self.timing} time. "
            "Swap is not modelled (vLLM preempts by recompute): kv_transfer_s_per_token = 0."
        )

    def save(self, path: str | Path, *, command: str = "") -> None:
        """Write the profile file (loadable by :func:`~semsched.latency.load_profile`)."""
        source = f"Measured by `{command}`." if command else "Measured by semsched.calibrate.profiling."
        save_profile(
            self.model,
            path,
            description=self.description(),
            source=source,
            engine=self.engine,
            fit=self.fit_metadata(),
            overheads=self.overheads(),
        )

    def write_steps_csv(self, path: str | Path) -> None:
        """Every measured step: its group, composition, durations and whether it was its group's fit sample."""
        kept = {id(step) for step in self._representatives()}
        with Path(path).open("w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            writer.writerow(_CSV_HEADER)
            writer.writerows(_csv_row(step, id(step) in kept) for step in self.steps)


_COEFFICIENTS = ("t_c", "a_p", "b_p", "c_p", "a_d", "b_d", "d_p")
_CSV_HEADER = (
    "group",
    "repeat",
    "prefill_chunks",
    "num_decode",
    "decode_context_tokens",
    "execute_s",
    "iteration_s",
    "execute_cpu_s",
    "first_shape",
    "fit_sample",
    *FEATURE_NAMES[1:],
    CHUNK_FEATURE,
)


def _csv_row(step: MeasuredStep, kept: bool) -> list[object]:
    record, composition = step.record, step.record.composition
    prefill = composition.prefill
    return [
        step.key.label,
        step.repeat,
        " ".join(f"{lq}:{lkv}" for lq, lkv in prefill),
        composition.num_decode,
        composition.decode_context_tokens,
        f"{record.execute_s:.6f}",
        f"{record.iteration_s:.6f}",
        f"{record.execute_cpu_s:.6f}",
        step.first_shape,
        kept,
        sum(lq * lq for lq, _ in prefill),
        sum(lq * lkv for lq, lkv in prefill),
        sum(lq for lq, _ in prefill),
        composition.decode_context_tokens,
        composition.num_decode,
        len(prefill),
    ]


def profile_vllm(
    settings: EngineSettings,
    grid: ProfileGrid,
    *,
    name: str,
    grid_name: str = "custom",
    timing: Timing = "execute",
    statistic: Statistic = "min",
    progress: ProgressCallback | None = None,
) -> ProfileResult:
    """Start an in-process vLLM engine with ``settings``, measure ``grid`` on it, shut it down and fit."""
    check_profile_name(name)
    if timing not in TIMINGS:
        raise ProfilingError(f"timing: expected one of {', '.join(TIMINGS)} (got {timing!r})")
    if statistic not in STATISTICS:
        raise ProfilingError(f"statistic: expected one of {', '.join(STATISTICS)} (got {statistic!r})")
    grid.check(settings)
    started = time.perf_counter()
    with VllmEngine(settings) as engine:
        steps = measure_grid(engine, grid, settings, progress)
        prompt = max(1, settings.max_num_batched_tokens // 2)
        intake = intake_times_s(engine, settings)
        wakeup = wakeup_times_s(engine, WAKEUP_TRIALS, prompt)
        profiled_engine = engine.profiled_engine
    model, report, all_steps_report = fit_steps(steps, name=name, timing=timing, statistic=statistic)
    return ProfileResult(
        model=model,
        report=report,
        all_steps_report=all_steps_report,
        engine=profiled_engine,
        settings=settings,
        grid=grid,
        grid_name=grid_name,
        timing=timing,
        statistic=statistic,
        steps=tuple(steps),
        wall_s=time.perf_counter() - started,
        wakeup_s=(tuple(wakeup[0]), tuple(wakeup[1])),
        intake_s=tuple(intake),
    )


def default_profile_name(model: str, engine: str = "vllm", device: str = "cpu") -> str:
    """``<model directory name>-<engine>-<device>``, lower-cased, other characters replaced by ``-``."""
    base = re.sub(r"[^a-z0-9._]+", "-", Path(model.rstrip("/\\")).name.lower()).strip("-._")
    return check_profile_name(f"{base or 'model'}-{engine}-{device}")


# ---- small helpers --------------------------------------------------------------------------------------------
def _require_int(name: str, value: object, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ProfilingError(f"{name}: must be an integer >= {minimum} (got {value!r})")


def _blocks(tokens: int, block_size: int) -> int:
    return -(-tokens // block_size)


def _distinct(values: Sequence[int], minimum: int, maximum: int | None = None) -> tuple[int, ...]:
    """Sorted distinct values clipped to ``[minimum, maximum]``."""
    upper = maximum if maximum is not None else max(values)
    return tuple(sorted({min(max(v, minimum), upper) for v in values}))
