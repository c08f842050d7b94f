"""Open-loop replay of timed requests through a real, in-process vLLM engine, recording every engine step.

The replay is the "real" half of ``semsched fidelity``. It drives vLLM's ``LLMEngine`` (engine core in this
process, no subprocess, no asyncio) with the same discrete-event semantics as semsched's simulator:

* a request is added when the wall clock reaches its intended arrival time; one that arrives while a step runs
  is added right after that step returns, so it joins the next step (as in the simulator and in vLLM's own
  busy loop);
* when nothing is in flight the loop sleeps until the next arrival;
* TTFT and E2E are measured from the *intended* arrival time to the moment ``LLMEngine.step()`` returns the
  request's first / last token, i.e. after vLLM's output processing (detokenisation included).

Every step is recorded (:class:`StepRecord`): its batch composition in the latency model's terms (prefill chunks
``(lq, lkv)``, decodes and their summed context), how long the scheduler, the model and the output handling took,
and how many prompt tokens were found in the prefix cache. The recording scheduler is
:class:`semsched.vllm.Scheduler` itself (the policy decides exactly as in production) with timers around
``schedule`` and ``update_from_output``.

:class:`ServedEngine` is the same engine as a :class:`~semsched.calibrate.profiling.ProfilingEngine`, so the
profiler's grid driver can measure exactly what the replay runs
(:func:`semsched.calibrate.fidelity.profile_engine`).

This module's data types are plain Python; vLLM is imported only when an engine starts.
"""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from semsched.calibrate.profiling import (
    EngineSettings,
    InProcessEngine,
    StepComposition,
    batch_tokens,
    step_composition,
)
from semsched.calibrate.profiling import StepRecord as ProfilingStep
from semsched.vllm.config import CONFIG_ENV, POLICY_ENV
from semsched.vllm.environ import temporary_environ

PROBE_DECODES = 4
PROBE_CONTEXT_TOKENS = 256
PROBE_STEPS = 200
"""The engine-speed probe: the median wall time of ``PROBE_STEPS`` decode-only steps of ``PROBE_DECODES``
requests with ``PROBE_CONTEXT_TOKENS``-token prompts (a typical serving step, about half a second in all on the
tiny model), measured when a profile is taken and before and after each replay, so a change of machine speed in
between can be told from a profile error. It samples two moments: speed changes within a replay show in the
report's per-window ratios instead."""


@dataclass(frozen=True)
class ReplayRequest:
    """One request to replay: when it arrives (seconds from the start) and exactly what it asks for."""

    request_id: str
    arrival_s: float
    prompt_token_ids: tuple[int, ...]
    output_tokens: int
    priority: int = 0
    tier: str | None = None


@dataclass
class RequestRecord:
    """What happened to one request; times are seconds from the replay's start (``None``: never happened)."""

    request_id: str
    arrival_s: float
    added_s: float | None = None
    #: the part of the add delay not explained by a step in flight (loop overhead, sleep overshoot)
    loop_delay_s: float | None = None
    #: whether the engine was idle (the loop slept) when the request arrived
    found_idle: bool = False
    first_token_s: float | None = None
    finish_s: float | None = None
    num_output_tokens: int = 0
    num_cached_tokens: int = 0
    num_preemptions: int = 0
    finish_reason: str | None = None

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_token_s is None else self.first_token_s - self.arrival_s

    @property
    def e2e_s(self) -> float | None:
        return None if self.finish_s is None else self.finish_s - self.arrival_s


@dataclass(frozen=True)
class StepRecord:
    """One ``LLMEngine.step()``: its batch and where its wall time went (seconds; times from the start).

    ``duration_s = schedule_s + model_s + update_s + output_s``: ``schedule_s`` is the semsched policy plus
    vLLM's batch builder (and the recording of this record), ``model_s`` everything between scheduling and
    ``update_from_output`` (input preparation, forward pass, sampling), ``output_s`` what follows inside
    ``step()`` (output processing and detokenisation). ``gap_before_s`` is the loop's time between the previous
    step's return and this step's call while work was pending (0 after an idle sleep: then it is not engine
    time). ``cached_tokens`` counts prompt tokens that requests admitted or resumed in this step found in the
    prefix cache.
    """

    start_s: float
    duration_s: float
    schedule_s: float
    model_s: float
    update_s: float
    output_s: float
    gap_before_s: float
    prefill: tuple[tuple[int, int], ...]
    num_decode: int
    decode_context_tokens: int
    num_preempted: int
    cached_tokens: int


