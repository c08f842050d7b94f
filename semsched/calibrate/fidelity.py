"""``semsched fidelity``: replay one trace slice through real vLLM and through the simulator, and compare them.

The same requests (arrival times, prompt and output lengths, priorities and tiers) go through

1. **real vLLM** with the semsched scheduler (:mod:`semsched.calibrate.replay`: open-loop, in-process engine, a
   fresh engine per replay; every policy is replayed ``repeats`` times, alternating between policies), and
2. **the simulator** with a latency profile of that engine and a :class:`~semsched.core.scheduler.SchedulerConfig`
   equal to the engine's (token budget, sequence cap, block size, KV blocks, no watermark, no swap),

and the report gives, per policy, TTFT and E2E (mean and p90) in both (the real side: the mean over the
replays, with their range), their relative errors ``(sim - real) / real``, an account of where the
difference comes from (:class:`ErrorAnalysis`, of the median replay), and the same errors with the simulator run
on the speed the machine ran each replay at (:class:`GivenSpeed`, :func:`compare_given_speed`).

The slice: the first ``num_requests`` requests of an Azure-format trace; prompt and output lengths scaled by one
factor so the longest request fits the engine's ``max_model_len``; arrivals rescaled to the replay rate (bursts
kept); tiers (and so priorities) drawn from :data:`~semsched.workloads.DEFAULT_TIERS` with the seed. Prompts are
random token ids from the seed, so the prefix cache finds nothing it was not given by the replay itself.

Modules: this one (the slice, the engine and its profile, the simulated side, the run),
:mod:`semsched.calibrate.replay` (the real side), :mod:`semsched.calibrate.fidelity_analysis` (where engine time
differs from the profile) and :mod:`semsched.calibrate.fidelity_report` (comparisons, table, analysis lines,
files). None of them imports vLLM at import time; engines start inside :func:`run_fidelity`.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from semsched.calibrate.fidelity_analysis import (
    PROBE_FIT_KEY,
    SPEED_WINDOW_S,
    ClassScaledLatency,
    ScaledLatency,
    StepTimes,
    batch_change_fits,
    class_factors,
    engine_time_ratio,
    error_sources,
    machine_speed,
    profile_timing,
    speed_drift,
    step_class_fits,
    step_fit_mape,
    window_ratios,
)
from semsched.calibrate.fidelity_report import (
    SENSITIVITY_FACTOR,
    ErrorAnalysis,
    FidelityError,
    FidelityReport,
    GivenSpeed,
    MetricComparison,
    PolicyFidelity,
    ReplaySpeed,
    compare,
    compare_repeats,
)
from semsched.calibrate.profiling import (
    DTYPES,
    FIRST_PROMPT_TOKEN_ID,
    Dtype,
    EngineSettings,
    MeasuredStep,
    ProfileGrid,
)
from semsched.calibrate.replay import ReplayRequest, ReplayResult, StepRecord
from semsched.core.request import Request
from semsched.core.scheduler import Scheduler, SchedulerConfig
from semsched.latency import EngineOverheads, LatencyModel, ProfileInfo, load_profile_info, save_profile
from semsched.latency.profiles import ProfiledEngine
from semsched.metrics.request_metrics import request_metrics
from semsched.policies import make_policy
from semsched.sim.engine import Instance, Simulation
from semsched.sim.router import make_router
from semsched.sim.speed import SpeedTrace
from semsched.workloads import DEFAULT_TIERS, Workload, assign_tiers, load_azure_csv, rescale_to_rate

DEFAULT_TRACE_FILE = "azure_llm_2023_conv.csv"
DEFAULT_NUM_REQUESTS = 300
DEFAULT_POLICIES = ("fcfs", "priority-preempt")
DEFAULT_MAX_MODEL_LEN = 2048
"""Context of the replayed engine when neither the profile nor the command line sets one (capped by the
model's own); trace lengths are scaled to fit it. It is ``semsched profile``'s default, so a profile made with
default settings describes the default replay, and it keeps the default run to a few minutes on a CPU."""
DEFAULT_REPEATS = 3
"""Replays per policy. On this shared 2-core VM two replays of the same slice with the same decisions differed by
up to 70 % in mean E2E (the machine's speed for Python-heavy work drifts by tens of percent over seconds to
minutes), so one replay says little; the report compares the simulator with the mean of the repeats and shows
their spread. Replays alternate between policies (A B, B A, A B, ...) and the profile is measured in parts between
them, so no policy and not the profile gets all the fast or all the slow stretches."""
DEFAULT_LOAD = 0.3
"""Without an explicit rate (or ``--load``), replay at this fraction of the saturation rate the simulator finds
for the slice. The Azure slice is bursty. At 0.5 its bursts bring the engine close to saturation, and 5 % longer
steps move the simulated mean TTFT by 35-40 % (measured: x7-x8). On this shared 2-core machine, step times drift
by 10-30 % within and between runs, so at 0.5 the comparison mostly measures that drift, amplified. At 0.3 the
same 5 % moves the mean TTFT by 8-10 % (x1.6-x1.9), and the comparison measures the step-time model and the
scheduler. Every report prints its own sensitivity."""

Log = Callable[[str], None]
Progress = Callable[[str, int, int], None]
"""Called with (phase, done, total) while a replay runs."""


# ---- the slice ----------------------------------------------------------------------------------------------
def scale_lengths(workload: Workload, max_model_len: int) -> tuple[Workload, float]:
    """Scale every prompt and output length by one factor so that the longest request (prompt + output) fits
    ``max_model_len``; lengths never grow (factor <= 1), stay >= 1, and each request's rounded total is at most
    ``max_model_len``. Returns the scaled workload and the factor."""
    if isinstance(max_model_len, bool) or not isinstance(max_model_len, int) or max_model_len < 2:
        raise FidelityError(f"max_model_len: must be an integer >= 2 (got {max_model_len!r})")
    total = workload.prompt_tokens + workload.output_tokens
    scale = min(1.0, max_model_len / float(total.max()))
    output = np.clip(np.rint(workload.output_tokens * scale), 1, max_model_len - 1).astype(np.int64)
    prompt = np.clip(np.rint(workload.prompt_tokens * scale), 1, max_model_len - output).astype(np.int64)
    return dataclasses.replace(workload, prompt_tokens=prompt, output_tokens=output), scale


def load_slice(trace: str | Path, num_requests: int, *, max_model_len: int, seed: int) -> tuple[Workload, float]:
    """The first ``num_requests`` requests of an Azure-format trace with lengths scaled to ``max_model_len``
    (:func:`scale_lengths`) and tiers drawn with ``seed``; arrival times as in the trace. Returns the workload and
    the length scale."""
    if isinstance(num_requests, bool) or not isinstance(num_requests, int) or num_requests < 2:
        raise FidelityError(f"num_requests: must be an integer >= 2 (got {num_requests!r})")
    workload = load_azure_csv(trace).head(num_requests)
    if len(workload) < num_requests:
        raise FidelityError(f"num_requests: {trace} has only {len(workload)} requests (asked for {num_requests})")
    workload, scale = scale_lengths(workload, max_model_len)
    workload = assign_tiers(workload, DEFAULT_TIERS, np.random.default_rng(seed))
    return workload, scale


def replay_requests(workload: Workload, *, vocab_size: int, seed: int) -> list[ReplayRequest]:
    """The workload as engine requests (ids ``"0"``, ``"1"``, ... as :meth:`Workload.to_requests` numbers them):
    random prompt token ids in ``[FIRST_PROMPT_TOKEN_ID, vocab_size)`` from ``seed``, the output length as
    ``max_tokens``, the priority, and the tier (the adapter reads it from ``extra_args``)."""
    if vocab_size <= FIRST_PROMPT_TOKEN_ID:
        raise FidelityError(f"vocab_size: must be > {FIRST_PROMPT_TOKEN_ID} (got {vocab_size})")
    rng = np.random.default_rng([seed, 1])  # a stream of its own: tiers use default_rng(seed)
    return [
        ReplayRequest(
            request_id=str(i),
            arrival_s=float(workload.arrival_time_s[i]),
            prompt_token_ids=tuple(
                rng.integers(FIRST_PROMPT_TOKEN_ID, vocab_size, int(workload.prompt_tokens[i])).tolist()
            ),
            output_tokens=int(workload.output_tokens[i]),
            priority=int(workload.priority[i]),
            tier=workload.tier[i],
        )
        for i in range(len(workload))
    ]


def warmup_requests(settings: EngineSettings, *, vocab_size: int, seed: int) -> list[ReplayRequest]:
    """A full batch of requests whose prompts span short to twice the token budget: every first-time shape and
    allocation happens before the clock starts."""
    rng = np.random.default_rng([seed, 2])
    budget, longest = settings.max_num_batched_tokens, settings.max_model_len - 16
    prompts = [min(max(1, p), longest) for p in (16, 64, budget // 2, budget, 2 * budget)]
    lengths = [prompts[i % len(prompts)] for i in range(settings.max_num_seqs)]
    return [
        ReplayRequest(
            request_id=f"warmup-{i}",
            arrival_s=0.0,
            prompt_token_ids=tuple(rng.integers(FIRST_PROMPT_TOKEN_ID, vocab_size, length).tolist()),
            output_tokens=16,
        )
        for i, length in enumerate(lengths)
    ]


@dataclass(frozen=True)
class ModelFacts:
    """What the replay needs from a model directory's ``config.json``."""

    vocab_size: int
    max_position_embeddings: int | None


def read_model_facts(model_dir: str | Path) -> ModelFacts:
    """Read ``vocab_size`` (and ``max_position_embeddings`` if present) from ``<model_dir>/config.json``."""
    path = Path(model_dir) / "config.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as error:
        raise FidelityError(f"model: cannot read {path} ({error})") from None
    config = data.get("text_config", data) if isinstance(data, dict) else {}
    vocab = config.get("vocab_size", data.get("vocab_size") if isinstance(data, dict) else None)
    if isinstance(vocab, bool) or not isinstance(vocab, int) or vocab <= FIRST_PROMPT_TOKEN_ID:
        raise FidelityError(f"model: {path} has no usable vocab_size (got {vocab!r})")
    context = config.get("max_position_embeddings")
    return ModelFacts(vocab, context if isinstance(context, int) and context > 1 else None)


# ---- the simulated side -------------------------------------------------------------------------------------
def scheduler_config(settings: EngineSettings) -> SchedulerConfig:
    """The simulator's view of the engine: vLLM's limits, its usable KV blocks (vLLM keeps one of them as the
    null block), no watermark (vLLM's default is none), no swap space (vLLM preempts by recompute), and vLLM
    0.32's admission rule: a waiting request starts only when its whole sequence fits
    (``scheduler_reserve_full_isl``, on by default). With these the core scheduler makes the adapter's decisions
    step for step (tests/vllm/test_scheduler.py, the lockstep test)."""
    return SchedulerConfig(
        max_num_batched_tokens=settings.max_num_batched_tokens,
        max_num_seqs=settings.max_num_seqs,
        block_size=settings.block_size,
        num_gpu_blocks=settings.kv_blocks - 1,
        num_cpu_blocks=0,
        watermark=0.0,
        reserve_full_prompt=True,
    )


@dataclass
class SimOutcome:
    """The simulated requests (terminal state, token times recorded) and how many engine steps it took."""

    requests: list[Request]
    num_steps: int


def simulate(
    workload: Workload,
    policy: str,
    config: SchedulerConfig,
    latency: LatencyModel,
    overheads: EngineOverheads | None = None,
    warm_shapes: Iterable[int] = (),
    speed: SpeedTrace | None = None,
) -> SimOutcome:
    """Run ``workload`` through one simulated engine under ``policy``, charging the profile's ``overheads``
    (request intake, waking from idle, and ``new_shape_s`` on the first step of each batch size not in
    ``warm_shapes``: the sizes the replay's warm-up ran), on a machine whose speed follows ``speed`` (None: the
    machine as profiled)."""
    instance = Instance(
        Scheduler(config, make_policy(policy)),
        latency,
        overheads=overheads or EngineOverheads(),
        warm_shapes=set(warm_shapes),
        speed=speed,
    )
    result = Simulation([instance], make_router("round-robin")).run(workload.to_requests())
    return SimOutcome(result.requests, result.num_steps)


def saturation_rate(workload: Workload, config: SchedulerConfig, latency: LatencyModel) -> float:
    """Requests per second the simulated engine completes when the whole slice arrives at once (FCFS)."""
    burst = workload.with_arrival_times(np.zeros(len(workload)))
    outcome = simulate(burst, "fcfs", config, latency)
    end_s = max((r.finish_time_s or 0.0) for r in outcome.requests)
    if end_s <= 0:
        raise ValueError("profile: the simulated engine finished the slice in no time; check the profile")
    return len(workload) / end_s


def real_latencies(result: ReplayResult, ids: Sequence[str] | None = None) -> dict[str, list[float]]:
    """TTFT and E2E of the replayed requests that finished (optionally only ``ids``)."""
    wanted = None if ids is None else set(ids)
    done = [r for r in result.requests if r.finish_s is not None and (wanted is None or r.request_id in wanted)]
    return {"ttft": [r.ttft_s or 0.0 for r in done], "e2e": [r.e2e_s or 0.0 for r in done]}


def sim_latencies(requests: Sequence[Request], ids: Sequence[str] | None = None) -> dict[str, list[float]]:
    """TTFT and E2E of the simulated requests that finished (optionally only ``ids``)."""
    wanted = None if ids is None else set(ids)
    metrics = [request_metrics(r) for r in requests if wanted is None or r.request_id in wanted]
    done = [m for m in metrics if m.finished]
    return {"ttft": [m.ttft_s or 0.0 for m in done], "e2e": [m.e2e_s or 0.0 for m in done]}


def compare_policy(
    workload: Workload,
    results: Sequence[ReplayResult],
    config: SchedulerConfig,
    profile: ProfileInfo,
    timing: str,
) -> PolicyFidelity:
    """Simulate ``workload`` under the replays' policy with the profile and set the outcome beside the replays:
    each statistic's real side is its mean over the replays (:func:`compare_repeats`). The analysis (where
    engine time went, the profile scaled to the replay's engine time, how much 5 % longer steps move the
    simulated latencies) is of the median replay (:func:`median_replay`)."""
    if not results or len({r.policy for r in results}) != 1:
        raise ValueError("results: give one or more replays of one policy")
    latency = profile.model
    overheads: dict[str, Any] = {"overheads": profile.overheads, "warm_shapes": results[0].warm_shapes}
    sim = simulate(workload, results[0].policy, config, latency, **overheads)
    simulated = sim_latencies(sim.requests)
    metrics = compare_repeats([real_latencies(r) for r in results], simulated)
    by_priority = {}
    for priority in sorted({int(p) for p in workload.priority}):
        ids = [str(i) for i in np.flatnonzero(workload.priority == priority)]
        by_priority[priority] = compare_repeats(
            [real_latencies(r, ids) for r in results], sim_latencies(sim.requests, ids)
        )
    representative = median_replay(results)
    result = results[representative]
    real = real_latencies(result)
    ratio = engine_time_ratio(result.steps, latency)
    corrected = simulate(workload, result.policy, config, ScaledLatency(latency, ratio), **overheads)
    factors = class_factors(result.steps, latency)
    by_class = simulate(workload, result.policy, config, ClassScaledLatency(latency, factors), **overheads)
    slower = simulate(workload, result.policy, config, ScaledLatency(latency, SENSITIVITY_FACTOR), **overheads)
    base = compare(real, simulated)
    sensitivity = {
        b.metric: changed.sim_s / b.sim_s - 1.0 if b.sim_s else 0.0
        for b, changed in zip(base, compare(real, sim_latencies(slower.requests)), strict=True)
    }
    analysis = ErrorAnalysis(
        step_times=StepTimes.of(result.steps, latency),
        timing=timing,
        step_fit_mape=step_fit_mape(result.steps, latency, timing),
        step_classes=tuple(step_class_fits(result.steps, latency, timing)),
        batch_changes=tuple(batch_change_fits(result.steps, latency, timing)),
        sources=tuple(error_sources(result, latency, timing, profile.overheads)),
        real_steps=len(result.steps),
        sim_steps=sim.num_steps,
        real_preemptions=sum(r.num_preemptions for r in result.requests),
        sim_preemptions=sum(r.num_preemptions for r in sim.requests),
        engine_time_ratio=ratio,
        speed_drift=speed_drift(result, profile),
        corrected=compare(real, sim_latencies(corrected.requests)),
        class_factors=factors,
        class_corrected=compare(real, sim_latencies(by_class.requests)),
        window_ratios=tuple(window_ratios(result.steps, ClassScaledLatency(latency, factors))),
        sensitivity=sensitivity,
        replay_index=representative,
    )
    given_speed = compare_given_speed(
        workload,
        result.policy,
        [(r.steps, real_latencies(r)) for r in results],
        config,
        profile,
        timing,
        results[0].warm_shapes,
    )
    return PolicyFidelity(
        result.policy, metrics, by_priority, analysis, result, sim.requests, tuple(results), given_speed
    )


def compare_given_speed(
    workload: Workload,
    policy: str,
    replays: Sequence[tuple[Sequence[StepRecord], Mapping[str, Sequence[float]]]],
    config: SchedulerConfig,
    profile: ProfileInfo,
    timing: str,
    warm_shapes: Iterable[int] = (),
) -> GivenSpeed:
    """Simulate ``workload`` once per replay (its steps and its real TTFT/E2E lists), on the machine's speed
    while that replay ran (:func:`~semsched.calibrate.fidelity_analysis.machine_speed`), and compare each with its
    replay: the fidelity the profile has once the machine's drift between the profile and the replay, and
    within the replay, is taken out."""
    shapes = set(warm_shapes)
    per_replay: list[tuple[MetricComparison, ...]] = []
    speeds: list[ReplaySpeed | None] = []
    for steps, real in replays:
        trace = machine_speed(steps, profile.model, timing)
        sim = simulate(
            workload, policy, config, profile.model, overheads=profile.overheads, warm_shapes=shapes, speed=trace
        )
        per_replay.append(compare(real, sim_latencies(sim.requests)))
        speeds.append(None if trace is None else ReplaySpeed(trace.low, trace.high, float(np.mean(trace.factors))))
    return GivenSpeed.of(SPEED_WINDOW_S, per_replay, speeds)


def median_replay(results: Sequence[ReplayResult]) -> int:
    """Index of the replay whose mean E2E is the median of the replays' (the lower median for an even count)."""
    means = [float(np.mean(real_latencies(r)["e2e"] or [0.0])) for r in results]
    return sorted(range(len(results)), key=lambda i: means[i])[(len(results) - 1) // 2]


# ---- the engine and its profile -----------------------------------------------------------------------------
def engine_settings(
    model: str, profile: ProfileInfo | None, *, max_model_len: int | None = None
) -> EngineSettings:
    """The engine to replay on. Limits (token budget, sequence cap, block size, KV blocks, dtype, context) come
    from the profile's ``engine`` section when it has one, so the replay runs the engine that was measured and
    the simulator gets the same limits; otherwise the profiler's defaults. ``max_model_len`` overrides the
    context (default: the profile's, else the smaller of the model's context and :data:`DEFAULT_MAX_MODEL_LEN`).
    """
    facts = read_model_facts(model)
    measured = profile.engine if profile is not None else None
    if max_model_len is None:
        if measured is not None:
            max_model_len = measured.max_model_len
        else:
            max_model_len = min(facts.max_position_embeddings or DEFAULT_MAX_MODEL_LEN, DEFAULT_MAX_MODEL_LEN)
    if measured is None:
        return EngineSettings(model=model, max_model_len=max_model_len)
    blocks_needed = -(-max_model_len // measured.block_size)
    return EngineSettings(
        model=model,
        max_model_len=max_model_len,
        max_num_seqs=measured.max_num_seqs,
        max_num_batched_tokens=measured.max_num_batched_tokens,
        block_size=measured.block_size,
        num_gpu_blocks=measured.num_gpu_blocks if measured.num_gpu_blocks >= blocks_needed else None,
        dtype=_dtype(measured.dtype),
    )


def _dtype(name: str) -> Dtype:
    for dtype in DTYPES:
        if dtype == name:
            return dtype
    raise FidelityError(f"profile: engine dtype {name!r} is not one vLLM accepts ({', '.join(DTYPES)})")


def profile_mismatches(profile: ProfileInfo, settings: EngineSettings) -> list[str]:
    """Ways the profiled engine differs from the replayed one (empty when they match or the profile does not
    say what it measured)."""
    measured = profile.engine
    if measured is None:
        return [f"profile {profile.model.name} records no engine; it may not describe this one"]
    notes = []
    if measured.engine != "vllm":
        notes.append(f"profile measured engine {measured.engine!r}, the replay runs vLLM")
    if Path(measured.model).name != Path(settings.model).name:
        notes.append(f"profile measured model {measured.model}, the replay runs {settings.model}")
    for name in ("max_num_seqs", "max_num_batched_tokens", "block_size"):
        if getattr(measured, name) != getattr(settings, name):
            notes.append(
                f"profile measured {name}={getattr(measured, name)}, the replay uses {getattr(settings, name)}"
            )
    return notes


PROFILE_EXTRA_BATCH_SIZES = (2, 3, 6, 12)
"""Decode batch sizes added to the profiler's ``quick`` grid: a replay at moderate load spends most steps with
one to a few decodes, where eq. 4-7 is least accurate, so those sizes get their own measurements."""

PROFILE_EXTRA_PREFILL_FRACTIONS = (0.25, 0.75, 1.5)
"""Prefill lengths (fractions of the token budget) added to the ``quick`` grid's 16, 64, budget/2, budget and
2 x budget: the replayed slice's prompts are mostly a few hundred tokens, between the quick grid's points, and
a prompt of 1.5 budgets gives a second chunk of half a budget on top of a full one, the typical continuation
chunk of the slice's longer prompts (replay steps with such chunks ran 1.2x a fit without them)."""

PROFILE_REPEATS = 8
"""Rounds of the grid when ``semsched fidelity`` profiles, split evenly over the profile's parts (at least one
round each): the fit takes each step's mean over all rounds. On a machine whose speed drifts by tens of
percent for seconds to minutes at a time, many rounds far apart keep one slow stretch from deciding a step."""


def profile_grid(settings: EngineSettings, *, repeats: int = PROFILE_REPEATS) -> ProfileGrid:
    """The profiler's ``quick`` grid plus :data:`PROFILE_EXTRA_BATCH_SIZES` (those below ``max_num_seqs - 1``)
    and :data:`PROFILE_EXTRA_PREFILL_FRACTIONS` of the token budget, run ``repeats`` rounds."""
    from semsched.calibrate.profiling import make_grid

    quick = make_grid("quick", settings, repeats=repeats)
    extra = {size for size in PROFILE_EXTRA_BATCH_SIZES if size < settings.max_num_seqs - 1}
    budget = settings.max_num_batched_tokens
    prefills = {max(1, int(budget * f)) for f in PROFILE_EXTRA_PREFILL_FRACTIONS} | set(quick.prefill_tokens)
    grid = dataclasses.replace(
        quick,
        decode_batch_sizes=tuple(sorted(set(quick.decode_batch_sizes) | extra)),
        prefill_tokens=tuple(sorted(p for p in prefills if p < settings.max_model_len)),
    )
    grid.check(settings)
    return grid


class ProfileSession:
    """The profile of the engine ``semsched fidelity`` replays on, measured in parts.

    Each :meth:`measure` starts a fresh :class:`~semsched.calibrate.replay.ServedEngine` (the semsched adapter,
    detokenisation, whole ``LLMEngine.step()`` wall time), runs rounds of :func:`profile_grid` with the profiler's
    driver (:func:`~semsched.calibrate.profiling.measure_grid`) and the engine-speed probe, and shuts it down.
    :func:`run_fidelity` interleaves the parts with the replays, so the profile samples the machine at the same
    stretches of time as the replays do. :meth:`save` fits every step measured so far (each grid step's mean over
    its repeats, :func:`~semsched.calibrate.profiling.fit_steps`), writes the profile with ``fit.timing: step`` and
    loads it back.
    """

    def __init__(
        self, settings: EngineSettings, *, enable_prefix_caching: bool = True, warm_batch_sizes: bool = False
    ) -> None:
        self.settings = settings
        self.enable_prefix_caching = enable_prefix_caching
        #: run every batch size once on each part's engine before measuring (ServedEngine.warm_batch_sizes)
        self.warm_batch_sizes = warm_batch_sizes
        self.steps: list[MeasuredStep] = []
        self.probes_s: list[float] = []
        self.intake_s: list[float] = []
        #: arrival-to-first-token times of lone requests arriving at a busy and at an idle loop
        self.wakeup_s: tuple[list[float], list[float]] = ([], [])
        self.engine: ProfiledEngine | None = None
        self.measured_s = 0.0
        self._rounds = 0

    def measure(self, rounds: int, progress: Callable[[int, int], None] | None = None) -> None:
        """Measure ``rounds`` more rounds of the grid on a fresh engine (then the engine-speed probe, the request
        intake and the cost of waking from idle)."""
        from semsched.calibrate.profiling import WAKEUP_TRIALS, intake_times_s, measure_grid, wakeup_times_s
        from semsched.calibrate.replay import ServedEngine

        if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
            raise FidelityError(f"rounds: must be an integer >= 1 (got {rounds!r})")
        started = time.perf_counter()
        grid = profile_grid(self.settings, repeats=rounds)
        with ServedEngine(self.settings, enable_prefix_caching=self.enable_prefix_caching) as engine:
            if self.warm_batch_sizes:
                engine.warm_batch_sizes()
            steps = measure_grid(engine, grid, self.settings, progress)
            self.probes_s.append(engine.probe_step_s())
            prompt = max(1, self.settings.max_num_batched_tokens // 2)
            self.intake_s.extend(intake_times_s(engine, self.settings))
            for measured, times in zip(self.wakeup_s, wakeup_times_s(engine, WAKEUP_TRIALS, prompt), strict=True):
                measured.extend(times)
            self.engine = engine.profiled_engine
        self.steps.extend(dataclasses.replace(s, repeat=s.repeat + self._rounds) for s in steps)
        self._rounds += rounds
        self.measured_s += time.perf_counter() - started

    def overheads(self) -> dict[str, float]:
        """What was measured of the profile's ``overheads``: the request intake (median), the first step of a
        new batch size, and waking from idle (median idle minus median busy arrival-to-first-token time)."""
        from semsched.calibrate.profiling import idle_wakeup_overhead_s, new_shape_overhead_s

        measured = {
            "arrival_s": float(np.median(self.intake_s)) if self.intake_s else None,
            "new_shape_s": new_shape_overhead_s(self.steps, "iteration"),
            "idle_wakeup_s": idle_wakeup_overhead_s(*self.wakeup_s),
        }
        return {name: value for name, value in measured.items() if value is not None}

    def save(self, path: Path) -> ProfileInfo:
        """Fit every step measured so far, write the profile to ``path`` (and every step to
        ``<stem>_steps.csv`` beside it) and load it back."""
        from semsched.calibrate.profiling import default_profile_name, fit_steps

        if not self.steps or self.engine is None:
            raise ValueError("profile: nothing measured yet")
        measured = self.engine
        name = default_profile_name(self.settings.model)
        # the mean of the repeats: the simulator must reproduce mean latencies, which add up steps' mean times
        model, report, all_steps = fit_steps(self.steps, name=name, timing="iteration", statistic="mean")
        _write_profile_steps(self.steps, path.with_name(f"{path.stem}_steps.csv"))
        probes = [p for p in self.probes_s if math.isfinite(p)]
        save_profile(
            model,
            path,
            description=(
                f"PROSERVE batch model (eq. 4-7) of the engine `semsched fidelity` replays on: {measured.engine} "
                f"{measured.engine_version} ({measured.device}, {measured.dtype}), {Path(measured.model).name}, "
                "semsched adapter (fcfs), detokenisation on; step time = whole LLMEngine.step() wall time"
            ),
            source="Measured by `semsched fidelity` with the semsched.calibrate.profiling grid driver and fit.",
            engine=measured,
            fit={
                "method": "relative-error non-negative least squares on the mean of each step's repeats",
                "timing": "step",
                "grid": "quick+small-batches+mid-prefills",
                "rounds": self._rounds,
                "parts": len(self.probes_s),
                "num_samples": report.num_samples,
                "num_measured_steps": len(self.steps),
                "mape": report.mape,
                "p90_ape": report.p90_ape,
                "all_steps_mape": all_steps.mape,
                PROBE_FIT_KEY: float(np.median(probes)) if probes else float("nan"),
                "wall_s": round(self.measured_s, 1),
            },
            overheads=self.overheads(),
        )
        return load_profile_info(str(path))


def profile_engine(
    settings: EngineSettings,
    path: Path,
    *,
    enable_prefix_caching: bool = True,
    progress: Callable[[int, int], None] | None = None,
) -> ProfileInfo:
    """Measure the engine the replay runs in one part of :data:`PROFILE_REPEATS` rounds
    (:class:`ProfileSession`), write the profile to ``path`` and load it back."""
    session = ProfileSession(settings, enable_prefix_caching=enable_prefix_caching)
    session.measure(PROFILE_REPEATS, progress)
    return session.save(path)


def _write_profile_steps(steps: Sequence[MeasuredStep], path: Path) -> None:
    """Every measured profiling step: its grid group, repeat, composition, model time and whole step time."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["group", "repeat", "prefill_chunks", "num_decode", "decode_context_tokens", "model_s",
                         "step_s", "first_shape"])  # fmt: skip
        for step in steps:
            c = step.record.composition
            chunks = " ".join(f"{lq}:{lkv}" for lq, lkv in c.prefill)
            writer.writerow([step.key.label, step.repeat, chunks, c.num_decode, c.decode_context_tokens,
                             f"{step.record.execute_s:.6f}", f"{step.record.iteration_s:.6f}",
                             step.first_shape])  # fmt: skip


# ---- the run ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class FidelityConfig:
    """What to compare. ``rate_per_s=None`` replays at ``load`` (a fraction) of the simulated saturation rate."""

    settings: EngineSettings
    trace: Path
    num_requests: int = DEFAULT_NUM_REQUESTS
    rate_per_s: float | None = None
    load: float = DEFAULT_LOAD
    policies: tuple[str, ...] = DEFAULT_POLICIES
    seed: int = 0
    enable_prefix_caching: bool = True
    #: torch intra-op threads of the in-process engines (profile and replays alike)
    threads: int = 1
    #: replays of every policy (each on a fresh engine); the real side of each statistic is their mean
    repeats: int = DEFAULT_REPEATS

    def __post_init__(self) -> None:
        if isinstance(self.repeats, bool) or not isinstance(self.repeats, int) or not 1 <= self.repeats <= 20:
            raise FidelityError(f"repeats: must be an integer from 1 to 20 (got {self.repeats!r})")
        if isinstance(self.threads, bool) or not isinstance(self.threads, int) or self.threads < 1:
            raise FidelityError(f"threads: must be an integer >= 1 (got {self.threads!r})")
        if self.rate_per_s is not None and (not math.isfinite(self.rate_per_s) or self.rate_per_s <= 0):
            raise FidelityError(f"rate: must be a finite number > 0 (got {self.rate_per_s!r})")
        if not (math.isfinite(self.load) and 0 < self.load <= 1):
            raise FidelityError(f"load: must be in (0, 1] (got {self.load!r})")
        if not self.policies:
            raise FidelityError("policies: give at least one policy")
        for policy in self.policies:
            make_policy(policy)  # validate every spec before any engine starts


@dataclass(frozen=True)
class PreparedSlice:
    """The slice at its replay rate, and what the replay sends to the engine."""

    workload: Workload
    length_scale: float
    rate_per_s: float
    saturation_rate_per_s: float
    requests: list[ReplayRequest]
    warmup: list[ReplayRequest]


def prepare_slice(config: FidelityConfig, profile: ProfileInfo) -> PreparedSlice:
    """Load and scale the slice, pick the rate (given, or ``config.load`` of the saturation rate that the
    simulator finds with ``profile``) and build the engine requests."""
    settings = config.settings
    vocab_size = read_model_facts(settings.model).vocab_size
    workload, scale = load_slice(
        config.trace, config.num_requests, max_model_len=settings.max_model_len, seed=config.seed
    )
    capacity = saturation_rate(workload, scheduler_config(settings), profile.model)
    rate = config.rate_per_s if config.rate_per_s is not None else config.load * capacity
    workload = rescale_to_rate(workload, rate)
    return PreparedSlice(
        workload,
        scale,
        rate,
        capacity,
        replay_requests(workload, vocab_size=vocab_size, seed=config.seed),
        warmup_requests(settings, vocab_size=vocab_size, seed=config.seed),
    )


def replay_order(policies: Sequence[str], repeats: int) -> list[list[str]]:
    """The replays, in rounds: every policy once per round, in the given order in even rounds and reversed in odd
    ones (A B, B A, A B, ...), so a slow or fast stretch of the machine does not fall on one policy."""
    return [list(policies) if r % 2 == 0 else list(reversed(policies)) for r in range(repeats)]


FIRST_PART_ROUNDS = 4
"""Rounds of the grid, at least, in the profile part measured before the replays, whose fit sets the replay rate.
One round's fit moves with the machine's speed of that moment; the rate set from two rounds ran the replays at
28-42 % of the full profile's saturation when 30 % was asked (nine runs). In a throw-away resampling of the
rounds of those runs' profiles, the RMS of a part's saturation rate against the full profile's was about 11 % for
two rounds and 6 % for four."""


def profile_rounds(repeats: int) -> list[int]:
    """Rounds of the grid per profile part: one part before the replays (at least :data:`FIRST_PART_ROUNDS`:
    its fit sets the rate) and one after each round of replays, :data:`PROFILE_REPEATS` rounds shared out among
    those (at least one each)."""
    rest = max(1, -(-PROFILE_REPEATS // (repeats + 1)))
    return [max(FIRST_PART_ROUNDS, rest)] + [rest] * repeats


def run_fidelity(
    config: FidelityConfig,
    profile: ProfileInfo | None = None,
    *,
    profile_path: Path | None = None,
    command: str = "",
    log: Log | None = None,
    progress: Progress | None = None,
) -> FidelityReport:
    """Replay the slice through vLLM ``config.repeats`` times per policy (:func:`replay_order`, a fresh engine
    each) and through the simulator with ``profile``, and compare. Without a profile the engine is profiled into
    ``profile_path`` (required then) in parts (:class:`ProfileSession`, :func:`profile_rounds`): one before the
    replays, whose fit sets the replay rate, and one after each round of replays; the simulator gets the fit of
    all parts."""
    from semsched.calibrate.replay import set_torch_threads

    say = log or (lambda message: None)
    load_before = os.getloadavg()[0]
    shape_cache = shape_cache_capacity(config.settings)
    threads = set_torch_threads(config.threads)
    session: ProfileSession | None = None
    rounds = profile_rounds(config.repeats)
    if profile is None:
        if profile_path is None:
            raise ValueError("profile_path: needed to profile the engine when no profile is given")
        session = ProfileSession(
            config.settings, enable_prefix_caching=config.enable_prefix_caching, warm_batch_sizes=True
        )
        _profile_part(session, rounds[0], 1, len(rounds), say, progress)
        profile = session.save(profile_path)
    mismatches = profile_mismatches(profile, config.settings)
    for note in mismatches:
        say(f"warning: {note}")
    prepared = prepare_slice(config, profile)
    say(_slice_line(config, prepared))
    results: dict[str, list[ReplayResult]] = {policy: [] for policy in config.policies}
    for index, order in enumerate(replay_order(config.policies, config.repeats)):
        for policy in order:
            results[policy].append(_replay_policy(config, prepared, policy, index, say, progress))
        if session is not None:
            _profile_part(session, rounds[index + 1], index + 2, len(rounds), say, progress)
    if session is not None and profile_path is not None:
        profile = session.save(profile_path)
    timing = profile_timing(profile)
    sim_config = scheduler_config(config.settings)
    policies = tuple(
        compare_policy(prepared.workload, results[name], sim_config, profile, timing) for name in config.policies
    )
    meta = _meta(config, prepared, profile, command) | {
        # what the rate was against the profile the simulator got (all parts), when that is not the one that
        # set the rate: a first part measured on a fast (slow) stretch of the machine sets too high (low) a rate
        "full_profile_saturation_rate_per_s": (
            saturation_rate(prepared.workload, sim_config, profile.model) if session is not None else None
        ),
        "profile_mismatches": mismatches,
        "load_average_before": load_before,
        "load_average_after": os.getloadavg()[0],
        "cpu_count": os.cpu_count(),
        "torch_threads": threads,
        "onednn_primitive_cache_capacity": shape_cache,
    }
    return FidelityReport(meta, policies)


ONEDNN_CACHE_ENV = "ONEDNN_PRIMITIVE_CACHE_CAPACITY"
SHAPE_CACHE_PER_BUDGET_TOKEN = 16
"""oneDNN primitives to allow per token of the budget: one per matmul weight shape per batch size (the tiny Llama
has 4 shapes that see every token, plus the LM head's), with room for models with more."""


def shape_cache_capacity(settings: EngineSettings) -> str | None:
    """Give this process's oneDNN a primitive cache that holds every batch size the engine can run (unless
    ``ONEDNN_PRIMITIVE_CACHE_CAPACITY`` is set already) and return the value in effect.

    vLLM's CPU backend builds a matmul primitive per number of tokens a step computes. With oneDNN's default
    1,024 primitives, a 512-token budget's sizes do not fit: after every size had run once, running an early
    size again cost 2.2 ms more than a repeat (tiny model), 0.2 ms less with room for all of them. The replays
    and the profile warm every size (:meth:`~semsched.calibrate.replay.ServedEngine.warm_batch_sizes`), so they
    measure the warm engine the simulator models. oneDNN reads the variable when it first builds a primitive:
    call this before any engine starts in the process."""
    os.environ.setdefault(ONEDNN_CACHE_ENV, str(SHAPE_CACHE_PER_BUDGET_TOKEN * settings.max_num_batched_tokens))
    return os.environ.get(ONEDNN_CACHE_ENV)


def _profile_part(
    session: ProfileSession, rounds: int, part: int, parts: int, say: Log, progress: Progress | None
) -> None:
    plural = "s" if rounds > 1 else ""
    say(f"profiling the engine, part {part} of {parts} ({rounds} round{plural} of the grid) ...")
    session.measure(rounds, None if progress is None else lambda done, total: progress("profile", done, total))


def _replay_policy(
    config: FidelityConfig, prepared: PreparedSlice, policy: str, index: int, say: Log, progress: Progress | None
) -> ReplayResult:
    from semsched.calibrate.replay import replay

    label = policy if config.repeats == 1 else f"{policy} ({index + 1}/{config.repeats})"
    say(f"replaying {label} on vLLM ...")

    def advance(done: int, total: int) -> None:
        if progress is not None:
            progress(label, done, total)

    return replay(
        config.settings,
        policy,
        prepared.requests,
        enable_prefix_caching=config.enable_prefix_caching,
        warmup_requests=prepared.warmup,
        warm_batch_sizes=True,
        progress=advance,
    )


def _slice_line(config: FidelityConfig, prepared: PreparedSlice) -> str:
    workload, rate, capacity = prepared.workload, prepared.rate_per_s, prepared.saturation_rate_per_s
    return (
        f"slice: {len(workload)} requests of {Path(config.trace).name}, lengths x{prepared.length_scale:.3f} "
        f"(prompt mean {workload.prompt_tokens.mean():.0f}, output mean {workload.output_tokens.mean():.0f} "
        f"tokens), {rate:.2f} req/s over {workload.duration_s():.0f} s ({rate / capacity:.0%} of the simulated "
        f"saturation rate {capacity:.2f} req/s)"
    )


def _meta(config: FidelityConfig, prepared: PreparedSlice, profile: ProfileInfo, command: str) -> dict[str, Any]:
    return {
        "command": command,
        "trace": str(config.trace),
        "num_requests": len(prepared.workload),
        "length_scale": prepared.length_scale,
        "rate_per_s": prepared.rate_per_s,
        "simulated_saturation_rate_per_s": prepared.saturation_rate_per_s,
        "load": prepared.rate_per_s / prepared.saturation_rate_per_s,
        "seed": config.seed,
        "policies": list(config.policies),
        "repeats": config.repeats,
        "engine": dataclasses.asdict(config.settings) | {"kv_blocks": config.settings.kv_blocks},
        "enable_prefix_caching": config.enable_prefix_caching,
        "profile": {
            "name": profile.model.name,
            "origin": profile.origin,
            "timing": profile_timing(profile),
            "fit": dict(profile.fit),
            "engine": dataclasses.asdict(profile.engine) if profile.engine is not None else None,
            "overheads": dataclasses.asdict(profile.overheads),
        },
    }
