"""The scoreboard (issue 31): every registered policy at its defaults, and each seed's tuned spec, on one
benchmark per seed plus long-context and production traffic, over load, with a regret table.

How it is run (../shared/EXPERIMENTS.md):

* **contenders** (:func:`contenders`): every name of ``POLICIES`` at its defaults, plus the seeds' tuned specs
  imported from their reproductions (PROSERVE's SlideBatching told the metric's w_p, the paper's LAPS-SD and
  ours). A tuned spec equal to a default (``semantic`` on its own profile, ``tiered``, SageSched's ``gittins``,
  whose length predictor is the sagesched benchmark's cluster) is that default's row;
* **benchmarks** (:data:`BENCHMARKS`): each has one headline metric and its direction, a side column, and a
  load curve at :data:`LOADS` x its capacity, measured the way its reproduction measures it (FCFS under
  overload, :func:`semsched.experiments.tiers.measure_capacity`), on :data:`NUM_SEEDS` seeds; every contender of
  a point runs on the same requests;
* **regret** (:func:`regret_table`): per seed, a contender's headline over the best contender's on that seed,
  oriented so that 1.00 is the best and bigger is worse; the table shows the median over seeds per load;
* **failures are shown, never dropped**: a contender that raises on a benchmark is an ``error`` cell (found by a
  probe run on a few requests first, or by the grid itself); a run that strands requests (``STALLED``: the
  clusters run with ``allow_stalls``) has no headline and reads ``S``; a run without a value for another reason
  (no urgency-0 request finished, a request rejected where the metric is a mean over all) reads ``—``.

``semsched advise`` takes :func:`contenders` from here; :func:`run_benchmark` runs any :class:`Benchmark` (as
:func:`trace_benchmark` builds one for a workload spec of the user's) through an
:class:`~semsched.experiments.framework.ExperimentContext`.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import LinearSegmentedColormap, LogNorm
from matplotlib.figure import Figure as PlotFigure

from semsched.core.request import RequestState
from semsched.core.scheduler import SchedulerConfig
from semsched.core.tiers import DEFAULT_TIERS, UNTIERED
from semsched.experiments import laps_sd, proserve, sagesched, semantic, tiers
from semsched.experiments.curves import Band, Claim
from semsched.experiments.framework import ExperimentContext, Figure, GridPoint, Table
from semsched.experiments.numbers import num
from semsched.experiments.plots import band_chart
from semsched.experiments.registry import Experiment, register_experiment
from semsched.experiments.report import numbers_in
from semsched.experiments.tiers import at_rate, measure_capacity
from semsched.metrics.tdg import TDGWeights
from semsched.policies import POLICIES
from semsched.policies.registry import parse_spec
from semsched.sim.prediction import parse_length_spec
from semsched.sim.runner import ClusterSpec, PolicyRun, run_policy
from semsched.sim.speculative import speculation_preset
from semsched.workloads import DataNotFoundError, Workload, build_workload
from semsched.workloads.spec_bench import mbpp_acceptance
from semsched.workloads.tiers import assign_tiers
from semsched.workloads.traces import data_dir

# ---- the grid --------------------------------------------------------------------------------------------------
LOADS = (0.6, 0.9, 1.2)
QUICK_LOADS = (0.6, 1.2)
NUM_SEEDS = 3
#: the contenders of ``--quick`` (those registered)
QUICK_CONTENDERS = ("fcfs", "vllm-fcfs", "tiered", "gittins", "utility")
#: the policy issue 31 sets targets for
UTILITY = "utility"
#: issue 31's targets: regret on each seed's benchmark, production goodput over the best other, PREMIUM
#: attainment over its idle ceiling at :data:`CEILING_CHECK_LOAD`
REGRET_TARGET = 1.05
GOODPUT_TARGET = 1.2
CEILING_TARGET = 0.98
CEILING_CHECK_LOAD = 0.9
#: a regret is shown up to this (a zero against a positive best, e.g. no goodput at all, is this)
REGRET_CAP = 99.0
#: requests of the probe run that finds a contender that raises on a benchmark before its grid runs
PROBE_REQUESTS = 20
#: specs that run ~50x slower than fcfs a request (docs/benchmarks.md): handed to the workers first
SLOW_POLICIES = ("slide-batching",)

# ---- the long-context benchmark --------------------------------------------------------------------------------
LONG_CONTEXT_FILE = "long_context_synthetic.jsonl"
#: KV blocks (16 tokens) of the long-context engine: 131,072 tokens, so a 100k-token prompt fits (an A100-80GB
#: holds ~160k tokens of Qwen1.5-4B's KV: 40 layers x 2,560 x 2 x 2 bytes = 410 kB a token, ~65 GB free)
LONG_CONTEXT_BLOCKS = 8192

# ---- the production mix (helper C's module; the benchmark is skipped with a note until it lands) --------------
PRODUCTION_SPEC = "production-mix"
#: engines of the production cluster (one speculating): with four, a run of a few hundred requests never fills
#: their KV caches and slots, nothing queues and every ordering policy ties
PRODUCTION_INSTANCES = 2

Value = float | None


# ---- contenders ------------------------------------------------------------------------------------------------
def tuned_specs() -> dict[str, str]:
    """Each seed's tuned spec, label -> spec, as its reproduction runs it (full grid, seed 0)."""
    plotted = laps_sd.policies(speculation_preset(laps_sd.PLOTTED_METHOD))
    return {
        "semantic": semantic.semantic_spec(semantic.FIG2.profile),
        proserve.OURS: proserve.slide_batching(_proserve_first_token_weight(), proserve.PROFILE),
        sagesched.SAGESCHED: next(c.policy for c in sagesched.contenders(None) if c.label == sagesched.SAGESCHED),
        "tiered": tiers.OURS,
        "laps-sd (paper)": plotted[laps_sd.PAPER_LAPS],
        laps_sd.OUR_LAPS: plotted[laps_sd.OUR_LAPS],
    }


@functools.lru_cache(maxsize=1)
def _proserve_first_token_weight() -> float:
    """w_p of proserve's main setting (mean input / mean output of its full grid's requests at seed 0)."""
    workload = build_workload(proserve.MAIN.workload, rate_per_s=1.0, num_requests=_PROSERVE_FULL_REQUESTS, seed=0)
    return TDGWeights.paper_defaults(workload.to_requests()).first_token


_PROSERVE_FULL_REQUESTS = 500  # proserve.Grid's full num_requests


def contenders() -> dict[str, str]:
    """Label -> policy spec: every registered policy at its defaults (label = name), then each seed's tuned spec
    whose spec is not one of those already (:func:`tuned_specs`)."""
    out = {name: name for name in POLICIES.names()}
    for label, spec in tuned_specs().items():
        if spec not in out.values():
            out[label] = spec
    return out


# ---- benchmarks ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Setup:
    """A benchmark made ready for its grid: per seed its cluster and measured capacity (requests/s), the requests
    at a load (``workload_at(seed, load)``), a reference value (an idle ceiling) and the configuration."""

    seeds: tuple[int, ...]
    workload_at: Callable[[int, float], Workload]
    clusters: Mapping[int, ClusterSpec]
    capacity_per_s: Mapping[int, float]
    reference: Mapping[int, Value] = field(default_factory=dict)
    config: Mapping[str, Any] = field(default_factory=dict)


Reader = Callable[[PolicyRun, Setup, int], Value]