@dataclass
class ReplayResult:
    """Everything a replay measured: per request, per step, and how long the engine took to start."""

    policy: str
    requests: list[RequestRecord]
    steps: list[StepRecord]
    startup_s: float
    warmup_s: float
    replay_s: float
    vllm_version: str
    num_gpu_blocks: int
    #: the engine-speed probe (seconds per step) just before and just after the replay
    probe_before_s: float | None = None
    probe_after_s: float | None = None
    #: batch sizes (scheduled tokens per step) the engine ran before the clock started (warm-up and probe):
    #: the first step of any other size pays the engine's one-time cost of a new shape
    warm_shapes: tuple[int, ...] = ()


@dataclass
class _CoreStep:
    """What the recording scheduler saw of one engine-core step (perf_counter times)."""

    schedule_start: float
    schedule_end: float
    update_start: float = 0.0
    update_end: float = 0.0
    prefill: tuple[tuple[int, int], ...] = ()
    num_decode: int = 0
    decode_context_tokens: int = 0
    preempted: tuple[str, ...] = ()
    cached_tokens: int = 0

    @property
    def num_tokens(self) -> int:
        """Tokens the step computed (its batch size): see :func:`~semsched.calibrate.profiling.batch_tokens`."""
        return batch_tokens(self.prefill, self.num_decode)


@dataclass
class _Recorder:
    steps: list[_CoreStep] = field(default_factory=list)
    #: batch sizes (tokens computed) of every step the engine ran, also those no longer in ``steps``
    sizes: set[int] = field(default_factory=set)


ProgressCallback = Callable[[int, int], None]


def replay(
    settings: EngineSettings,
    policy: str,
    requests: Sequence[ReplayRequest],
    *,
    enable_prefix_caching: bool = True,
    warmup_requests: Sequence[ReplayRequest] = (),
    warm_batch_sizes: bool = False,
    start_lead_s: float = 0.05,
    progress: ProgressCallback | None = None,
) -> ReplayResult:
    """Start a fresh engine with ``policy``, run ``warmup_requests`` to completion and, with
    ``warm_batch_sizes``, one step of every batch size (:meth:`ServedEngine.warm_batch_sizes`; neither is
    recorded, and the prefix cache is reset afterwards), then replay ``requests`` open-loop and shut the engine
    down.

    The engine core runs in this process whatever ``VLLM_ENABLE_V1_MULTIPROCESSING`` says (the recording
    needs its scheduler), one step at a time (no async scheduling). Arrival times are seconds from the
    replay's start, which is ``start_lead_s`` after the loop is set up, so the first request is not late.
    ``progress`` is called with (finished, total) whenever a request finishes.
    """
    import vllm

    started = time.perf_counter()
    with ServedEngine(settings, policy=policy, enable_prefix_caching=enable_prefix_caching) as served:
        engine, recorder = served.llm_engine, served.recorder
        startup_s = time.perf_counter() - started
        warm_started = time.perf_counter()
        if warmup_requests:
            _run_to_completion(engine, warmup_requests)
        if warm_batch_sizes:
            served.warm_batch_sizes()
        probe_before_s = served.probe_step_s()
        engine.reset_prefix_cache()
        warm_shapes = tuple(sorted(recorder.sizes))
        recorder.steps.clear()
        warmup_s = time.perf_counter() - warm_started
        records, steps = _ReplayLoop(engine, recorder, requests, start_lead_s, progress).run()
        replay_s = time.perf_counter() - warm_started - warmup_s
        probe_after_s = served.probe_step_s()
        num_blocks = int(engine.vllm_config.cache_config.num_gpu_blocks or 0)
    return ReplayResult(
        policy,
        records,
        steps,
        startup_s,
        warmup_s,
        replay_s,
        str(vllm.__version__),
        num_blocks,
        probe_before_s,
        probe_after_s,
        warm_shapes,
    )


def set_torch_threads(num_threads: int) -> int:
    """Set torch's intra-op threads for the in-process engines started from now on and return the count in
    effect. Call it before the first engine of the process: vLLM's CPU worker then disables
    ``torch.set_num_threads`` (it binds threads itself), so a later call changes nothing."""
    if isinstance(num_threads, bool) or not isinstance(num_threads, int) or num_threads < 1:
        raise ValueError(f"threads: must be an integer >= 1 (got {num_threads!r})")
    import torch

    torch.set_num_threads(num_threads)
    return int(torch.get_num_threads())


