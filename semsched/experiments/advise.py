"""``semsched advise``: which policy to run on a user's own traffic, the scoreboard's contenders replayed on it.

The user's workload (a trace in any supported format, or a named workload) is cut into one window of
``requests`` requests per seed (disjoint windows of a long trace; a synthetic workload is drawn afresh per seed),
its capacity measured on the user's cluster the way the reproductions measure it
(:func:`semsched.experiments.tiers.measure_capacity`: FCFS at overload), and every contender replayed on every
window at each load (a fraction of that capacity). Each run is scored by the scoreboard's production headline:
**tier-weighted goodput** (:func:`semsched.metrics.goodput.tier_weighted_goodput`: requests per second that meet
every SLO they have, weighted by tier, over the window's arrival span) and per-tier SLO attainment.

The advice is the contender whose worst regret over the loads is smallest: at each load its median goodput over the
seeds against the best eligible contender's, the worst of those ratios (ties: the larger mean goodput). A
contender is not eligible when a run ended with a request stranded (a scheduler defect, counted, never hidden), or
when it would have seen the true output lengths (an oracle, which no deployment has): a ``length=oracle`` spec, or
one that orders by predicted lengths on a cluster without a length predictor (the CLI puts ``input-length`` in
front by default, which reads prompt lengths only). Both are shown in the table with the reason.

The gain per tier is against ``vllm-fcfs`` (vLLM's own FCFS scheduler), as the ratio of SLO attainment, the median
and range over every (load, seed) run. The settings printed (``SEMSCHED_POLICY``, the gateway's ``routing``,
``classifier`` and ``tier_table``) are those the runs used.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from statistics import median
from typing import Any

import numpy as np

from semsched.core.errors import SemschedError
from semsched.core.request import Request, RequestState
from semsched.core.tiers import DEFAULT_TIERS, TierSpec
from semsched.experiments.scoreboard import priced_with, window
from semsched.experiments.tiers import at_rate, measure_capacity
from semsched.metrics.goodput import TIER_WEIGHTS, tier_attainment, tier_weighted_goodput
from semsched.policies import POLICIES
from semsched.sim.parallel import InProcess, PointProgress, PointRunner, SimPoint
from semsched.sim.prediction import spec_reads_text
from semsched.sim.runner import ClusterSpec, PolicyRun
from semsched.workloads import Workload, WorkloadError, build_workload

BASELINE = "vllm-fcfs"
"""What the gain is measured against: vLLM's own FCFS scheduler."""
DEFAULT_LOADS = (0.6, 0.9, 1.2)
"""Fractions of the measured capacity (the scoreboard's)."""
DEFAULT_SEEDS = 3
DEFAULT_REQUESTS = 1500
"""Requests per run: a window of a longer trace (each seed its own window)."""
MIN_REQUESTS = 50
"""Fewer requests than this cannot show a difference between policies (a run is mostly ramp-up and drain)."""
MAX_TOTAL_REQUESTS = 1_000_000
"""The largest trace read (the workload builder's own limit is lower by default)."""


Band3 = tuple[float, float, float]
"""median, min, max"""


class AdviseError(SemschedError):
    """A workload or setting ``advise`` cannot use; the message names it and the limit."""


@dataclass(frozen=True)
class AdviseSettings:
    """What to advise on: the workload spec (or trace path), its tier table, the cluster, loads, seeds, window."""

    workload: str
    cluster: ClusterSpec
    tiers: Sequence[TierSpec] = DEFAULT_TIERS
    tier_table_path: str | None = None
    loads: Sequence[float] = DEFAULT_LOADS
    seeds: int = DEFAULT_SEEDS
    requests: int = DEFAULT_REQUESTS
    contenders: dict[str, str] | None = None

    def __post_init__(self) -> None:
        if not self.loads or any(not (math.isfinite(x) and x > 0) for x in self.loads):
            raise AdviseError(f"loads: give fractions of capacity > 0 (got {list(self.loads)})")
        if self.seeds < 1:
            raise AdviseError(f"seeds: must be >= 1 (got {self.seeds})")
        if self.requests < MIN_REQUESTS:
            raise AdviseError(f"requests: must be >= {MIN_REQUESTS} per run (got {self.requests})")


@dataclass(frozen=True)
class Outcome:
    """One contender's run at one (load, seed)."""

    goodput: float
    attainment: dict[str, float | None]
    stranded: int
    rejected: int