@dataclass(frozen=True)
class Benchmark:
    """One benchmark: its headline metric (name with unit) and direction, a side column, how many requests a run
    holds (full, quick), how to set it up for some seeds (``setup(seeds, num_requests, user_workload)``) and how
    to read the headline and side values of one run (None: no value; a stranded run has none whatever the
    reader says). ``available`` says why it cannot run here (None: it can)."""

    name: str
    seed_doc: str
    headline: str
    higher_is_better: bool
    requests: tuple[int, int]
    setup: Callable[[Sequence[int], int, str | None], Setup]
    headline_of: Reader
    side: str = ""
    side_of: Reader | None = None
    about: str = ""
    #: whether the benchmark is a seed's own (issue 31's regret target applies to it)
    seed_benchmark: bool = True
    #: whether ``--workload`` replaces its requests
    takes_workload: bool = False
    available: Callable[[], str | None] = lambda: None

    def num_requests(self, quick: bool) -> int:
        return self.requests[1] if quick else self.requests[0]


@dataclass(frozen=True)
class Outcome:
    """One run read: its headline and side values, its requests' fates, the ids it served."""

    headline: Value
    side: Value
    num_requests: int
    finished: int
    refused: int
    stranded: int
    served: frozenset[str] = frozenset()

    @property
    def not_served(self) -> int:
        return self.num_requests - self.finished


def read_run(benchmark: Benchmark, run: PolicyRun, setup: Setup, seed: int) -> Outcome:
    states = [r.state for r in run.requests]
    stranded = sum(s is RequestState.STALLED or not s.is_terminal for s in states)
    refused = sum(s in (RequestState.REJECTED, RequestState.DROPPED) for s in states)
    served = frozenset(r.request_id for r in run.requests if r.state is RequestState.FINISHED)
    headline = None if stranded else _finite(benchmark.headline_of(run, setup, seed))
    side = None if benchmark.side_of is None else _finite(benchmark.side_of(run, setup, seed))
    return Outcome(headline, side, len(states), len(served), refused, stranded, served)


def _finite(value: Value) -> Value:
    return None if value is None or not math.isfinite(value) else float(value)


def _at_capacity(workloads: Mapping[int, Workload], capacity: Mapping[int, float]) -> Callable[[int, float],
                                                                                             Workload]:
    def workload_at(seed: int, load: float) -> Workload:
        return at_rate(workloads[seed], load * capacity[seed])

    return workload_at


def _first_seed_capacity(workloads: Mapping[int, Workload], seeds: Sequence[int], cluster: ClusterSpec,
                         name: str) -> dict[int, float]:
    """The first seed's measured capacity, used for every seed (as tiers, proserve and sagesched do)."""
    capacity = measure_capacity(workloads[seeds[0]], name, seeds[0], cluster).requests_per_s
    return dict.fromkeys(seeds, capacity)


def _idle_ceiling(workloads: Mapping[int, Workload], capacity: Mapping[int, float], cluster: ClusterSpec,
                  read: Callable[[PolicyRun], Value]) -> dict[int, Value]:
    """FCFS's value of the same requests at :data:`tiers.CEILING_LOAD` of capacity, per seed."""
    return {seed: read(run_policy(at_rate(w, tiers.CEILING_LOAD * capacity[seed]), tiers.FIFO, cluster))
            for seed, w in workloads.items()}


def _stalls(cluster: ClusterSpec) -> ClusterSpec:
    return dataclasses.replace(cluster, allow_stalls=True)


# 1. spikes (seed 000)
def _spikes_setup(seeds: Sequence[int], num_requests: int, _: str | None) -> Setup:
    num_spikes = num_requests  # this benchmark's size is counted in spikes of 1-100 requests
    profile = semantic.FIG2.profile
    capacity = semantic.spike_capacity(profile, seeds)
    cluster = _stalls(ClusterSpec(profile=profile))

    def workload_at(seed: int, load: float) -> Workload:
        gap = semantic.gap_for_load(load, capacity)
        return semantic.burst(semantic.spikes_spec(gap, semantic.HEADLINE_MAX_CONCURRENT), gap, num_spikes, seed)

    return Setup(tuple(seeds), workload_at, dict.fromkeys(seeds, cluster), dict.fromkeys(seeds, capacity),
                 config={"workload": semantic.spikes_spec(0.1, semantic.HEADLINE_MAX_CONCURRENT).replace(
                     "gap_s=0.1", "gap_s=G"), "num_spikes": num_spikes, "profile": profile,
                     "capacity_requests_per_s": capacity})


def _urgency0(run: PolicyRun, setup: Setup, seed: int) -> Value:
    return semantic.level_numbers(run)[semantic.U0]


def _all_levels(run: PolicyRun, setup: Setup, seed: int) -> Value:
    return semantic.level_numbers(run)[semantic.ALL_KEY]


# 2. PROSERVE's setting (seed 001)
def _proserve_setup(seeds: Sequence[int], num_requests: int, _: str | None) -> Setup:
    setting = proserve.MAIN
    workloads = {}
    for seed in seeds:
        workload = build_workload(setting.workload, rate_per_s=1.0, num_requests=num_requests, seed=seed)
        ttft_s, tpot_s = proserve.slos(workload, setting.profile, floor=setting.ttft_floor)
        levels = proserve.high_low(ttft_s, tpot_s)
        workloads[seed] = assign_tiers(workload, levels, np.random.default_rng([seed, 1]))
    cluster = _stalls(ClusterSpec(profile=setting.profile))
    capacity = _first_seed_capacity(workloads, seeds, cluster, setting.label)
    ttft_s, tpot_s = proserve.slos(workloads[seeds[0]], setting.profile, floor=setting.ttft_floor)
    return Setup(tuple(seeds), _at_capacity(workloads, capacity), dict.fromkeys(seeds, cluster), capacity,
                 config={"workload": setting.workload, "profile": setting.profile, "num_requests": num_requests,
                         "priorities": "HIGH/LOW at random, TDG weights 2 and 1", "ttft_slo_s": ttft_s,
                         "tpot_slo_s": tpot_s, "capacity_requests_per_s": capacity[seeds[0]]})


def _tdg_ratio(run: PolicyRun, setup: Setup, seed: int) -> Value:
    return run.summary.overall.tdg_ratio


def _ttft_tpot(run: PolicyRun, setup: Setup, seed: int) -> Value:
    return run.summary.overall.ttft_tpot_attainment


# 3. answers with online length prediction (seed 002)
def _sagesched_setup(seeds: Sequence[int], num_requests: int, _: str | None) -> Setup:
    root = data_dir()
    for name in (sagesched.ALPACA_FILE, sagesched.SPEC_BENCH_FILE):
        if not (root / name).is_file():
            raise DataNotFoundError(f"{root / name}: missing (set SEMSCHED_DATA_DIR to the shared data)")
    spec = f"mixed:parts={root / sagesched.ALPACA_FILE}+{root / sagesched.SPEC_BENCH_FILE}"
    workloads = {seed: build_workload(spec, rate_per_s=1.0, num_requests=num_requests, seed=seed)
                 for seed in seeds}
    plain = ClusterSpec(profile=sagesched.PROFILE)
    capacity = _first_seed_capacity(workloads, seeds, plain, "mixed")
    predictor = next(c.predictor for c in sagesched.contenders(None) if c.label == sagesched.SAGESCHED)
    assert predictor is not None
    cluster = _stalls(dataclasses.replace(plain, length_predictor=parse_length_spec(predictor)))
    return Setup(tuple(seeds), _at_capacity(workloads, capacity), dict.fromkeys(seeds, cluster), capacity,
                 config={"workload": "mixed: AlpacaEval (Llama-3-8B answers) + Spec-Bench (Vicuna-7B answers)",
                         "profile": sagesched.PROFILE, "num_requests": num_requests, "length_predictor": predictor,
                         "capacity_requests_per_s": capacity[seeds[0]]})


