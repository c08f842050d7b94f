"""``semsched reproduce prefix`` (issue 32): what prefix-cache-aware routing gains once engines cache prefixes.

Four engines (the default profile, FCFS, vLLM's automatic prefix caching on: :attr:`SchedulerConfig.
enable_prefix_caching`) behind ``prefix-affinity`` (ours, :mod:`semsched.sim.prefix_router`), ``least-outstanding``
and ``round-robin``, on two-turn MT-Bench conversations (``mt-bench-turns``: turn 2's prompt holds turn 1 and its
answer), at 0.5x to 1.5x of the measured capacity (least-outstanding with caching on, FCFS, saturated as
:func:`semsched.experiments.tiers.measure_capacity` measures it), three seeds per load (each seed its own
conversations and arrivals). Figures: mean and p99 TTFT, and the prefix-cache hit rate (prompt tokens found
cached at first scheduling / prompt tokens). Two controls: the same runs with prefix caching off (the router can
gain nothing: no cache to aim for, only the imbalance its affinity costs), and, with caching on, a trace without
shared prefixes (``long_context_synthetic.jsonl``, every ``hash_ids`` distinct; three 200-request windows as its
seeds), where prefix-affinity must not collapse: it falls back to least-outstanding.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from semsched.core.request import RequestState
from semsched.core.scheduler import SchedulerConfig
from semsched.experiments.curves import Band, Claim, LoadCurve
from semsched.experiments.framework import ExperimentContext, GridPoint
from semsched.experiments.numbers import num
from semsched.experiments.registry import Experiment, register_experiment
from semsched.experiments.tiers import at_rate, measure_capacity
from semsched.sim.runner import DEFAULT_PROFILE, ClusterSpec, PolicyRun
from semsched.workloads import Workload, build_workload
from semsched.workloads.traces import find_data_file

OURS = "prefix-affinity"
BASELINES = ("least-outstanding", "round-robin")
ROUTERS = (OURS, *BASELINES)
POLICY = "fcfs"
INSTANCES = 4
WORKLOAD = "mt-bench-turns"
TRACE = "long_context_synthetic.jsonl"
LOADS = (0.5, 0.7, 0.9, 1.1, 1.3, 1.5)
QUICK_LOADS = (0.6, 1.4)
NUM_SEEDS, QUICK_SEEDS = 3, 2
CONVERSATION_REQUESTS, QUICK_CONVERSATION_REQUESTS = 6000, 600
TRACE_REQUESTS, QUICK_TRACE_REQUESTS = 200, 40
#: "prefix-affinity gains nothing" when its median gain stays within this of 1 at every load
NOTHING_TOLERANCE = 0.05

Values = dict[str, dict[float, list[float | None]]]


def cluster(router: str, caching: bool) -> ClusterSpec:
    """Four engines at the defaults behind ``router``, prefix caching on or off."""
    return ClusterSpec(num_instances=INSTANCES, router=router,
                       scheduler=SchedulerConfig(enable_prefix_caching=caching))


@dataclass(frozen=True)
class RunNumbers:
    """What one run's figures read: TTFT mean and p99 (s) of the requests the engines took (one rejected at
    arrival, too large for the KV cache, is left out: every router sees the same ones), the cache hit rate; None
    where a request taken was left without a first token (a collapse, shown)."""

    ttft_mean_s: float | None
    ttft_p99_s: float | None
    hit_rate: float

    @classmethod
    def of(cls, run: PolicyRun) -> RunNumbers:
        requests = [r for r in run.requests if r.state is not RequestState.REJECTED]
        ttft = [r.first_token_time_s - r.arrival_time_s for r in requests if r.first_token_time_s is not None]
        prompt = sum(r.prompt_tokens for r in requests)
        hit_rate = sum(r.num_cached_tokens for r in requests) / prompt if prompt else 0.0
        if len(ttft) < len(requests) or not ttft:
            return cls(None, None, hit_rate)
        return cls(float(np.mean(ttft)), float(np.quantile(ttft, 0.99)), hit_rate)


@register_experiment
class Prefix(Experiment):
    name = "prefix"
    summary = ("prefix-affinity vs least-outstanding and round-robin over 4 engines with prefix caching: TTFT and "
               "hit rate on two-turn MT-Bench conversations, with caching off and on a trace without shared "
               "prefixes as controls")

    def run(self, ctx: ExperimentContext) -> None:
        loads = QUICK_LOADS if ctx.quick else LOADS
        seeds = [ctx.seed + k for k in range(QUICK_SEEDS if ctx.quick else NUM_SEEDS)]
        conversations = _conversations(ctx, loads, seeds)
        _conversation_figures(ctx, loads, seeds, conversations)
        _no_sharing_figure(ctx, loads, seeds)


# ---- the conversations ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Conversations:
    """The multi-turn grid's numbers: per caching setting, router, load, seed; and the capacity it is loaded to."""

    capacity_per_s: float
    num_requests: int
    numbers: Mapping[bool, Mapping[str, Mapping[float, Sequence[RunNumbers]]]]

    def values(self, caching: bool, read: str) -> Values:
        return {router: {load: [getattr(n, read) for n in per_seed] for load, per_seed in per_load.items()}
                for router, per_load in self.numbers[caching].items()}