@dataclass
class ContenderResult:
    label: str
    spec: str
    outcomes: dict[tuple[float, int], Outcome] = field(default_factory=dict)
    #: why it may not be recommended ("" when it may)
    ineligible: str = ""

    def median_goodput(self, load: float) -> float:
        return median(o.goodput for (x, _), o in self.outcomes.items() if x == load)

    @property
    def stranded(self) -> int:
        return sum(o.stranded for o in self.outcomes.values())


@dataclass(frozen=True)
class TierGain:
    """SLO attainment of the advised policy over the baseline's in one tier: median and range over the runs."""

    tier: str
    median: float | None
    low: float | None
    high: float | None
    ours: float | None
    baseline: float | None


@dataclass
class Advice:
    settings: AdviseSettings
    workload_name: str
    window_requests: int
    capacity_per_s: float
    results: list[ContenderResult]
    worst_regret: dict[str, float | None]
    best_label: str
    gains: list[TierGain]
    #: per load, the advised policy's goodput over the baseline's: median, min, max over the seeds
    goodput_gain: dict[float, Band3 | None]
    notes: list[str]

    @property
    def best(self) -> ContenderResult:
        return next(r for r in self.results if r.label == self.best_label)

    def to_dict(self) -> dict[str, Any]:
        return {
            "workload": self.settings.workload,
            "window_requests": self.window_requests,
            "capacity_requests_per_s": self.capacity_per_s,
            "loads": list(self.settings.loads),
            "seeds": self.settings.seeds,
            "profile": self.settings.cluster.profile,
            "instances": self.settings.cluster.num_instances,
            "router": self.settings.cluster.router,
            "advice": {"label": self.best_label, "spec": self.best.spec,
                       "environment": semsched_policy_line(self.best.spec)},
            "gain_vs_vllm_fcfs": {
                "goodput": {f"{x:g}": None if g is None else list(g) for x, g in self.goodput_gain.items()},
                "tiers": [vars(g) for g in self.gains],
            },
            "contenders": [
                {"label": r.label, "spec": r.spec, "ineligible": r.ineligible,
                 "worst_regret": self.worst_regret.get(r.label),
                 "runs": [{"load": x, "seed": s, "goodput": o.goodput, "attainment": o.attainment,
                           "stranded": o.stranded, "rejected": o.rejected}
                          for (x, s), o in sorted(r.outcomes.items())]}
                for r in self.results
            ],
            "notes": self.notes,
        }


def semsched_policy_line(spec: str) -> str:
    """The environment line that makes vLLM schedule with ``spec`` (docs/vllm.md)."""
    return f"SEMSCHED_POLICY='{spec}'"


def gateway_settings(advice: Advice) -> str:
    """The gateway YAML fragment matching the simulated cluster (docs/gateway.md's configuration reference)."""
    cluster = advice.settings.cluster
    lines = ["routing:", f"  router: {cluster.router}", f"  profile: {cluster.profile}"]
    policy = POLICIES.create(advice.best.spec)
    if policy.uses_predicted_lengths:
        name = "histogram" if cluster.length_predictor is None else cluster.length_predictor.spec
        lines += ["classifier:", f"  length: {_gateway_length(name)}"]
    if advice.settings.tier_table_path is not None:
        lines.append(f"tier_table: {advice.settings.tier_table_path}")
    return "\n".join(lines)


def _gateway_length(spec: str) -> str:
    """``length=semantic-knn;warmup=P`` (a simulator ``--predictor`` spec) as the gateway names it."""
    body = spec.removeprefix("length=")
    name, _, rest = body.partition(";")
    params = [p for p in rest.split(";") if p and not p.startswith(("latency_s=", "uniform_mix="))]
    return name if not params else f"{name}:{';'.join(params)}"


# ---- the windows ---------------------------------------------------------------------------------------------
def windows(settings: AdviseSettings) -> list[Workload]:
    """One workload of ``settings.requests`` requests per seed: disjoint windows of a trace longer than that
    (spread over it), the whole trace for every seed when it is shorter, a fresh draw per seed for a synthetic
    workload. Refuses a workload it cannot use, naming why."""
    out = []
    for seed in range(settings.seeds):
        try:
            try:  # a trace: the whole of it, cut into windows below
                whole = build_workload(settings.workload, rate_per_s=1.0, seed=seed, tiers=settings.tiers,
                                       max_requests=MAX_TOTAL_REQUESTS)
            except WorkloadError:  # a synthetic workload (it needs a count), or a bad spec: said again here
                whole = build_workload(settings.workload, rate_per_s=1.0, seed=seed, tiers=settings.tiers,
                                       num_requests=settings.requests, max_requests=MAX_TOTAL_REQUESTS)
        except WorkloadError as error:
            raise AdviseError(f"--workload: {error}") from None
        out.append(_window(whole, seed, settings))
    return out