def _ttlt(run: PolicyRun, setup: Setup, seed: int) -> Value:
    return sagesched.ttlt(run)


def _ttft(run: PolicyRun, setup: Setup, seed: int) -> Value:
    return sagesched.ttft(run)


# 4. tiers (seed 003)
_PREMIUM = next(t.priority for t in DEFAULT_TIERS if t.name == "PREMIUM")


def _premium_attainment(run: PolicyRun) -> Value:
    part = run.summary.class_summary(_PREMIUM)
    return None if part is None else part.metric("slo_attainment")


def _tiers_setup(seeds: Sequence[int], num_requests: int, _: str | None) -> Setup:
    workloads = {seed: build_workload(tiers.ARTICLE_MIX, rate_per_s=1.0, num_requests=num_requests, seed=seed)
                 for seed in seeds}
    cluster = _stalls(ClusterSpec())
    capacity = _first_seed_capacity(workloads, seeds, cluster, tiers.ARTICLE_MIX)
    ceiling = _idle_ceiling(workloads, capacity, cluster, _premium_attainment)
    return Setup(tuple(seeds), _at_capacity(workloads, capacity), dict.fromkeys(seeds, cluster), capacity, ceiling,
                 config={"workload": tiers.ARTICLE_MIX, "profile": cluster.profile, "num_requests": num_requests,
                         "capacity_requests_per_s": capacity[seeds[0]], "idle_ceiling_per_seed": ceiling,
                         "idle_ceiling": f"fcfs at {tiers.CEILING_LOAD:g}x"})


def _premium_over_ceiling(run: PolicyRun, setup: Setup, seed: int) -> Value:
    attained, ceiling = _premium_attainment(run), setup.reference.get(seed)
    return None if attained is None or not ceiling else attained / ceiling


def _throughput(run: PolicyRun, setup: Setup, seed: int) -> Value:
    return run.summary.overall.output_tokens_per_s


# 5. speculative decoding (seed 004)
def _spec_setup(arrivals: str) -> Callable[[Sequence[int], int, str | None], Setup]:
    def setup(seeds: Sequence[int], num_requests: int, _: str | None) -> Setup:
        method = laps_sd.PLOTTED_METHOD
        spec = laps_sd.WORKLOADS[laps_sd.PLOTTED].format(log=method)
        logs = data_dir() / "spec_bench" / "model_answer"
        if not logs.is_dir():
            raise DataNotFoundError(f"{logs}: missing (set SEMSCHED_DATA_DIR to the shared data)")
        fallback = mbpp_acceptance(method, "coding")
        clusters = {seed: _stalls(ClusterSpec(
            profile=laps_sd.PROFILE, scheduler=laps_sd.ENGINE,
            speculation=dataclasses.replace(speculation_preset(method, fallback), seed=seed)))
            for seed in seeds}
        workloads = {seed: build_workload(spec, rate_per_s=1.0, num_requests=num_requests, seed=seed,
                                          tiers=(UNTIERED,)) for seed in seeds}
        capacity = {seed: measure_capacity(workloads[seed], spec, seed, clusters[seed]).requests_per_s
                    for seed in seeds}

        def workload_at(seed: int, load: float) -> Workload:
            arrived = laps_sd.arrive(workloads[seed], arrivals, load * capacity[seed], seed)
            return laps_sd.PREDICTED.apply(arrived, seed)

        return Setup(tuple(seeds), workload_at, clusters, capacity,
                     config={"workload": spec, "method": method, "arrivals": arrivals,
                             "burst_size": laps_sd.BURST_SIZE if arrivals == "burst" else None,
                             "profile": laps_sd.PROFILE, "engine": "one request at a time, swap",
                             "length_prediction": laps_sd.PREDICTED.label(), "num_requests": num_requests,
                             "capacity_requests_per_s": dict(capacity)})

    return setup


def _mean_latency(run: PolicyRun, setup: Setup, seed: int) -> Value:
    return laps_sd.mean_latency(run)


# 6. long-context conversations
def long_context_spec(workload: str | None = None) -> str:
    """The long-context benchmark's requests: the user's workload spec (``--workload``) or the synthetic trace."""
    return workload or f"trace:path={data_dir() / LONG_CONTEXT_FILE}"