def _conversations(ctx: ExperimentContext, loads: Sequence[float], seeds: Sequence[int]) -> Conversations:
    count = QUICK_CONVERSATION_REQUESTS if ctx.quick else CONVERSATION_REQUESTS
    probe = build_workload(WORKLOAD, rate_per_s=10.0, seed=seeds[0], num_requests=count)
    capacity = measure_capacity(probe, WORKLOAD, seeds[0], cluster(BASELINES[0], True)).requests_per_s
    points = []
    for load in loads:
        for seed in seeds:
            workload = build_workload(WORKLOAD, rate_per_s=load * capacity, seed=seed, num_requests=count)
            for caching in (True, False):
                figure_id = "ttft-mean" if caching else "caching-off"  # (its runs feed ttft-p99 and hit-rate too)
                points += [GridPoint(figure_id, workload, (POLICY,), cluster(router, caching),
                                     {"router": router, "caching": caching, "load": load, "seed": seed})
                           for router in ROUTERS]
    runs = ctx.run_grid(points)
    numbers: dict[bool, dict[str, dict[float, list[RunNumbers]]]] = {
        caching: {router: {load: [] for load in loads} for router in ROUTERS} for caching in (True, False)}
    for point, run in zip(points, runs, strict=True):
        columns = point.columns
        numbers[columns["caching"]][columns["router"]][columns["load"]].append(RunNumbers.of(run[POLICY]))
    return Conversations(capacity, count, numbers)


def _config(ctx: ExperimentContext, loads: Sequence[float], seeds: Sequence[int], **extra: Any) -> dict[str, Any]:
    return {"policy": POLICY, "instances": INSTANCES, "profile": DEFAULT_PROFILE, "routers": list(ROUTERS),
            "router_defaults": "prefix-affinity: max_imbalance=1.5, slack_requests=4, min_match_blocks=1",
            "loads": list(loads), "seeds": list(seeds), "quick": ctx.quick, **extra}


def _command(ctx: ExperimentContext) -> str:
    return f"semsched reproduce prefix{' --quick' if ctx.quick else ''} --seed {ctx.seed}"