# ---- the engine ---------------------------------------------------------------------------------------------
@contextmanager
def _engine_env(policy: str) -> Iterator[None]:
    """The environment vLLM reads while it builds the engine: the adapter's policy (it reads
    ``SEMSCHED_POLICY`` then), an in-process engine core and worker (on CPU, vLLM otherwise moves the worker
    to a subprocess even when asked for one process) and, on CPU, a fixed KV-cache memory size unless one is set
    (the block count is overridden anyway; without it vLLM refuses to start when other processes hold memory)."""
    values = {
        POLICY_ENV: policy,
        "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
        "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE") or "1",
    }
    with temporary_environ({**values, CONFIG_ENV: None}):
        yield


def _start_engine(settings: EngineSettings, policy: str, enable_prefix_caching: bool) -> tuple[Any, _Recorder]:
    from vllm.engine.arg_utils import EngineArgs
    from vllm.usage.usage_lib import UsageContext
    from vllm.v1.engine.llm_engine import LLMEngine
    from vllm.v1.executor import Executor

    recorder = _Recorder()
    args = EngineArgs(
        model=settings.model,
        max_model_len=settings.max_model_len,
        max_num_seqs=settings.max_num_seqs,
        max_num_batched_tokens=settings.max_num_batched_tokens,
        num_gpu_blocks_override=settings.kv_blocks,
        block_size=settings.block_size,
        dtype=settings.dtype,
        seed=settings.seed,
        enforce_eager=settings.enforce_eager,
        enable_chunked_prefill=True,
        enable_prefix_caching=enable_prefix_caching,
        async_scheduling=False,
        distributed_executor_backend="uni",
        scheduler_cls=_recording_scheduler_cls(recorder),
        disable_log_stats=True,
    )
    with _engine_env(policy):
        config = args.create_engine_config(UsageContext.ENGINE_CONTEXT)
        engine: Any = LLMEngine(
            vllm_config=config,
            executor_class=Executor.get_class(config),
            log_stats=False,
            multiprocess_mode=False,
        )
    if engine.engine_core.engine_core.batch_queue is not None:
        engine.engine_core.shutdown()
        raise RuntimeError("vLLM overlaps steps here (batch queue); the replay needs one step at a time")
    return engine, recorder