def window(workload: Workload, index: int, count: int, num_windows: int) -> Workload:
    """Window ``index`` of ``num_windows``: ``count`` consecutive requests (all when the workload holds no more),
    the windows spread evenly over the workload, arrivals re-based to 0."""
    count = min(count, len(workload))
    start = index * ((len(workload) - count) // max(num_windows - 1, 1))
    times = workload.arrival_time_s
    end_s = float(times[start + count]) if start + count < len(workload) else math.inf
    return workload.slice_time(float(times[start]), end_s).head(count)


def windows(spec: str, seeds: Sequence[int], count: int) -> dict[int, Workload]:
    """One window of ``spec``'s requests per seed (:func:`window`; its tiers drawn from the seed, when the
    workload has none of its own)."""
    return {seed: window(build_workload(spec, rate_per_s=1.0, seed=seed, num_requests=None), k, count, len(seeds))
            for k, seed in enumerate(seeds)}


def _long_context_setup(seeds: Sequence[int], num_requests: int, user: str | None) -> Setup:
    spec = long_context_spec(user)
    if user is None and not (data_dir() / LONG_CONTEXT_FILE).is_file():
        raise DataNotFoundError(f"{data_dir() / LONG_CONTEXT_FILE}: missing (set SEMSCHED_DATA_DIR)")
    workloads = windows(spec, seeds, num_requests)
    cluster = _stalls(ClusterSpec(scheduler=SchedulerConfig(num_gpu_blocks=LONG_CONTEXT_BLOCKS)))
    capacity = _first_seed_capacity(workloads, seeds, cluster, spec)
    return Setup(tuple(seeds), _at_capacity(workloads, capacity), dict.fromkeys(seeds, cluster), capacity,
                 config={"workload": spec, "num_requests": num_requests, "profile": cluster.profile,
                         "num_gpu_blocks": LONG_CONTEXT_BLOCKS, "capacity_requests_per_s": capacity[seeds[0]],
                         "prompt_tokens_max": int(max(w.prompt_tokens.max() for w in workloads.values())),
                         "windows": "consecutive requests per seed, spread over the trace; tiers by seed"})


def _mean_e2e(run: PolicyRun, setup: Setup, seed: int) -> Value:
    return run.summary.overall.e2e_s.mean


def _not_served(run: PolicyRun, setup: Setup, seed: int) -> Value:
    return float(sum(r.state is not RequestState.FINISHED for r in run.requests))


# 7. production mix (helper C: semsched.workloads.production, semsched.metrics.goodput)
def _production_missing() -> str | None:
    try:
        import semsched.metrics.goodput  # noqa: F401
        import semsched.workloads.production  # noqa: F401
    except ImportError as error:
        return f"production mix not available yet ({error})"
    return None


#: the knee search of the production benchmark's capacity: rates ``start x KNEE_STEP^k``, at most KNEE_STEPS of
#: them, until FCFS's median TTFT exceeds KNEE_TTFT_FACTOR x its median at KNEE_IDLE x ``start``
KNEE_STEP = 1.2
KNEE_STEPS = 12
KNEE_TTFT_FACTOR = 2.0
KNEE_IDLE = 0.1


def knee_capacity(workload: Workload, cluster: ClusterSpec, start_per_s: float) -> float:
    """The largest rate ``start_per_s x KNEE_STEP^k`` at which FCFS's median TTFT stays within
    :data:`KNEE_TTFT_FACTOR` of its median when nearly idle: where queues start to form.

    The production cluster's capacity measured at overload (every request at once, the reproductions' method)
    understates it: its speculating engines are slow only at full batches, so at that rate nothing queues and
    every ordering policy ties (measured: overload capacity 45 req/s with half the engines speculating, queues
    first at 70-90 req/s). The knee is where scheduling starts to matter."""

    def median_ttft(rate: float) -> float:
        value = run_policy(at_rate(workload, rate), tiers.FIFO, cluster).summary.overall.ttft_s.median
        return math.inf if value is None else value

    idle = median_ttft(KNEE_IDLE * start_per_s)
    best = rate = start_per_s
    for _ in range(KNEE_STEPS):
        if median_ttft(rate) > KNEE_TTFT_FACTOR * idle:
            break
        best, rate = rate, rate * KNEE_STEP
    return best


def _production_setup(seeds: Sequence[int], num_requests: int, _: str | None) -> Setup:
    from semsched.workloads.production import production_cluster, production_mix

    workloads = {seed: production_mix(1.0, seed, num_requests) for seed in seeds}
    cluster = _stalls(production_cluster(PRODUCTION_INSTANCES))
    overload = _first_seed_capacity(workloads, seeds, cluster, PRODUCTION_SPEC)[seeds[0]]
    capacity = dict.fromkeys(seeds, knee_capacity(workloads[seeds[0]], cluster, overload))
    ceiling = _idle_ceiling(workloads, capacity, cluster, _premium_share)
    return Setup(tuple(seeds), _at_capacity(workloads, capacity), dict.fromkeys(seeds, cluster), capacity, ceiling,
                 config={"workload": PRODUCTION_SPEC, "num_requests": num_requests,
                         "cluster": f"{cluster.num_instances} instances of {cluster.profile}, router "
                                    f"{cluster.router}", "capacity_requests_per_s": capacity[seeds[0]],
                         "capacity": f"knee: FCFS median TTFT within {KNEE_TTFT_FACTOR:g}x of idle, searched "
                                     f"from the overload capacity {overload:.3g} req/s in steps of {KNEE_STEP:g}x",
                         "premium_idle_ceiling_per_seed": ceiling})


def _premium_share(run: PolicyRun) -> Value:
    from semsched.metrics.goodput import tier_attainment

    return tier_attainment(run.requests).get("PREMIUM")


def _goodput(run: PolicyRun, setup: Setup, seed: int) -> Value:
    """Over the arrival span, the same for every contender (first arrival to last finish would be decided by the
    drain of the longest answer)."""
    from semsched.metrics.goodput import tier_weighted_goodput

    arrivals = [r.arrival_time_s for r in run.requests]
    span_s = max(arrivals) - min(arrivals)
    return tier_weighted_goodput(run.requests, span_s if span_s > 0 else None)


def _premium(run: PolicyRun, setup: Setup, seed: int) -> Value:
    return _premium_share(run)


BENCHMARKS: tuple[Benchmark, ...] = (
    Benchmark("spikes", "seed 000", "urgency-0 normalized latency (s/token)", False, (10, 4), _spikes_setup,
              _urgency0, "all levels (s/token)", _all_levels,
              about="Spikes of 1-100 requests (azure-conv lengths, outputs <= 500, urgency levels), the run's "
                    "size counted in spikes; the gap between spikes sets the load."),
    Benchmark("proserve", "seed 001", "TDG ratio", True, (500, 120), _proserve_setup, _tdg_ratio,
              "TTFT+TPOT attainment", _ttft_tpot,
              about="azure-conv on A100/Qwen1.5-7B, HIGH/LOW at random with TTFT/TPOT SLOs from the median prompt "
                    "(proserve's main setting)."),
    Benchmark("sagesched", "seed 002", "mean TTLT (s)", False, (300, 120), _sagesched_setup, _ttlt,
              "mean TTFT (s)", _ttft,
              about="Real AlpacaEval + Spec-Bench prompts and answer lengths, lengths predicted online "
                    "(semantic-knn, cold) for every contender; no value when a request is not served."),
    Benchmark("tiers", "seed 003", "PREMIUM attainment / idle ceiling", True, (600, 150), _tiers_setup,
              _premium_over_ceiling, "output tok/s", _throughput,
              about="The article's mix (PREMIUM 20, STANDARD 50, BACKGROUND 25 %) of azure-conv requests, the "
                    "tier table's SLOs; the ceiling is fcfs at 0.1x of capacity, per seed."),
    Benchmark("spec-poisson", "seed 004", "mean latency (s)", False, (150, 40), _spec_setup("poisson"),
              _mean_latency,
              about="Spec-Bench qa replayed with the 68M draft's logs, one request at a time (laps-sd's engine), "
                    "lengths predicted x U(0.8-1.2), Poisson arrivals."),
    Benchmark("spec-burst", "seed 004", "mean latency (s)", False, (150, 40), _spec_setup("burst"), _mean_latency,
              about="As spec-poisson, arrivals in bursts of 10."),
    Benchmark("long-context", "issue 31", "mean E2E of finished (s)", False, (300, 60), _long_context_setup,
              _mean_e2e, "not served", _not_served, seed_benchmark=False, takes_workload=True,
              about="Prompts up to 100k tokens (a synthetic Mooncake-format trace, or yours with --workload) on "
                    "one A100/Qwen1.5-4B with 131k tokens of KV."),
    Benchmark("production", "issue 31", "tier-weighted goodput (req/s)", True, (1000, 300), _production_setup,
              _goodput, "PREMIUM attainment", _premium, seed_benchmark=False, available=_production_missing,
              about="The production mix: Azure conversation arrivals, four tiers with SLOs, urgency on a share, "
                    "real prompts and answers with online prediction, half the engines speculating; capacity is "
                    "the knee where FCFS's median TTFT doubles (the overload method understates it here)."),
)


def trace_benchmark(spec: str, *, cluster: ClusterSpec | None = None, name: str = "your-workload",
                    num_requests: int = 300) -> Benchmark:
    """A benchmark of a workload spec of the user's (any format ``build_workload`` reads): mean E2E of the
    finished requests, the number not served beside it, windows of ``num_requests`` per seed."""
    engine = _stalls(cluster or ClusterSpec())

    def setup(seeds: Sequence[int], count: int, _: str | None) -> Setup:
        workloads = windows(spec, seeds, count)
        capacity = _first_seed_capacity(workloads, seeds, engine, spec)
        return Setup(tuple(seeds), _at_capacity(workloads, capacity), dict.fromkeys(seeds, engine), capacity,
                     config={"workload": spec, "num_requests": count,
                             "capacity_requests_per_s": capacity[seeds[0]]})

    return Benchmark(name, "yours", "mean E2E of finished (s)", False, (num_requests, num_requests), setup,
                     _mean_e2e, "not served", _not_served, seed_benchmark=False)


# ---- running a benchmark ---------------------------------------------------------------------------------------
@dataclass
class BenchmarkResult:
    """Every contender's outcomes on one benchmark: ``outcomes[label][load]`` one per seed; ``errors[label]``
    the message of a contender that raised on it (no outcomes)."""

    benchmark: Benchmark
    setup: Setup
    loads: tuple[float, ...]
    contenders: dict[str, str]
    outcomes: dict[str, dict[float, list[Outcome]]]
    errors: dict[str, str]

    def values(self, side: bool = False) -> dict[str, dict[float, list[Value]]]:
        """Headline (or side) values per contender, load and seed; a contender with an error has only None."""
        seeds = len(self.setup.seeds)
        return {label: {load: ([(o.side if side else o.headline) for o in self.outcomes[label][load]]
                               if label in self.outcomes else [None] * seeds) for load in self.loads}
                for label in self.contenders}

    def regret(self) -> dict[str, dict[float, Band]]:
        return regret_table(self.values(), higher_is_better=self.benchmark.higher_is_better)


def run_benchmark(ctx: ExperimentContext, benchmark: Benchmark, entries: Mapping[str, str],
                  loads: Sequence[float], seeds: Sequence[int], num_requests: int) -> BenchmarkResult:
    """Set ``benchmark`` up, probe every contender on a few requests, then run every (contender, load, seed) on
    the context's runner at once (in parallel with ``--workers``). A contender that raises is an error, not a
    missing row: found by the probe, or by the grid (which then runs again without it)."""
    setup = benchmark.setup(seeds, num_requests, ctx.workload if benchmark.takes_workload else None)
    profile = setup.clusters[seeds[0]].profile
    entries = {label: priced_with(spec, profile) for label, spec in entries.items()}
    errors = {label: error for label, spec in entries.items() if (error := _probe(setup, spec, max(loads)))}
    while True:
        running = {label: spec for label, spec in entries.items() if label not in errors}
        order = sorted(dict.fromkeys(running.values()), key=lambda s: not s.startswith(SLOW_POLICIES))
        points = [GridPoint(benchmark.name, setup.workload_at(seed, load), order, setup.clusters[seed],
                            {"load": load, "seed": seed}) for load in loads for seed in seeds]
        try:
            per_point = ctx.run_grid(points)
        except Exception as error:  # a contender raised in the grid: name it, and run the rest again
            label = _failed_contender(error, running)
            if label is None:
                raise
            errors[label] = _error_text(error)
            continue
        break
    outcomes: dict[str, dict[float, list[Outcome]]] = {label: {load: [] for load in loads} for label in running}
    runs = iter(per_point)
    for load in loads:
        for seed in seeds:
            per_policy = next(runs)
            for label, spec in running.items():
                outcomes[label][load].append(read_run(benchmark, per_policy[spec], setup, seed))
    return BenchmarkResult(benchmark, setup, tuple(loads), dict(entries), outcomes, errors)


def priced_with(spec: str, profile: str) -> str:
    """``spec`` pricing its work with the engine it runs on (``profile=``), for a policy that has that parameter,
    as a deployment configures it: a default names the package's default profile and a tuned spec its paper's,
    neither of which is the benchmark's (or the user's) engine."""
    name, params = parse_spec(spec)
    if not any(f.name == "profile" for f in dataclasses.fields(POLICIES.get(name).config_cls)):
        return spec
    if params.get("profile") == profile:
        return spec
    params["profile"] = profile
    return f"{name}:" + ";".join(f"{key}={value}" for key, value in params.items())


def _probe(setup: Setup, spec: str, load: float) -> str:
    """The error ``spec`` raises on the first requests of the benchmark at ``load`` ("" when it runs)."""
    seed = setup.seeds[0]
    try:
        run_policy(setup.workload_at(seed, load).head(PROBE_REQUESTS), spec, setup.clusters[seed])
    except Exception as error:  # noqa: BLE001 (any failure is the contender's result on this benchmark)
        return _error_text(error)
    return ""


def _error_text(error: BaseException) -> str:
    cause = error.__cause__ if error.__cause__ is not None else error
    return f"{type(cause).__name__}: {cause}"


def _failed_contender(error: BaseException, running: Mapping[str, str]) -> str | None:
    """The contender a failed grid names (its point's label holds ``(SPEC on ``), or None."""
    text = " ".join([str(error), *getattr(error, "__notes__", [])])
    for label, spec in running.items():
        if f"({spec} on " in text:
            return label
    return None


# ---- regret ----------------------------------------------------------------------------------------------------
def regret_table(values: Mapping[str, Mapping[float, Sequence[Value]]], *, higher_is_better: bool
                 ) -> dict[str, dict[float, Band]]:
    """Each contender's regret per load: per seed, the best contender's value on that seed over its own (a
    higher-is-better metric) or its own over the best's, so 1.00 is the best and bigger is worse; the Band is the
    median and min-max over seeds (a seed without a value is missing; a zero against a positive best is inf)."""
    loads = {load for per_load in values.values() for load in per_load}
    out: dict[str, dict[float, Band]] = {label: {} for label in values}
    for load in sorted(loads):
        columns = [values[label].get(load, ()) for label in values]
        seeds = max((len(c) for c in columns), default=0)
        best = [_best([c[k] for c in columns if k < len(c)], higher_is_better) for k in range(seeds)]
        for label in values:
            own = values[label].get(load, ())
            out[label][load] = Band.of([_regret(v, b, higher_is_better) for v, b in zip(own, best, strict=False)])
    return out


def _best(values: Sequence[Value], higher_is_better: bool) -> Value:
    present = [v for v in values if v is not None and math.isfinite(v)]
    if not present:
        return None
    return max(present) if higher_is_better else min(present)


def _regret(value: Value, best: Value, higher_is_better: bool) -> Value:
    if value is None or best is None:
        return None
    numerator, denominator = (best, value) if higher_is_better else (value, best)
    if denominator == 0:
        return 1.0 if numerator == 0 else REGRET_CAP
    return min(numerator / denominator, REGRET_CAP)


# ---- the experiment --------------------------------------------------------------------------------------------
@register_experiment
class Scoreboard(Experiment):
    name = "scoreboard"
    summary = ("every policy (defaults and each seed's tuned spec) on each seed's benchmark, long-context and "
               "production traffic over load: regret table and heatmap, utility's targets")
    workload_help = ("long-context: your Mooncake-format .jsonl (or any workload spec) in place of the synthetic "
                     "long-context trace")

    def run(self, ctx: ExperimentContext) -> None:
        entries = grid_contenders(ctx.quick)
        loads = QUICK_LOADS if ctx.quick else LOADS
        seeds = (ctx.seed,) if ctx.quick else tuple(ctx.seed + k for k in range(NUM_SEEDS))
        ctx.grid_note = "requests a run: " + ", ".join(
            f"{b.name} {b.num_requests(ctx.quick)}{' spikes' if b.name == 'spikes' else ''}" for b in BENCHMARKS)
        results: dict[str, BenchmarkResult] = {}
        skipped: dict[str, str] = {}
        for benchmark in BENCHMARKS:
            reason = benchmark.available()
            if reason is None:
                try:
                    results[benchmark.name] = run_benchmark(ctx, benchmark, entries, loads, seeds,
                                                            benchmark.num_requests(ctx.quick))
                except DataNotFoundError as error:
                    reason = str(error)
            if reason is not None:
                skipped[benchmark.name] = reason
        for claim in utility_claims(results, skipped, entries):
            ctx.add_claim(claim)
        ctx.add_figure(_regret_figure(ctx, results, skipped, entries, loads))
        for benchmark in BENCHMARKS:
            if benchmark.name in results:
                ctx.add_figure(_benchmark_figure(ctx, results[benchmark.name]))
            else:
                ctx.add_figure(_skipped_figure(ctx, benchmark, skipped[benchmark.name]))


def grid_contenders(quick: bool) -> dict[str, str]:
    """The contenders of a run: all of :func:`contenders`, or those of :data:`QUICK_CONTENDERS` registered."""
    every = contenders()
    if not quick:
        return every
    return {label: every[label] for label in QUICK_CONTENDERS if label in every}


def _command(ctx: ExperimentContext, benchmark: str) -> str:
    quick = " --quick" if ctx.quick else ""
    return f"semsched reproduce scoreboard{quick} --seed {ctx.seed}   # {benchmark}"


# ---- claims: utility's targets (issue 31, point 3) -------------------------------------------------------------
def utility_claims(results: Mapping[str, BenchmarkResult], skipped: Mapping[str, str],
                   entries: Mapping[str, str]) -> list[Claim]:
    """One row per target: regret on each seed's benchmark, production goodput and PREMIUM attainment, long
    context served. ``ours`` reads "not run" where utility or the benchmark is missing."""
    claims = []
    for benchmark in BENCHMARKS:
        if benchmark.seed_benchmark:
            text = (f"utility within {REGRET_TARGET - 1:.0%} of the best on {benchmark.name} "
                    f"({benchmark.seed_doc}) at every load")
            claims.append(_guarded(text, f"regret <= {REGRET_TARGET:g}", benchmark, results, skipped, entries,
                                   _regret_claim))
    production = next(b for b in BENCHMARKS if b.name == "production")
    claims.append(_guarded(f"utility's tier-weighted goodput >= {GOODPUT_TARGET:g}x the best other's, every load",
                           f">= {GOODPUT_TARGET:g}x", production, results, skipped, entries, _goodput_claim))
    claims.append(_guarded(f"utility's PREMIUM attainment >= {CEILING_TARGET:g}x its idle ceiling at "
                           f"{CEILING_CHECK_LOAD:g}x", f">= {CEILING_TARGET:g}x", production, results, skipped,
                           entries, _ceiling_claim))
    long_context = next(b for b in BENCHMARKS if b.name == "long-context")
    claims.append(_guarded("utility serves every long-context request a baseline serves", "none missed",
                           long_context, results, skipped, entries, _served_claim))
    return claims


ClaimRule = Callable[[str, str, BenchmarkResult], Claim]


def _guarded(text: str, target: str, benchmark: Benchmark, results: Mapping[str, BenchmarkResult],
             skipped: Mapping[str, str], entries: Mapping[str, str], rule: ClaimRule) -> Claim:
    if UTILITY not in entries:
        return Claim(text, target, "not run", "not", "utility not registered", benchmark.name)
    if benchmark.name in skipped:
        return Claim(text, target, "not run", "not", "benchmark not run (its figure says why)", benchmark.name)
    result = results[benchmark.name]
    if UTILITY in result.errors:
        return Claim(text, target, "error", "not", f"utility raised: {_short(result.errors[UTILITY])}",
                     benchmark.name)
    return rule(text, target, result)


def _per_load_verdict(held: Sequence[bool], what: str) -> tuple[str, str]:
    met = sum(held)
    if met == len(held):
        return "reproduced", f"met at every load ({what})"
    return ("partly" if met else "not"), f"met at {met} of {len(held)} loads ({what})"


def _regret_claim(text: str, target: str, result: BenchmarkResult) -> Claim:
    bands = result.regret()[UTILITY]
    medians = [bands[load].median for load in result.loads]
    held = [m is not None and m <= REGRET_TARGET for m in medians]
    worst = max(result.loads, key=lambda load: _rank(bands[load]))
    verdict, why = _per_load_verdict(held, "seeds' median")
    return Claim(text, target, _cell(Band.of(medians)), verdict, why, result.benchmark.name,
                 f"worst at {worst:g}x")


def _goodput_claim(text: str, target: str, result: BenchmarkResult) -> Claim:
    values = result.values()
    medians = []
    for load in result.loads:
        ours = values[UTILITY][load]
        others = [values[label][load] for label in values if label != UTILITY]
        ratios = [None if v is None or (b := _best([o[k] for o in others], True)) is None or b == 0 else v / b
                  for k, v in enumerate(ours)]
        medians.append(Band.of(ratios).median)
    held = [m is not None and m >= GOODPUT_TARGET for m in medians]
    verdict, why = _per_load_verdict(held, "utility / best other, seeds' median")
    return Claim(text, target, _cell(Band.of(medians)), verdict, why, result.benchmark.name, "loads' medians")


def _ceiling_claim(text: str, target: str, result: BenchmarkResult) -> Claim:
    load = min(result.loads, key=lambda x: abs(x - CEILING_CHECK_LOAD))
    ceilings = result.setup.reference
    ratios = [None if o.side is None or not ceilings.get(seed) else o.side / ceilings[seed]  # type: ignore[operator]
              for seed, o in zip(result.setup.seeds, result.outcomes[UTILITY][load], strict=True)]
    band = Band.of(ratios)
    met = band.median is not None and band.median >= CEILING_TARGET
    why = "median over seeds " + ("meets" if met else "misses") + " the target"
    return Claim(text, target, _cell(band), "reproduced" if met else "not", why, result.benchmark.name,
                 f"at {load:g}x; seeds' min-max")


def _served_claim(text: str, target: str, result: BenchmarkResult) -> Claim:
    missed = total = 0
    for load in result.loads:
        for k in range(len(result.setup.seeds)):
            others = [result.outcomes[label][load][k].served for label in result.outcomes if label != UTILITY]
            theirs = frozenset().union(*others)
            missed += len(theirs - result.outcomes[UTILITY][load][k].served)
            total += len(theirs)
    verdict = "reproduced" if missed == 0 else "not"
    why = "served every request a baseline served" if missed == 0 else "some requests a baseline served were not"
    return Claim(text, target, f"{missed} missed of {total}", verdict, why, result.benchmark.name,
                 "every load and seed")


# ---- the regret figure -----------------------------------------------------------------------------------------
def _regret_figure(ctx: ExperimentContext, results: Mapping[str, BenchmarkResult], skipped: Mapping[str, str],
                   entries: Mapping[str, str], loads: Sequence[float]) -> Figure:
    regrets = {name: result.regret() for name, result in results.items()}
    order = sorted(entries, key=lambda label: (*_overall(label, results, regrets), label))
    names = [b.name for b in BENCHMARKS]
    rows = []
    for label in order:
        cells = [_regret_cell(results[name], regrets[name], label) if name in results else "not run"
                 for name in names]
        mean, worst = _overall(label, results, regrets)
        rows.append((label, *cells, "—" if not math.isfinite(worst) else f"{num(mean)}, {num(worst)}"))
    loads_text = ", ".join(f"{x:g}" for x in loads)
    table = Table((f"contender (cells: regret at {loads_text}x)", *names, "seeds' benchmarks: geomean, worst"),
                  tuple(rows))
    tuned = {label: spec for label, spec in entries.items() if label != spec}
    duplicates = {label: spec for label, spec in tuned_specs().items() if label not in entries and
                  spec in entries.values()}
    errors = [f"{label} on {name}: {_short(message)}" for name, result in results.items()
              for label, message in result.errors.items()]
    notes = [
        "Regret: per seed, the contender's headline over the best contender's on that seed (the best's over its "
        "own for a higher-is-better headline), median over seeds; 1.00 is the best, 99 the cap (a zero against a "
        "positive best). `*`: a seed without a value left out; `S`: every seed stranded requests; `—`: no value; "
        "`error`: the contender raised (results.json has the message). Rows by the geometric mean over the seeds' "
        "benchmarks. Every contender of a point runs on the same requests; per-seed values, side values, requests "
        "not served and stranded per run are in results.json, figure by figure.",
        "Tuned specs: " + ("; ".join(f"{label} = `{spec}`" for label, spec in tuned.items()) or "none in this run")
        + ". A seed's tuned spec equal to a default is that default's row: "
        + ", ".join(f"{label} (`{spec}`)" for label, spec in duplicates.items()) + ".",
    ]
    if errors:
        notes.append(f"{len(errors)} error cells: " + "; ".join(errors[:6]) + ("; ..." if len(errors) > 6 else ""))
    if UTILITY not in entries:
        notes.append("utility is not registered: its row and the claims on it are missing.")
    ours = {
        "loads": list(loads),
        "seeds": list(next(iter(results.values())).setup.seeds) if results else [],
        "contenders": dict(entries),
        "regret": {name: {label: {f"{load:g}": dataclasses.asdict(band) for load, band in per_load.items()}
                          for label, per_load in per_label.items()} for name, per_label in regrets.items()},
        "best": {name: {f"{load:g}": _best_label(per_label, load) for load in loads}
                 for name, per_label in regrets.items()},
        "errors": {name: dict(result.errors) for name, result in results.items()},
        "skipped": dict(skipped),
    }
    return Figure(
        id="regret", title="Regret of every contender on every benchmark and load",
        paper_says="Issue 31: each policy's headline over the best policy's, per benchmark and load; utility "
                   f"within {REGRET_TARGET - 1:.0%} of the best on each seed's benchmark.",
        paper={"regret_target": REGRET_TARGET}, ours=ours,
        config={"loads_of_capacity": list(loads), "contenders": dict(entries),
                "benchmarks": {b.name: {"headline": b.headline, "higher_is_better": b.higher_is_better,
                                        "requests": b.num_requests(ctx.quick)} for b in BENCHMARKS}},
        command=_command(ctx, "regret table and heatmap"), table=table,
        plot=lambda path: _heatmap(path, order, results, regrets, loads),
        notes=notes, headline=_regret_headline(order, results, regrets),
    )


def _overall(label: str, results: Mapping[str, BenchmarkResult], regrets: Mapping[str, Mapping[str, Any]]
             ) -> tuple[float, float]:
    """The contender's geometric mean and largest median regret over the seeds' benchmarks and loads (inf for
    both when it has an error or a missing value there)."""
    medians = []
    for name, result in results.items():
        if not result.benchmark.seed_benchmark:
            continue
        if label in result.errors:
            return math.inf, math.inf
        medians += [band.median for band in regrets[name][label].values()]
    present = [m for m in medians if m is not None]
    if not present or len(present) < len(medians):
        return math.inf, math.inf
    return float(np.exp(np.mean(np.log(present)))), max(present)


def _regret_cell(result: BenchmarkResult, regret: Mapping[str, Mapping[float, Band]], label: str) -> str:
    if label in result.errors:
        return f"error: {_short(result.errors[label])}"
    parts = []
    for load in result.loads:
        band, outcomes = regret[label][load], result.outcomes[label][load]
        if band.median is None:
            parts.append("S" if any(o.stranded for o in outcomes) else "—")
        else:
            parts.append((f"{band.median:.2f}" if band.median < 10 else f"{band.median:.0f}")
                         + ("*" if band.missing else ""))
    return " ".join(parts)


def _short(message: str, limit: int = 48) -> str:
    """An error message cut to ``limit`` characters and at most two numbers (a table cell holds three)."""
    text = message.replace("|", "/").replace("\n", " ")[:limit]
    while numbers_in(text) > 2 and " " in text:
        text = text.rsplit(" ", 1)[0]
    return text if numbers_in(text) <= 2 else message.split(":", 1)[0]


def _best_label(per_label: Mapping[str, Mapping[float, Band]], load: float) -> str | None:
    scored = [(band.median, label) for label, per_load in per_label.items()
              if (band := per_load[load]).median is not None]
    return min(scored)[1] if scored else None


def _regret_headline(order: Sequence[str], results: Mapping[str, BenchmarkResult],
                     regrets: Mapping[str, Mapping[str, Any]]) -> str:
    best = order[0] if order else "—"
    mean, worst = _overall(best, results, regrets)
    text = f"smallest regret on the seeds' benchmarks (geometric mean, worst): {best} ({num(mean)}, {num(worst)})"
    if UTILITY in order and best != UTILITY:
        mean, worst = _overall(UTILITY, results, regrets)
        text += f"; utility ({num(mean)}, {num(worst)})"
    return text


def _heatmap(path: Path, order: Sequence[str], results: Mapping[str, BenchmarkResult],
             regrets: Mapping[str, Mapping[str, Mapping[float, Band]]], loads: Sequence[float]) -> None:
    """Contenders (rows) by benchmark and load (columns), coloured by median regret on a log scale from 1 to 3
    (darker past it); stranded, missing and error cells grey with a letter."""
    columns = [(name, load) for name in results for load in loads]
    grid = np.full((len(order), len(columns)), np.nan)
    marks: dict[tuple[int, int], str] = {}
    for i, label in enumerate(order):
        for j, (name, load) in enumerate(columns):
            result = results[name]
            if label in result.errors:
                marks[(i, j)] = "E"
                continue
            band = regrets[name][label][load]
            if band.median is None:
                marks[(i, j)] = "S" if any(o.stranded for o in result.outcomes[label][load]) else "—"
            else:
                grid[i, j] = band.median
    figure = PlotFigure(figsize=(max(6.0, 0.45 * len(columns) + 3.5), max(3.0, 0.3 * len(order) + 1.8)),
                        layout="constrained")
    FigureCanvasAgg(figure)
    ax = figure.subplots()
    cmap = LinearSegmentedColormap.from_list("regret", ["#2ca02c", "#ffdd57", "#d62728"]).with_extremes(
        over="#67000d", bad="#d9d9d9")
    image = ax.imshow(np.clip(grid, 1.0, None), cmap=cmap, norm=LogNorm(vmin=1.0, vmax=3.0), aspect="auto")
    for i in range(len(order)):
        for j in range(len(columns)):
            text = marks.get((i, j)) or (f"{grid[i, j]:.2f}" if grid[i, j] < 10 else f"{grid[i, j]:.0f}")
            dark = (i, j) not in marks and grid[i, j] > 2.0
            ax.text(j, i, text, ha="center", va="center", fontsize=5.5, color="white" if dark else "black")
    ax.set_yticks(range(len(order)), list(order), fontsize="small")
    ax.set_xticks(range(len(columns)), [f"{name} {load:g}x" for name, load in columns], rotation=60, ha="right",
                  fontsize="small")
    ax.set_title("Regret (median over seeds; 1.00 = best; E error, S stranded)", fontsize="medium")
    bar = figure.colorbar(image, ax=ax, label="regret (log scale)", extend="max")
    bar.set_ticks([1.0, 1.05, 1.25, 1.5, 2.0, 3.0], labels=["1", "1.05", "1.25", "1.5", "2", "3"])
    bar.minorticks_off()
    figure.savefig(path, format="png", dpi=110)
    figure.clear()


# ---- one benchmark's figure ------------------------------------------------------------------------------------
#: the contenders a benchmark's PNG draws: the best few at the middle load, and these when present
SHOWN = 5
ALWAYS_SHOWN = ("vllm-fcfs", UTILITY)


def _benchmark_figure(ctx: ExperimentContext, result: BenchmarkResult) -> Figure:
    benchmark, loads = result.benchmark, result.loads
    regret = result.regret()
    values, sides = result.values(), result.values(side=True)
    bands = {label: {load: Band.of(values[label][load]) for load in loads} for label in values}
    rows = []
    for load in loads:
        ranked = sorted((r.median, label) for label in regret if (r := regret[label][load]).median is not None)
        best = ranked[0][1] if ranked else None
        second = ranked[1][1] if len(ranked) > 1 else None
        rows.append((
            f"{load:g}",
            _named(best, bands, load), _named(second, bands, load, band=False),
            _value_cell(result, "vllm-fcfs", bands, load),
            _value_cell(result, UTILITY, bands, load),
            _regret_only(result, regret, UTILITY, load),
            *((_side_cell(result, sides, best, UTILITY, load),) if benchmark.side else ()),
        ))
    columns = ("load", "best [seeds' min-max]", "runner-up", "vllm-fcfs", "utility", "utility's regret",
               *((f"{benchmark.side}: best, utility",) if benchmark.side else ()))
    middle = loads[len(loads) // 2]
    shown = sorted(regret, key=lambda label: _rank(regret[label][middle]))[:SHOWN]
    shown += [label for label in ALWAYS_SHOWN if label in values and label not in shown]
    ours = {
        "metric": benchmark.headline, "higher_is_better": benchmark.higher_is_better, "loads": list(loads),
        "seeds": list(result.setup.seeds),
        "per_seed": {label: {f"{x:g}": per_load[x] for x in loads} for label, per_load in values.items()},
        "side": benchmark.side,
        "side_per_seed": {label: {f"{x:g}": per_load[x] for x in loads} for label, per_load in sides.items()},
        "median": {label: {f"{x:g}": bands[label][x].median for x in loads} for label in bands},
        "regret": {label: {f"{x:g}": dataclasses.asdict(regret[label][x]) for x in loads} for label in regret},
        "not_served_per_seed": _fates(result, "not_served"),
        "stranded_per_seed": _fates(result, "stranded"),
        "refused_per_seed": _fates(result, "refused"),
        "errors": dict(result.errors),
        "capacity_requests_per_s": {str(k): v for k, v in result.setup.capacity_per_s.items()},
    }
    title = f"{benchmark.name} ({benchmark.seed_doc}): {benchmark.headline} over load"
    return Figure(
        id=benchmark.name, title=title,
        paper_says=benchmark.about, paper={}, ours=ours,
        config={**result.setup.config, "loads_of_capacity": list(loads), "seeds": list(result.setup.seeds),
                "contenders": dict(result.contenders)},
        command=_command(ctx, benchmark.name), table=Table(columns, tuple(rows)),
        plot=lambda path: band_chart(path, list(loads),
                                     {label: [bands[label][x] for x in loads] for label in shown},
                                     xlabel="load (fraction of measured capacity)", ylabel=benchmark.headline,
                                     title=f"{title} (best {SHOWN} at {middle:g}x, vllm-fcfs, utility)"),
        notes=_benchmark_notes(result),
        headline=_benchmark_headline(result, regret),
    )


def _cell(band: Band) -> str:
    """``median [min-max]`` (``Band.cell``), the range left out where it prints as one number."""
    if band.median is None or num(band.low) != num(band.high):
        return band.cell()
    return num(band.median) + (f" ({band.missing} n/a)" if band.missing else "")


def _rank(band: Band) -> float:
    return math.inf if band.median is None else band.median


def _named(label: str | None, bands: Mapping[str, Mapping[float, Band]], load: float, *, band: bool = True) -> str:
    if label is None:
        return "—"
    return f"{label} {_cell(bands[label][load]) if band else num(bands[label][load].median)}"


def _value_cell(result: BenchmarkResult, label: str, bands: Mapping[str, Mapping[float, Band]],
                load: float) -> str:
    if label not in result.contenders:
        return "not registered" if label == UTILITY else "not run"
    if label in result.errors:
        return "error"
    band = bands[label][load]
    if band.median is None and any(o.stranded for o in result.outcomes[label][load]):
        return "stranded"
    return num(band.median) + (f" ({band.missing} n/a)" if band.missing else "")


def _regret_only(result: BenchmarkResult, regret: Mapping[str, Mapping[float, Band]], label: str,
                 load: float) -> str:
    if label not in result.contenders or label in result.errors:
        return "—"
    return _cell(regret[label][load])


def _side_cell(result: BenchmarkResult, sides: Mapping[str, Mapping[float, Sequence[Value]]], best: str | None,
               other: str, load: float) -> str:
    def median(label: str | None) -> str:
        if label is None or label not in sides or label in result.errors:
            return "—"
        return num(Band.of(sides[label][load]).median)

    return f"{median(best)}, {median(other)}"


def _fates(result: BenchmarkResult, attribute: str) -> dict[str, dict[str, list[int]]]:
    return {label: {f"{x:g}": [getattr(o, attribute) for o in per_load[x]] for x in result.loads}
            for label, per_load in result.outcomes.items()}


def _benchmark_notes(result: BenchmarkResult) -> list[str]:
    capacity = sorted(set(result.setup.capacity_per_s.values()))
    notes = [f"Capacity {', '.join(num(c) for c in capacity[:3])} req/s (fcfs at overload)."]
    fates = (("Stranded requests (no value)", "stranded"), ("Rejected or dropped requests", "refused"))
    for what, attribute in fates:
        labels = sorted({label for label, per_load in result.outcomes.items()
                         for outcomes in per_load.values() if any(getattr(o, attribute) for o in outcomes)})
        if labels:
            notes.append(f"{what} in runs of {_listed(labels)}.")
    if result.errors:
        notes.append(f"Raised (error): {_listed(sorted(result.errors))}.")
    return notes


def _listed(labels: Sequence[str], limit: int = 4) -> str:
    """``a, b, c`` (and how many more past ``limit``: every one is in results.json)."""
    more = len(labels) - limit
    return ", ".join(labels[:limit]) + (f" and {more} more" if more > 0 else "")


def _benchmark_headline(result: BenchmarkResult, regret: Mapping[str, Mapping[float, Band]]) -> str:
    best: dict[str, list[float]] = {}
    for load in result.loads:
        best.setdefault(_best_label(regret, load) or "—", []).append(load)
    text = "best: " + ", ".join(f"{label} at {'/'.join(f'{x:g}' for x in at)}x" for label, at in best.items())
    if UTILITY in regret and UTILITY not in result.errors:
        text += "; utility's regret " + " / ".join(num(regret[UTILITY][x].median) for x in result.loads)
    return text


def _skipped_figure(ctx: ExperimentContext, benchmark: Benchmark, reason: str) -> Figure:
    def draw(path: Path) -> None:
        band_chart(path, [], {}, xlabel="load (fraction of measured capacity)", ylabel=benchmark.headline,
                   title=f"{benchmark.name}: not run")

    return Figure(
        id=benchmark.name, title=f"{benchmark.name} ({benchmark.seed_doc}): not run", paper_says=benchmark.about,
        paper={}, ours={"skipped": reason}, config={}, command=_command(ctx, benchmark.name),
        table=Table(("reason",), ((_short(reason, 120),),)), plot=draw, notes=[f"Not run: {reason}"],
        headline=f"not run: {_short(reason, 120)}",
    )