def _conversation_figures(ctx: ExperimentContext, loads: Sequence[float], seeds: Sequence[int],
                          data: Conversations) -> None:
    config = _config(ctx, loads, seeds, workload=WORKLOAD, num_requests=data.num_requests,
                     capacity_requests_per_s=data.capacity_per_s, prefix_caching=True)
    strict = not ctx.quick
    note = (f"Loads are fractions of {num(data.capacity_per_s)} requests/s, the saturated throughput of "
            "least-outstanding with prefix caching on (FCFS, 4 engines).")
    curves = {
        "ttft-mean": LoadCurve("mean TTFT (s)", loads, seeds, data.values(True, "ttft_mean_s"), OURS, BASELINES,
                               higher_is_better=False, strict=strict),
        "ttft-p99": LoadCurve("p99 TTFT (s)", loads, seeds, data.values(True, "ttft_p99_s"), OURS, BASELINES,
                              higher_is_better=False, strict=strict),
        "hit-rate": LoadCurve("prefix-cache hit rate", loads, seeds, data.values(True, "hit_rate"), OURS,
                              BASELINES, higher_is_better=True, strict=strict),
    }
    titles = {"ttft-mean": "Mean TTFT, 4 engines with prefix caching, two-turn MT-Bench",
              "ttft-p99": "p99 TTFT, 4 engines with prefix caching, two-turn MT-Bench",
              "hit-rate": "Prefix-cache hit rate (cached prompt tokens / prompt tokens)"}
    extra_notes = {
        "ttft-p99": ["Affinity trades balance for hits: an engine that keeps its conversations may hold a longer "
                     "queue than its neighbours, so a balanced router's p99 can be lower at some loads (those "
                     "where ours is not at least as good)."],
        "hit-rate": ["The baselines hit too: a second turn lands on its first turn's engine one time in four, "
                     "and the conversations of one question (one per model's answer file) share its first-turn "
                     "prompt. The rate falls with load as second turns arrive before their first has finished "
                     "(open-loop arrivals) and as prefix-affinity falls back from overloaded engines."],
    }
    for figure_id, curve in curves.items():
        ctx.add_figure(curve.figure(figure_id, title=titles[figure_id], paper_says=_NO_PAPER, paper={},
                                    config=config, command=_command(ctx),
                                    notes=[note, *extra_notes.get(figure_id, [])]))
    ctx.add_claim(_gain_claim(curves["ttft-mean"], "prefix-affinity lowers mean TTFT (best baseline / ours)",
                              "ttft-mean"))
    ctx.add_claim(_gain_claim(curves["ttft-p99"], "prefix-affinity lowers p99 TTFT (best baseline / ours)",
                              "ttft-p99"))
    off = LoadCurve("mean TTFT (s), prefix caching off", loads, seeds, data.values(False, "ttft_mean_s"), OURS,
                    BASELINES, higher_is_better=False, strict=strict)
    ctx.add_figure(off.figure(
        "caching-off", title="Control: mean TTFT with prefix caching off (same requests)", paper_says=_NO_PAPER,
        paper={}, config={**config, "prefix_caching": False}, command=_command(ctx),
        notes=[note, "Without a cache to aim for, affinity can only cost balance: a gain here would be an "
                     "error."]))
    ctx.add_claim(_nothing_claim(off, "with caching off, prefix-affinity gains nothing", "caching-off"))


def _gain_claim(curve: LoadCurve, words: str, figure: str) -> Claim:
    """:meth:`LoadCurve.claim` at the largest gain, its "where" cell cut to three numbers at most."""
    claim = curve.claim(words, paper=None, figure=figure)
    good = len(curve.as_good_loads())
    at = curve.largest_gain_load()
    where = f"{'' if at is None else f'at {at:g}x; '}as good as the best at {good} of {len(curve.loads)} loads"
    return dataclasses.replace(claim, where=where)


def _nothing_claim(curve: LoadCurve, words: str, figure: str) -> Claim:
    """Ours gains nothing: its median gain over the best baseline stays at or under 1 + tolerance everywhere."""
    gains = [curve.gain(load) for load in curve.loads]
    medians = [g.median for g in gains if g.median is not None]
    worst = max(medians) if medians else None
    holds = worst is not None and worst <= 1 + NOTHING_TOLERANCE
    cell = Band.of(medians).cell()
    why = (f"largest median gain {num(worst)} (at most {1 + NOTHING_TOLERANCE:g} expected)" if worst is not None
           else "no value")
    return Claim(words, "—", cell, "reproduced" if holds else "not", why, figure, "median gain over the loads")