def _window(whole: Workload, seed: int, settings: AdviseSettings) -> Workload:
    """Seed ``seed``'s window: the scoreboard's (:func:`semsched.experiments.scoreboard.window`)."""
    if len(whole) < MIN_REQUESTS:
        raise AdviseError(f"--workload: {whole.name!r} has {len(whole)} requests; advise needs at least "
                          f"{MIN_REQUESTS} to tell policies apart")
    return window(whole, seed, settings.requests, settings.seeds)


def _check_servable(workload: Workload, cluster: ClusterSpec) -> None:
    """Refuse a workload whose every request is larger than one engine's KV cache (nothing could run)."""
    blocks = cluster.scheduler.num_gpu_blocks * cluster.scheduler.block_size
    fits = (workload.prompt_tokens + workload.output_tokens) <= blocks
    if not np.any(fits):
        raise AdviseError(
            f"--workload: no request of {workload.name!r} fits one engine's KV cache ({blocks:,} tokens: "
            "--gpu-blocks x --block-size); give the engine more blocks")


# ---- scoring -------------------------------------------------------------------------------------------------
def tier_weights(tiers: Sequence[TierSpec]) -> dict[int, float]:
    """Goodput weight per priority: the goodput metric's own table for the built-in tiers (8/4/2/1), and for a
    table of the user's the same halving from the most important tier down (``2^(n-1-rank)``)."""
    priorities = sorted({t.priority for t in tiers})
    if set(priorities) <= set(TIER_WEIGHTS):
        return dict(TIER_WEIGHTS)
    return {p: float(2 ** (len(priorities) - 1 - rank)) for rank, p in enumerate(priorities)}


def outcome(run: PolicyRun, weights: dict[int, float] = TIER_WEIGHTS) -> Outcome:
    """One run scored. Goodput is over the arrival span, the same for every contender on a window (over first
    arrival to last finish, a long answer's drain would decide it)."""
    requests: Sequence[Request] = run.requests
    stranded = sum(1 for r in requests if r.state is RequestState.STALLED or not r.state.is_terminal)
    rejected = sum(1 for r in requests if r.state in (RequestState.REJECTED, RequestState.DROPPED))
    arrivals = [r.arrival_time_s for r in requests]
    span_s = max(arrivals) - min(arrivals)
    goodput = tier_weighted_goodput(requests, span_s if span_s > 0 else None, weights=weights)
    return Outcome(goodput, dict(tier_attainment(requests)), stranded, rejected)


def _oracle_reason(spec: str, workload: Workload, cluster: ClusterSpec) -> str:
    """Why ``spec`` would see what no deployment sees (the true output lengths), or "" when it would not."""
    policy = POLICIES.create(spec)
    oracle = [f.name for f in dataclasses.fields(policy.config) if getattr(policy.config, f.name) == "oracle"]
    if oracle:
        return f"{oracle[0]}=oracle: orders by the true output lengths (oracle)"
    if cluster.length_predictor is not None or workload.predicted_length is not None:
        return ""
    if policy.uses_predicted_lengths:
        return "orders by predicted lengths; this workload carries none and no prompts to predict from (oracle)"
    return ""


def _regrets(results: Sequence[ContenderResult], loads: Sequence[float]) -> dict[str, float | None]:
    """Each contender's worst ratio over the loads of the best *eligible* contender's median goodput to its own
    (an oracle or a stranding contender is no bar to measure a deployable policy against)."""
    eligible = [r for r in results if not r.ineligible] or list(results)
    best = {x: max(r.median_goodput(x) for r in eligible) for x in loads}
    out: dict[str, float | None] = {}
    for r in results:
        ratios = [best[x] / r.median_goodput(x) if r.median_goodput(x) > 0 else math.inf for x in loads
                  if best[x] > 0]
        out[r.label] = max(ratios) if ratios else None
    return out


def _band(values: Sequence[float]) -> Band3 | None:
    finite = [v for v in values if math.isfinite(v)]
    return (median(finite), min(finite), max(finite)) if finite else None