def _recording_scheduler_cls(recorder: _Recorder) -> type:
    """:class:`semsched.vllm.Scheduler` with timers around ``schedule`` and ``update_from_output`` that append
    one :class:`_CoreStep` per step to ``recorder`` (the class is built here so vLLM is imported lazily)."""
    from semsched.vllm.scheduler import Scheduler

    class RecordingScheduler(Scheduler):
        def schedule(self, *args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            output = super().schedule(*args, **kwargs)
            step = _CoreStep(schedule_start=start, schedule_end=0.0)
            _describe_batch(self, output, step)
            step.schedule_end = time.perf_counter()
            recorder.steps.append(step)
            recorder.sizes.add(step.num_tokens)
            return output

        def update_from_output(self, scheduler_output: Any, model_runner_output: Any) -> Any:
            start = time.perf_counter()
            outputs = super().update_from_output(scheduler_output, model_runner_output)
            if recorder.steps:
                step = recorder.steps[-1]
                step.update_start, step.update_end = start, time.perf_counter()
            return outputs

    return RecordingScheduler


def _describe_batch(scheduler: Any, output: Any, step: _CoreStep) -> None:
    """Fill ``step`` with the batch in the latency model's terms (the profiler's rule, which is the simulator's)
    and the prompt tokens that requests admitted or resumed in this step found in the prefix cache."""
    composition = step_composition(output, scheduler.requests)
    step.prefill = composition.prefill
    step.num_decode, step.decode_context_tokens = composition.num_decode, composition.decode_context_tokens
    cached = sum(new.num_computed_tokens for new in output.scheduled_new_reqs)
    resumed = output.scheduled_cached_reqs
    if resumed.resumed_req_ids:
        computed = dict(zip(resumed.req_ids, resumed.num_computed_tokens, strict=True))
        cached += sum(computed[request_id] for request_id in resumed.resumed_req_ids)
    step.cached_tokens = cached
    step.preempted = tuple(output.preempted_req_ids or ())


# ---- the same engine, for the profiler ----------------------------------------------------------------------
class ServedEngine(InProcessEngine):
    """The replay's engine (the semsched adapter with ``policy``, detokenisation on, prefix caching as asked) as a
    :class:`~semsched.calibrate.profiling.ProfilingEngine`. Its steps report ``iteration_s`` as the whole
    ``LLMEngine.step()`` wall time, output processing included: what one simulated step stands for in a replay.
    ``execute_s`` is the model's share (``schedule()`` return to ``update_from_output()`` entry).

    Prompts are random token ids from ``settings.seed``. Use as a context manager, or call :meth:`close`.
    """

    def __init__(
        self, settings: EngineSettings, *, policy: str = "fcfs", enable_prefix_caching: bool = True
    ) -> None:
        engine, self._recorder = _start_engine(settings, policy, enable_prefix_caching)
        super().__init__(settings, engine)
        self._max_model_len = settings.max_model_len
        self._probes = 0

    @property
    def recorder(self) -> _Recorder:
        return self._recorder

    def probe_step_s(self) -> float:
        """The engine-speed probe (see :data:`PROBE_STEPS`): seconds per decode-only step, median."""
        import numpy as np

        self._probes += 1
        ids = [f"probe-{self._probes}-{i}" for i in range(PROBE_DECODES)]
        context = max(1, min(PROBE_CONTEXT_TOKENS, self._max_model_len - PROBE_STEPS - 16))
        for request_id in ids:
            self.add_request(request_id, context, PROBE_STEPS + 8)
        times: list[float] = []
        while len(times) < PROBE_STEPS and self.has_unfinished():
            step = self.step()
            if step is not None and not step.composition.prefill and step.composition.num_decode == PROBE_DECODES:
                times.append(step.iteration_s)
        self.abort(ids)
        while self.has_unfinished():
            self.step()
        return float(np.median(times)) if times else float("nan")

    def warm_batch_sizes(self) -> int:
        """Run one step of every batch size from 1 to the token budget (a prefill of that many tokens that
        finishes at once) and return how many steps ran.

        vLLM's CPU backend builds a oneDNN matmul primitive for each number of tokens a step computes, the
        first time it sees it; on the tiny model that costs about 3 ms, whatever the size, and oneDNN keeps
        the built primitives in a cache shared by every engine in the process (``ONEDNN_PRIMITIVE_CACHE_CAPACITY``
        primitives, 1,024 by default: fewer than a 512-token budget needs, so sizes get evicted and built
        again). With a cache that holds every size, this warm-up leaves the process with no first-time costs:
        the engine a long-running server settles into."""
        budget = self.llm_engine.vllm_config.scheduler_config.max_num_batched_tokens
        sizes = range(1, min(int(budget), self._max_model_len - 1) + 1)
        for size in sizes:
            self._probes += 1
            self.add_request(f"size-{self._probes}", size, 1)
            while self.has_unfinished():
                self.step()
        return len(sizes)

    def add_request(self, request_id: str, prompt_tokens: int, max_tokens: int) -> None:
        token_ids = tuple(self.prompt_token_ids(prompt_tokens))
        _add(self.llm_engine, ReplayRequest(request_id, 0.0, token_ids, max_tokens))

    def step(self) -> ProfilingStep | None:
        before = len(self._recorder.steps)
        started = time.perf_counter()
        self.llm_engine.step()
        wall_s = time.perf_counter() - started
        if len(self._recorder.steps) == before:
            return None
        core = self._recorder.steps[-1]
        self._recorder.steps.clear()
        if not core.prefill and core.num_decode == 0:
            return None
        composition = StepComposition(core.prefill, core.num_decode, core.decode_context_tokens)
        return ProfilingStep(composition, execute_s=core.update_start - core.schedule_end, iteration_s=wall_s)


# ---- the loop -----------------------------------------------------------------------------------------------
def _sampling_params(request: ReplayRequest) -> Any:
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    extra = {"tier": request.tier} if request.tier is not None else None
    return SamplingParams(
        max_tokens=request.output_tokens,
        ignore_eos=True,
        temperature=0.0,
        output_kind=RequestOutputKind.DELTA,
        extra_args=extra,
    )


def _add(engine: Any, request: ReplayRequest, arrival_time: float | None = None) -> str:
    """Add ``request``; returns the engine's internal id (vLLM appends a random suffix to the client's id)."""
    (prompt,) = engine.renderer.render_cmpl([{"prompt_token_ids": list(request.prompt_token_ids)}])
    internal_id: str = engine.add_request(
        request.request_id, prompt, _sampling_params(request), arrival_time=arrival_time, priority=request.priority
    )
    return internal_id


def _run_to_completion(engine: Any, requests: Sequence[ReplayRequest]) -> None:
    for request in requests:
        _add(engine, request)
    while engine.has_unfinished_requests():
        engine.step()


class _ReplayLoop:
    """Adds requests at their arrival times and steps the engine; one instance per replay."""

    def __init__(
        self,
        engine: Any,
        recorder: _Recorder,
        requests: Sequence[ReplayRequest],
        start_lead_s: float,
        progress: ProgressCallback | None,
    ) -> None:
        self._engine = engine
        self._recorder = recorder
        self._pending = deque(sorted(requests, key=lambda r: r.arrival_s))
        self._records = {r.request_id: RequestRecord(r.request_id, r.arrival_s) for r in requests}
        self._by_internal_id: dict[str, RequestRecord] = {}
        self._progress = progress
        self._steps: list[StepRecord] = []
        self._origin = time.perf_counter() + start_lead_s
        # vLLM stamps arrivals with time.time(); the adapter's policies read the same clock
        self._wall_origin = time.time() + start_lead_s
        self._last_step_end_s = 0.0
        self._slept = True
        self._num_finished = 0

    def now_s(self) -> float:
        return time.perf_counter() - self._origin

    def run(self) -> tuple[list[RequestRecord], list[StepRecord]]:
        engine = self._engine
        while self._pending or engine.has_unfinished_requests():
            self._add_arrived()
            if engine.has_unfinished_requests():
                self._step()
            elif self._pending:
                time.sleep(max(0.0, self._pending[0].arrival_s - self.now_s()))
                self._slept = True
        return list(self._records.values()), self._steps

    def _add_arrived(self) -> None:
        now = self.now_s()
        while self._pending and self._pending[0].arrival_s <= now:
            request = self._pending.popleft()
            record = self._records[request.request_id]
            internal_id = _add(self._engine, request, self._wall_origin + request.arrival_s)
            self._by_internal_id[internal_id] = record
            record.added_s = self.now_s()
            record.loop_delay_s = record.added_s - max(request.arrival_s, self._last_step_end_s)
            record.found_idle = self._slept

    def _step(self) -> None:
        core_steps = len(self._recorder.steps)
        start = time.perf_counter()
        outputs = self._engine.step()
        end = time.perf_counter()
        end_s = end - self._origin
        for output in outputs:
            self._record_output(output, end_s)
        if len(self._recorder.steps) > core_steps:
            self._record_step(self._recorder.steps[-1], start, end)
        self._last_step_end_s = end_s

    def _record_output(self, output: Any, now_s: float) -> None:
        record = self._records[output.request_id]
        completion = output.outputs[0] if output.outputs else None
        new_tokens = len(completion.token_ids) if completion is not None else 0
        if new_tokens and record.first_token_s is None:
            record.first_token_s = now_s
        record.num_output_tokens += new_tokens
        if output.finished:
            record.finish_s = now_s
            record.num_cached_tokens = int(output.num_cached_tokens or 0)
            record.finish_reason = None if completion is None else str(completion.finish_reason)
            self._num_finished += 1
            if self._progress is not None:
                self._progress(self._num_finished, len(self._records))

    def _record_step(self, core: _CoreStep, start: float, end: float) -> None:
        for internal_id in core.preempted:
            record = self._by_internal_id.get(internal_id)
            if record is not None:
                record.num_preemptions += 1
        start_s = start - self._origin
        gap_s = 0.0 if self._slept else max(0.0, start_s - self._last_step_end_s)
        self._slept = False
        core_s = core.update_end - core.schedule_start
        self._steps.append(
            StepRecord(
                start_s=start_s,
                duration_s=end - start,
                schedule_s=core.schedule_end - core.schedule_start,
                model_s=core.update_start - core.schedule_end,
                update_s=core.update_end - core.update_start,
                output_s=(end - start) - core_s,
                gap_before_s=gap_s,
                prefill=core.prefill,
                num_decode=core.num_decode,
                decode_context_tokens=core.decode_context_tokens,
                num_preempted=len(core.preempted),
                cached_tokens=core.cached_tokens,
            )
        )