# ---- the control without shared prefixes ----------------------------------------------------------------
def _no_sharing_figure(ctx: ExperimentContext, loads: Sequence[float], seeds: Sequence[int]) -> None:
    count = QUICK_TRACE_REQUESTS if ctx.quick else TRACE_REQUESTS
    path = find_data_file(TRACE)
    trace = build_workload(f"trace:path={path};rescale=false", rate_per_s=1.0, seed=0)
    windows = len(trace) // count
    by_seed = {seed: _window(trace, (seed % windows) * count, count) for seed in seeds}
    capacity = {seed: measure_capacity(window, TRACE, seed, cluster(BASELINES[0], True)).requests_per_s
                for seed, window in by_seed.items()}  # (each window its own: the windows differ in length)
    points = [GridPoint("no-sharing", at_rate(by_seed[seed], load * capacity[seed]), (POLICY,),
                        cluster(router, True), {"router": router, "caching": True, "load": load, "seed": seed})
              for load in loads for seed in seeds for router in ROUTERS]
    runs = ctx.run_grid(points)
    values: Values = {router: {load: [] for load in loads} for router in ROUTERS}
    hits: list[float] = []
    rejected: set[int] = set()
    for point, run in zip(points, runs, strict=True):
        rejected.add(sum(r.state is RequestState.REJECTED for r in run[POLICY].requests))
        numbers = RunNumbers.of(run[POLICY])
        values[point.columns["router"]][point.columns["load"]].append(numbers.ttft_mean_s)
        hits.append(numbers.hit_rate)
    curve = LoadCurve("mean TTFT (s), no shared prefixes", loads, seeds, values, OURS, BASELINES,
                      higher_is_better=False, strict=not ctx.quick)
    config = _config(ctx, loads, seeds, workload=f"{TRACE} (rescale=false), {count}-request windows",
                     capacity_requests_per_s={str(seed): value for seed, value in capacity.items()},
                     prefix_caching=True)
    ctx.add_figure(curve.figure(
        "no-sharing", title="Control: mean TTFT on a trace without shared prefixes (caching on)",
        paper_says=_NO_PAPER, paper={}, config=config, command=_command(ctx), extra={"hit_rates": hits},
        notes=["Seed k is the trace's k-th window of requests; loads are fractions of each window's own capacity "
               "(least-outstanding, caching on: results.json, config). Every hash_id is distinct, so no request "
               "finds another's prefix (hit rate at first scheduling: median "
               f"{num(float(np.median(hits)))} over every run here) and prefix-affinity must fall back to "
               "least-outstanding: where the runs are identical its line lies under least-outstanding's. "
               "(Caching still helps every router alike: a request preempted by recompute finds its own blocks "
               "cached when it is readmitted.) Requests longer than the KV cache are rejected at arrival, the "
               f"same under every router ({', '.join(str(n) for n in sorted(rejected))} per run), and left out "
               "of the TTFT."]))
    # against its own fallback: with nothing to match it must route as least-outstanding does
    fallback = LoadCurve(curve.metric, loads, seeds, values, OURS, (BASELINES[0],), higher_is_better=False,
                         strict=not ctx.quick)
    gains = [g.median for load in loads if (g := fallback.gain(load)).median is not None]
    worst = min(gains) if gains else None
    holds = worst is not None and worst >= 1 - NOTHING_TOLERANCE and not curve.collapses()
    ctx.add_claim(Claim(
        "without shared prefixes, prefix-affinity does not collapse (least-outstanding / ours)", "—",
        Band.of(gains).cell(), "reproduced" if holds else "not",
        f"smallest median ratio {num(worst)}, {len(curve.collapses())} collapse(s)", "no-sharing",
        "median ratio over the loads"))


def _window(workload: Workload, start: int, count: int) -> Workload:
    """Requests ``start`` to ``start + count`` of ``workload``, times shifted to start at 0."""
    times = workload.arrival_time_s
    end_s = float(times[start + count]) if start + count < len(workload) else float(times[-1]) + 1.0
    return workload.slice_time(float(times[start]), end_s)


_NO_PAPER = ("No paper: issue 32 asks whether routing by prefix pays once engines cache prefixes (vLLM's "
             "automatic prefix caching); ratios are best baseline / ours.")