def _gains(ours: ContenderResult, base: ContenderResult) -> tuple[list[TierGain], dict[float, Band3 | None]]:
    tiers: list[str] = []
    for o in ours.outcomes.values():
        tiers += [t for t, v in o.attainment.items() if v is not None and t not in tiers]
    gains = []
    for tier in tiers:
        ratios, mine, theirs = [], [], []
        for key, o in ours.outcomes.items():
            a, b = o.attainment.get(tier), base.outcomes[key].attainment.get(tier)
            if a is None or b is None:
                continue
            mine.append(a)
            theirs.append(b)
            ratios.append(a / b if b > 0 else (1.0 if a == 0 else math.inf))
        band = _band(ratios)
        gains.append(TierGain(tier, band[0] if band else None, band[1] if band else None,
                              band[2] if band else None, median(mine) if mine else None,
                              median(theirs) if theirs else None))
    loads = dict.fromkeys(load for load, _ in ours.outcomes)
    per_load = {load: _band([o.goodput / base.outcomes[k].goodput for k, o in ours.outcomes.items()
                             if k[0] == load and base.outcomes[k].goodput > 0]) for load in loads}
    return gains, per_load


# ---- the whole advice ----------------------------------------------------------------------------------------
def default_contenders() -> dict[str, str]:
    """The scoreboard's contenders (every registered policy at its defaults, each seed's tuned spec)."""
    from semsched.experiments.scoreboard import contenders

    return dict(contenders())


def advise(settings: AdviseSettings, runner: PointRunner | None = None, progress: PointProgress | None = None,
           *, on_capacity: Callable[[float, int], None] | None = None) -> Advice:
    """Run every contender on the user's windows at every load and say which to run (module doc)."""
    runner = runner or InProcess()
    contenders = dict(settings.contenders or default_contenders())
    if BASELINE not in contenders.values():
        contenders = {BASELINE: BASELINE, **contenders}
    cluster = settings.cluster
    contenders = {label: priced_with(spec, cluster.profile) for label, spec in contenders.items()}
    for spec in contenders.values():
        POLICIES.create(spec)  # a bad spec fails before anything runs
    if not cluster.allow_stalls:  # a stall is counted against the contender, not the end of the advice
        cluster = _with_stalls(cluster)
    seeds = windows(settings)
    length = cluster.length_predictor
    if length is not None and any(w.prompt_text is None for w in seeds) and spec_reads_text(length):
        raise AdviseError(f"--predictor: {length.spec}: workload {settings.workload!r} carries no prompt texts "
                          "for this predictor; length=input-length or length=histogram need none")
    for part in seeds:
        _check_servable(part, cluster)
    capacity = measure_capacity(seeds[0], settings.workload, 0, cluster).requests_per_s
    if not (math.isfinite(capacity) and capacity > 0):
        raise AdviseError(f"--workload: the capacity of {settings.workload!r} on this cluster could not be "
                          f"measured (got {capacity!r} requests/s)")
    if on_capacity is not None:
        on_capacity(capacity, len(seeds[0]))
    keys = [(load, seed) for load in settings.loads for seed in range(settings.seeds)]
    points = [SimPoint(f"advise {label} load={load:g} seed={seed}", at_rate(seeds[seed], load * capacity), spec,
                       cluster) for load, seed in keys for label, spec in contenders.items()]
    runs = iter(runner.run(points, progress))
    results = {label: ContenderResult(label, spec) for label, spec in contenders.items()}
    weights = tier_weights(settings.tiers)
    for key in keys:
        for label in contenders:
            results[label].outcomes[key] = outcome(next(runs), weights)
    notes: list[str] = []
    for r in results.values():
        if r.stranded:
            r.ineligible = f"{r.stranded} requests stranded (a scheduler defect)"
        else:
            r.ineligible = _oracle_reason(r.spec, seeds[0], cluster)
    ordered = list(results.values())
    regrets = _regrets(ordered, settings.loads)
    eligible = [r for r in ordered if not r.ineligible and regrets[r.label] is not None]
    if not eligible:
        raise AdviseError("no contender finished every run without a stranded request; see the table")
    best = min(eligible, key=lambda r: (regrets[r.label],
                                        -sum(o.goodput for o in r.outcomes.values()), r.label))
    base = next(r for r in ordered if r.spec == BASELINE)
    gains, goodput_gain = _gains(best, base)
    if any("predicted lengths" in r.ineligible for r in ordered):
        notes.append("policies that order by predicted output lengths ran on the true lengths (this workload has "
                     "no prompts to predict from) and are not advised; give a workload with prompt texts and "
                     "--predictor length=NAME to include them")
    return Advice(settings, seeds[0].name, len(seeds[0]), capacity, ordered, regrets, best.label, gains,
                  goodput_gain, notes)


def _with_stalls(cluster: ClusterSpec) -> ClusterSpec:
    return dataclasses.replace(cluster, allow_stalls=True)
