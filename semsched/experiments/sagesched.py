"""Seed 002 ("SageSched: Efficient LLM Scheduling Confronting Demand Uncertainty and Hybridity"): mean TTLT and
TTFT against FCFS, FastServe, SSJF, LTR and TRAIL over load (Fig. 7), per dataset (Fig. 8), the predictor,
cost-model and scheduling ablations (Fig. 9-11), the overhead of predicting and scheduling as the cluster grows
(Fig. 12), the sensitivity to the similarity threshold and the bucket size (Fig. 13); the sanity gate (true
lengths against predicted ones), and the settings the paper used that we had not tried (a warm 10,000-row
history, swap preemption for every policy).

How every figure is run (../shared/EXPERIMENTS.md, issue 30):

* requests are real prompts with one model's real output lengths (Llama-2 token counts), Poisson arrivals, each
  prompt at most once per run (a repeated prompt would hand the history its own answer). Like the paper's Fig. 7,
  the main workload mixes datasets: :data:`ALPACA_FILE` (AlpacaEval instructions answered by
  Llama-3-8B-Instruct: short prompts, long answers) and :data:`SPEC_BENCH_FILE` (Spec-Bench's 480 prompts
  answered by Vicuna-7B: summarization and RAG with ~820-token prompts, translation with ~30-token answers),
  1,285 requests;
* the engine is the A100/Qwen1.5-7B batch profile (:data:`PROFILE`, refitted to the corrected alpha1 of
  docs/seeds.md) with the default scheduler configuration (4,096 KV blocks of 16 tokens, 256 sequences,
  recompute preemption);
* load is a fraction of the capacity measured on the same requests (``tiers.measure_capacity``: FCFS completions
  per second under overload); every headline is a curve over load with :attr:`Grid.seeds` seeds per point, the
  median and min-max (:class:`~semsched.experiments.curves.LoadCurve`); a run that leaves requests unfinished
  has no value, and a seed 3x off the others is a collapse, shown, not averaged;
* predictions are made online: each request's distribution is predicted at its arrival (+0.5 ms) from the
  requests that finished before it. On the mixed workload every predictor starts cold unless a figure says
  otherwise; on one dataset alone the warm-up corpus is the other benchmark's answers (other prompts);
* every contender of a figure runs on the same requests (same workload object, same seed).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from semsched.core.plan import PreemptionMode
from semsched.core.scheduler import SchedulerConfig
from semsched.experiments.curves import Band, Claim, LoadCurve, _ranges, ratio_verdict
from semsched.experiments.framework import ExperimentContext, Figure, GridPoint, Table
from semsched.experiments.numbers import median as _median
from semsched.experiments.numbers import num as _num
from semsched.experiments.numbers import pct as _pct
from semsched.experiments.numbers import ratio as _ratio
from semsched.experiments.plots import bar_chart, line_chart
from semsched.experiments.registry import Experiment, register_experiment
from semsched.experiments.tiers import Capacity, at_rate, measure_capacity
from semsched.sim.prediction import parse_length_spec
from semsched.sim.runner import ClusterSpec, PolicyRun
from semsched.workloads import DataNotFoundError, Workload, build_workload
from semsched.workloads.traces import data_dir

PROFILE = "a100-qwen1.5-7b-batch"
AS_PRINTED_PROFILE = "a100-qwen1.5-7b-as-printed"
ALPACA_FILE = "alpaca_eval/model_outputs/Meta-Llama-3-8B-Instruct.json"
#: the long-output dataset of fig8: the AlpacaEval answers with the most tokens (546 a request on average)
LONG_OUTPUT_FILE = "alpaca_eval/model_outputs/Meta-Llama-3.1-70B-Instruct-Turbo.json"
SPEC_BENCH_FILE = "spec_bench/model_answer/vicuna-7b-v1.3-vanilla-float16-temp-0.0.jsonl"
#: the warm-up corpus of an AlpacaEval workload: 32 models' MT-Bench answers (other prompts)
WARMUP = "mt_bench/model_answer/*.jsonl"
#: the warm-up corpus of a Spec-Bench workload: 23 models' AlpacaEval answers (other prompts)
WARMUP_FOR_SPEC_BENCH = "alpaca_eval/model_outputs/*.json"
#: the warm history of the mixed workload (``warm``): other models' answers to the same prompts, about the
#: paper's 10,000-record window: 9 AlpacaEval models (7,245 rows) and 32 MT-Bench models (2,560 rows)
WARM_ALPACA_MODELS = 9
TTLT_TARGET = 0.287
"""The paper's headline: mean TTLT 28.7 % below the second best (TRAIL) at 8 requests/s."""
PAPER_GAIN = 1.0 / (1.0 - TTLT_TARGET)
"""The same as a ratio, the second best's mean TTLT over SageSched's: 1.40."""
NOISE_WEIGHT = 0.2
"""Fig. 11's inaccurate predictions: each distribution mixed with a uniform one, 4:1."""
OVERHEAD_RATE_PER_INSTANCE = 8.0
PAPER_OVERHEAD_MS = 100.0
PAPER_PREDICT_MS = 0.5
GATE_TOLERANCE = 0.02
"""The sanity gate holds where the true lengths' mean TTLT is at most this much above the predicted ones'
(median over seeds): seed noise of the same order separates two orders that are equally good."""
SLOT_BOUND = SchedulerConfig(num_gpu_blocks=65_536, max_num_seqs=128)
"""The gate's engine without KV pressure: 16x the KV blocks, 128 sequences, so a request's cost is the slot it
holds for its output's steps, which ``cost=output`` prices exactly."""
SWAP_BLOCKS = 65_536
"""CPU swap space (blocks of 16 tokens) for the ``swap`` figure: enough for every preempted request's KV."""


# ---- contenders ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Contender:
    """A policy with the length predictor it reads (None: it reads none, or the oracle's true lengths)."""

    label: str
    policy: str
    predictor: str | None = None


def predictor_spec(name: str, warmup: str | None, **params: Any) -> str:
    items = [f"length={name}", *(f"{k}={v}" for k, v in params.items())]
    if warmup is not None:
        items.append(f"warmup={warmup}")
    return ";".join(items)


def contenders(warmup: str | None, *, policy_params: str = "") -> tuple[Contender, ...]:
    """Fig. 7/8: the paper's baselines with their kind of predictor (a point regressor on embeddings, as their
    fine-tuned BERT/OPT/MLP predictors give one value), and SageSched (Gittins on semantic-knn distributions).
    ``policy_params`` (``preemption=swap``) is added to every policy's spec."""
    point = predictor_spec("regressor", warmup)

    def spec(name: str, *params: str) -> str:
        items = [*params, policy_params] if policy_params else list(params)
        return f"{name}:{';'.join(items)}" if items else name

    return (
        Contender("fcfs", spec("fcfs")),
        Contender("fastserve", spec("fastserve", f"profile={PROFILE}")),
        Contender("ssjf", spec("ssjf"), point),
        Contender("ltr", spec("ltr"), point),
        Contender("trail", spec("trail"), point),
        Contender("sagesched", spec("gittins"), predictor_spec("semantic-knn", warmup)),
    )


PREDICTION_BASELINES = ("ssjf", "ltr", "trail")
BASELINES = ("fcfs", "fastserve", "ssjf", "ltr", "trail")
SAGESCHED = "sagesched"


@dataclass(frozen=True)
class Grid:
    """How much is run: seeds, the headline's loads, the side figures' loads, the ablations' load."""

    seeds: tuple[int, ...]
    loads: tuple[float, ...]
    #: the loads of fig8, warm, swap and the gate (a subset of ``loads``: warm reuses fig7's fcfs/fastserve)
    side_loads: tuple[float, ...]
    ablation_load: float
    num_requests: int
    instances: tuple[int, ...]
    overhead_duration_s: float

    @classmethod
    def of(cls, ctx: ExperimentContext) -> Grid:
        if ctx.quick:
            # 500 requests: fewer never queue up (the KV cache holds them all), whatever the rate
            return cls((ctx.seed,), (1.0, 2.0), (2.0,), 2.0, 500, (1, 2), 2.0)
        # side figures at two loads (cut for time on a shared 2-core machine; issue 30)
        return cls(tuple(ctx.seed + k for k in range(3)), (0.5, 1.0, 1.1, 1.2, 1.3, 1.4, 1.5),
                   (1.2, 1.5), 1.3, 1285, (1, 4, 16, 64), 20.0)


Numbers = dict[str, float | None]
Runs = dict[str, dict[float, list[PolicyRun]]]  # label -> load -> one run per seed


def finished_mean(run: PolicyRun, key: str) -> float | None:
    """The run's mean TTLT (``e2e_s``) or TTFT over its requests; None when any request is unfinished (a mean
    over the finished ones would hide the collapse)."""
    overall = run.summary.overall
    if overall.num_finished < overall.num_requests:
        return None
    value = getattr(overall, key).mean
    return None if value is None else float(value)


def ttlt(run: PolicyRun) -> float | None:
    return finished_mean(run, "e2e_s")


def ttft(run: PolicyRun) -> float | None:
    return finished_mean(run, "ttft_s")


def run_numbers(run: PolicyRun) -> Numbers:
    overall = run.summary.overall
    return {"ttlt_s": ttlt(run), "ttft_s": ttft(run), "num_preemptions": float(overall.num_preemptions),
            "num_unfinished": float(overall.num_requests - overall.num_finished)}


# ---- the experiment --------------------------------------------------------------------------------------
FIGURE_IDS = ("fig7", "fig8-long-input", "fig8-long-output", "ablations", "fig12", "gate", "warm", "swap")


@register_experiment
class SageSched(Experiment):
    name = "sagesched"
    summary = "seed 002: Gittins on predicted length distributions vs FCFS/FastServe/SSJF/LTR/TRAIL, ablations"
    source = "../shared/seeds/002_48809d3cedd523d8.txt"

    def run(self, ctx: ExperimentContext) -> None:
        ctx.grid_note = "fig8, warm, swap and the gate at 2 loads (1.2x, 1.5x), not the headline's 7"
        base = _Base(ctx, Grid.of(ctx))
        try:
            base.check_data()
        except DataNotFoundError as error:
            for figure_id in FIGURE_IDS:
                ctx.add_figure(_skipped_figure(base, figure_id, str(error)))
            ctx.add_claim(Claim("the reproduction ran", "—", "n/a", "not", f"data missing: {error}"))
            return
        fig7 = _headline(base)
        _datasets(base, fig7)
        gate_rows = _ablations(base)
        ctx.add_figure(_overhead_figure(base))
        _gate(base, gate_rows)
        _warm(base, fig7)
        _swap(base, fig7)


class _Base:
    def __init__(self, ctx: ExperimentContext, grid: Grid) -> None:
        self.ctx, self.grid = ctx, grid
        self.root = data_dir()
        self._capacities: dict[tuple[str, str, int | None], Capacity] = {}
        #: the runs of the last seed of the last :meth:`compare`, by contender label (for per-request notes)
        self.last_runs: dict[str, PolicyRun] = {}

    def path(self, name: str) -> str:
        return str(self.root / name)

    def check_data(self) -> None:
        for name in (ALPACA_FILE, SPEC_BENCH_FILE, LONG_OUTPUT_FILE):
            if not (self.root / name).is_file():
                raise DataNotFoundError(f"{self.root / name}: missing (set SEMSCHED_DATA_DIR to the shared data)")

    def mixed_spec(self) -> str:
        return f"mixed:parts={self.path(ALPACA_FILE)}+{self.path(SPEC_BENCH_FILE)}"

    def warmup(self) -> str:
        return self.path(WARMUP)

    def warm_history(self) -> str:
        """Other models' answers to the mixed workload's prompts (module doc of :data:`WARM_ALPACA_MODELS`)."""
        served = Path(ALPACA_FILE).name
        others = sorted(p.name for p in (self.root / Path(ALPACA_FILE).parent).glob("*.json") if p.name != served)
        chosen = [self.path(f"{Path(ALPACA_FILE).parent}/{name}") for name in others[:WARM_ALPACA_MODELS]]
        return "+".join([*chosen, self.path(WARMUP)])

    def count(self, num_requests: int | None) -> int:
        return min(num_requests, self.grid.num_requests) if num_requests else self.grid.num_requests

    def workload(self, spec: str, rate: float, seed: int, num_requests: int | None = None) -> Workload:
        return build_workload(spec, rate_per_s=rate, num_requests=self.count(num_requests), seed=seed)

    def cluster(self, profile: str = PROFILE, scheduler: SchedulerConfig | None = None,
                instances: int = 1) -> ClusterSpec:
        return ClusterSpec(profile=profile, num_instances=instances, scheduler=scheduler or SchedulerConfig())

    def capacity(self, spec: str, cluster: ClusterSpec, num_requests: int | None = None) -> Capacity:
        """FCFS's saturation throughput on ``spec``'s requests of the context's seed, on ``cluster`` (once)."""
        key = (spec, repr(cluster), num_requests)
        if key not in self._capacities:
            workload = self.workload(spec, 1.0, self.ctx.seed, num_requests)
            self._capacities[key] = measure_capacity(workload, spec, self.ctx.seed, cluster)
        return self._capacities[key]

    def point(self, figure_id: str, workload: Workload, contender: Contender,
              columns: Mapping[str, Any] | None = None, cluster: ClusterSpec | None = None) -> GridPoint:
        length = parse_length_spec(contender.predictor) if contender.predictor is not None else None
        cluster = dataclasses.replace(cluster or self.cluster(), length_predictor=length)
        extra = {"contender": contender.label, "predictor": contender.predictor or "", **(columns or {})}
        return GridPoint(figure_id, workload, [contender.policy], cluster, extra)

    def run_each(self, points: Sequence[GridPoint]) -> list[PolicyRun]:
        """The run of each one-contender point, all handed to the context's runner at once."""
        return [run for per_policy in self.ctx.run_grid(points) for run in per_policy.values()]

    def over_load(self, figure_id: str, spec: str, entries: Sequence[Contender], loads: Sequence[float], *,
                  capacity: Capacity, cluster: ClusterSpec | None = None, num_requests: int | None = None,
                  columns: Mapping[str, Any] | None = None) -> Runs:
        """Every contender at every load (a fraction of ``capacity``) and seed, on the same requests per seed
        (the arrivals rescaled to each load's rate)."""
        points = []
        for seed in self.grid.seeds:
            requests = self.workload(spec, capacity.requests_per_s, seed, num_requests)
            for load in loads:
                rate = load * capacity.requests_per_s
                row = {"load": load, "rate_per_s": round(rate, 4), "seed": seed, **(columns or {})}
                points += [self.point(figure_id, at_rate(requests, rate), c, row, cluster) for c in entries]
        runs = iter(self.run_each(points))
        out: Runs = {c.label: {load: [] for load in loads} for c in entries}
        for _seed in self.grid.seeds:
            for load in loads:
                for contender in entries:
                    out[contender.label][load].append(next(runs))
        return out

    def compare(self, figure_id: str, entries: Sequence[Contender], load: float,
                group: str | None = None) -> dict[str, list[PolicyRun]]:
        """Every contender on the mixed workload at ``load`` of its capacity, per seed (the ablations; ``group``
        names the paper's figure in requests.csv when several share one report figure)."""
        capacity = self.capacity(self.mixed_spec(), self.cluster())
        columns = {"group": group} if group else None
        runs = self.over_load(figure_id, self.mixed_spec(), entries, (load,), capacity=capacity, columns=columns)
        self.last_runs = {label: per_load[load][-1] for label, per_load in runs.items()}
        return {label: per_load[load] for label, per_load in runs.items()}

    def config(self, workload: str, **extra: Any) -> dict[str, Any]:
        return {
            "workload": workload,
            "profile": PROFILE,
            "num_requests": self.grid.num_requests,
            "seeds": list(self.grid.seeds),
            "statistic": f"median [min-max] over {len(self.grid.seeds)} seed(s) of each run's mean (no value "
                         "when a request is left unfinished)",
            "predictions": "online at arrival + 0.5 ms from the requests finished before (+ a warm-up corpus "
                           "where one is named)",
            **extra,
        }

    def command(self, figure_id: str, python: str) -> str:
        quick = " --quick" if self.ctx.quick else ""
        return f"semsched reproduce sagesched{quick} --seed {self.ctx.seed}   # {figure_id}: {python}"


Values = dict[str, dict[float, list[float | None]]]


def values_of(runs: Runs, metric: Callable[[PolicyRun], float | None]) -> Values:
    return {label: {load: [metric(run) for run in per_seed] for load, per_seed in per_load.items()}
            for label, per_load in runs.items()}


def _curve(base: _Base, runs: Runs, metric: str, value: Callable[[PolicyRun], float | None],
           loads: Sequence[float], *, ours: str = SAGESCHED, baselines: Sequence[str] = BASELINES,
           strict: bool | None = None) -> LoadCurve:
    values = values_of(runs, value)
    return LoadCurve(metric, loads, base.grid.seeds, {k: {ld: values[k][ld] for ld in loads} for k in values},
                     ours=ours, baselines=baselines, higher_is_better=False,
                     strict=(not base.ctx.quick) if strict is None else strict)


def _log_figure(figure: Figure, curve: LoadCurve, title: str) -> Figure:
    """The curve's figure drawn on a log axis (a collapse is 10-100x the others), without the list of ratios
    (the table's last column; results.json keeps them)."""
    return dataclasses.replace(figure, plot=lambda path: _log_bands(path, curve, title), ratios={},
                               ratio_direction="")


# ---- Fig. 7: mean TTLT and TTFT over load ----------------------------------------------------------------
GAIN_TOLERANCE = 0.1
"""A gain claim is reproduced when the paper's ratio is inside our min-max or within 10 % of our median
(:func:`~semsched.experiments.curves.ratio_verdict` with this tolerance: its default 25 % would call our 1.11 the
paper's 1.40, i.e. a 10 % TTLT reduction the paper's 28.7 %)."""


def _gain_claim(curve: LoadCurve, claim: str, figure_id: str) -> Claim:
    """The paper's 1.40 against our gain at the largest-gain load (:data:`GAIN_TOLERANCE`)."""
    at = curve.largest_gain_load()
    gain = curve.gain(at) if at is not None else Band(None, None, None)
    verdict, why = ratio_verdict(PAPER_GAIN, gain, tolerance=GAIN_TOLERANCE)
    where = f"at {at:g}x; as good at {_ranges(curve.as_good_loads(), curve.loads)}" if at is not None else "—"
    return Claim(claim, "1.40 (28.7 % lower)", gain.cell(), verdict, why, figure_id, where)


def _headline(base: _Base) -> Runs:
    spec = base.mixed_spec()
    capacity = base.capacity(spec, base.cluster())
    entries = contenders(None)
    runs = base.over_load("fig7", spec, entries, base.grid.loads, capacity=capacity)
    curve = _curve(base, runs, "mean TTLT (s)", ttlt, base.grid.loads)
    every_ttft = _curve(base, runs, "mean TTFT (s)", ttft, base.grid.loads)
    config = base.config(spec, loads=list(base.grid.loads), capacity=capacity.as_config(),
                         contenders=[c.__dict__ for c in entries])
    title = "Mean TTLT over load, mixed AlpacaEval + Spec-Bench"
    figure = curve.figure(
        "fig7", title=title,
        paper_says="Fig. 7: SageSched has the lowest mean TTLT at every rate, 28.7 % below the second best "
                   "(TRAIL) at 8 requests/s on Qwen3-32B; FastServe has the best TTFT but a poor TTLT.",
        paper={"ttlt_reduction_vs_second_best": TTLT_TARGET, "second_best": "trail", "ratio": PAPER_GAIN},
        config=config, command=base.command("fig7", "every contender at every load and seed"),
        notes=[f"Capacity {_num(capacity.requests_per_s)} requests/s (FCFS under overload); below it no queue "
               "forms. Paper: Llama3.1-8B, Qwen3-32B on SharedGPT etc.; ours: A100/Qwen1.5-7B batch profile, "
               "real AlpacaEval and Spec-Bench lengths, predictors cold. TTFT per seed: results.json (ttft).",
               "fastserve, ltr preempt every quantum / step as in their papers; recomputed preemptions feed on "
               "each other once the KV cache is full. sagesched: no displacement, least-progress victims."],
        extra={"ttft": every_ttft.ours_document()})
    base.ctx.add_figure(_log_figure(figure, curve, title))
    base.ctx.add_claim(_gain_claim(curve, "mean TTLT: the best baseline's / SageSched's (paper: TRAIL, the "
                                          "second best)", "fig7"))
    good, total = len(curve.as_good_loads()), len(curve.loads)
    verdict = "reproduced" if good == total else ("partly" if good >= total / 2 else "not")
    base.ctx.add_claim(Claim("SageSched has the lowest mean TTLT at every rate", "every rate",
                             f"{good} of {total} loads", verdict,
                             "as good as the best baseline's median at those; below capacity all tie", "fig7"))
    loads = base.grid.loads
    best = {load: min(runs, key=lambda lb: _inf(every_ttft.band(lb, load).median)) for load in loads}
    fastserve_best = sum(best[ld] == "fastserve" for ld in loads)
    verdict = "reproduced" if fastserve_best >= len(loads) / 2 else ("partly" if fastserve_best else "not")
    base.ctx.add_claim(Claim("FastServe has the best mean TTFT (and a poor TTLT)", "best TTFT",
                             f"best at {fastserve_best} of {len(loads)} loads", verdict,
                             "lowest median TTFT per load: " + _count_text(best.values()), "fig7"))
    return runs


def _count_text(labels: Any) -> str:
    counts: dict[str, int] = {}
    for label in labels:
        counts[label] = counts.get(label, 0) + 1
    return ", ".join(f"{label} {n}x" for label, n in counts.items())


# ---- Fig. 8: per dataset, over load ----------------------------------------------------------------------
def _datasets(base: _Base, fig7: Runs) -> None:
    cases = {
        "long-input": (f"mt-bench:answers={base.path(SPEC_BENCH_FILE)}", base.path(WARMUP_FOR_SPEC_BENCH), 480,
                       "Spec-Bench (Vicuna-7B), a third ~820-token summarization/RAG prompts: the paper's "
                       "Alpaca-Summarization"),
        "long-output": (f"alpaca-eval:outputs={base.path(LONG_OUTPUT_FILE)}", base.warmup(), 805,
                        "AlpacaEval by Llama-3.1-70B (546-token answers on average, the longest): the paper's "
                        "Document-Write"),
    }
    gains: dict[str, Band] = {}
    for name, (spec, warmup, count, what) in cases.items():
        capacity = base.capacity(spec, base.cluster(), count)
        entries = contenders(warmup)
        runs = base.over_load(f"fig8-{name}", spec, entries, base.grid.side_loads, capacity=capacity,
                              num_requests=count, columns={"dataset": name})
        curve = _curve(base, runs, "mean TTLT (s)", ttlt, base.grid.side_loads, strict=False)
        figure_id = f"fig8-{name}"
        title = f"Mean TTLT over load, the {name} dataset"
        figure = curve.figure(
            figure_id, title=title,
            paper_says="Fig. 8: SageSched is best on each dataset, most of all on Alpaca(-Summarization), whose "
                       "long prompts make output-length-only cost models wrong.",
            paper={"best_on_every_dataset": SAGESCHED, "largest_gain_on": "long-input"},
            config=base.config(spec, loads=list(base.grid.side_loads), num_requests=count, warmup=warmup,
                               capacity=capacity.as_config(), contenders=[c.__dict__ for c in entries]),
            command=base.command(figure_id, "fig7 on one dataset, loads of its own capacity"),
            notes=[f"{what}; warm-up corpus: the other benchmark's answers (other prompts)."])
        base.ctx.add_figure(_log_figure(figure, curve, title))
        where = curve.largest_gain_load()
        gains[name] = curve.gain(where) if where is not None else Band(None, None, None)
    mixed = _curve(base, fig7, "mean TTLT (s)", ttlt, base.grid.side_loads, strict=False)
    mixed_at = mixed.largest_gain_load()
    gains["mixed"] = mixed.gain(mixed_at) if mixed_at is not None else Band(None, None, None)
    medians = {name: band.median for name, band in gains.items()}
    better_everywhere = all(m is not None and m >= 1.0 for m in medians.values())
    peaks = medians["long-input"] is not None and all(
        m is None or medians["long-input"] >= m for m in medians.values())
    verdict = "reproduced" if better_everywhere and peaks else ("partly" if better_everywhere or peaks else "not")
    base.ctx.add_claim(Claim(
        "SageSched best on each dataset, its gain largest on the long-input one", "largest on long-input",
        f"{_num(medians['long-input'])} vs {_num(medians['long-output'])} vs {_num(medians['mixed'])}", verdict,
        f"gains long-input vs long-output vs mixed; {'better' if better_everywhere else 'not better'} on each, "
        f"{'largest' if peaks else 'not largest'} on long-input", "fig8-long-input",
        "each at its largest-gain load"))


# ---- Fig. 9-11 and 13: ablations at one load -------------------------------------------------------------
ABLATIONS = "ablations"


def _ablations(base: _Base) -> dict[str, list[PolicyRun]]:
    """Fig. 9, 10, 11, 13 at :attr:`Grid.ablation_load`, as one figure (:data:`ABLATIONS`: one table, a row per
    variant, its TTLT against its group's default); returns fig9's runs (the gate reads its oracle)."""
    parts: list[Figure] = []
    fig9 = _predictors_figure(base, parts)
    _costs_figure(base, parts)
    _scheduling_figure(base, parts)
    _sensitivity_figure(base, parts)
    rows = tuple((f"{part.id}: {row[0]}", *row[1:]) for part in parts for row in part.table.rows)
    columns = ("variant", "TTLT / its default's", "mean TTLT (s), median", "preemptions (median)")
    bars = [(row[0], part.ours["per_variant"][row[0].split(": ", 1)[1]]["ttlt_over_default"])
            for part in parts for row in rows if row[0].startswith(f"{part.id}: ")]
    base.ctx.add_figure(Figure(
        id=ABLATIONS,
        title=f"Fig. 9-11 and 13: ablations on the mixed workload at {base.grid.ablation_load:g}x capacity",
        paper_says="Fig. 9: the semantic history predictor is best (vs input-length history, DistilBERT). "
                   "Fig. 10: the resource cost O²/2 + I·O is best. Fig. 11: Gittins ordering and refreshing "
                   "help; noise (uniform, 1:4) hurts Gittins least. Fig. 13: threshold 0.8, bucket size 200 best.",
        paper={part.id: part.paper for part in parts},
        ours={part.id: part.ours for part in parts},
        config={part.id: part.config for part in parts},
        command=base.command(ABLATIONS, "each variant at the ablation load, per seed"),
        table=Table(columns, rows),
        plot=lambda path: _ratio_bars(path, bars, "mean TTLT / its group's default's (median over seeds)",
                                      "ablations: mean TTLT against each group's default"),
        notes=[f"{part.id}: {note}" for part in parts for note in part.notes],
        headline="best per group: " + ", ".join(f"{part.id} {part.ours['best']}" for part in parts),
    ))
    return fig9


def _ablation_table(runs: Mapping[str, list[PolicyRun]], reference: str) -> tuple[Table, dict[str, Any]]:
    rows, ours = [], {}
    for label, per_seed in runs.items():
        band = Band.of([ttlt(r) for r in per_seed])
        versus = _versus(per_seed, runs[reference])
        first = Band.of([ttft(r) for r in per_seed]).median
        preempted = _median(float(r.summary.overall.num_preemptions) for r in per_seed)
        rows.append((label, versus.cell(), _num(band.median), _num(preempted, 0)))
        ours[label] = {"ttlt_s": [ttlt(r) for r in per_seed], "ttft_s": [ttft(r) for r in per_seed],
                       "ttlt_median": band.median, "ttlt_over_default": versus.median, "ttft_median": first,
                       "num_preemptions_median": preempted}
    columns = ("variant", "TTLT / its default's", "mean TTLT (s), median", "preemptions (median)")
    return Table(columns, tuple(rows)), ours


def _versus(runs: Sequence[PolicyRun], reference: Sequence[PolicyRun]) -> Band:
    """Per seed, a run's mean TTLT over the reference run's of the same seed."""
    return Band.of([_ratio(ttlt(r), ttlt(ref)) for r, ref in zip(runs, reference, strict=True)])


def _ablation_figure(base: _Base, figure_id: str, title: str, runs: Mapping[str, list[PolicyRun]],
                     entries: Sequence[Contender], *, paper_says: str, notes: Sequence[str], reference: str,
                     extra: Mapping[str, Any] | None = None) -> tuple[Figure, dict[str, Band]]:
    """The paper's claim for an ablation is that ``reference`` (its default) is best. Returns the figure and,
    per variant, its per-seed TTLT over the reference's as a band."""
    table, ours = _ablation_table(runs, reference)
    versus = {label: _versus(per_seed, runs[reference]) for label, per_seed in runs.items()}
    medians = {label: Band.of([ttlt(r) for r in per_seed]).median for label, per_seed in runs.items()}
    best = min(medians, key=lambda label: _inf(medians[label]))
    figure = Figure(
        id=figure_id,
        title=f"{title}, mixed workload at {base.grid.ablation_load:g}x capacity",
        paper_says=paper_says,
        paper={"best": reference},
        ours={"per_variant": ours, "best": best, "default": reference, **(extra or {})},
        config=base.config(base.mixed_spec(), load=base.grid.ablation_load,
                           variants=[c.__dict__ for c in entries]),
        command=base.command(figure_id, "each variant at the ablation load, per seed"),
        table=table,
        plot=_bars({label: [m] for label, m in medians.items()}, ["mean TTLT"], "mean TTLT (s)",
                   f"{figure_id}: {title}"),
        ratio_direction="",
        notes=notes,
        headline=f"best {best}",
    )
    return figure, versus


def _best_other(versus: Mapping[str, Band], reference: str, labels: Sequence[str]) -> tuple[str, Band]:
    """The variant of ``labels`` (not the reference) with the smallest median TTLT over the reference's."""
    others = [lb for lb in labels if lb != reference and versus[lb].median is not None]
    best = min(others, key=lambda lb: _inf(versus[lb].median))
    return best, versus[best]


def _ablation_claim(claim: str, paper: str, reference: str, best: str, band: Band, figure_id: str) -> Claim:
    """Rule: the reference is best when every other variant's median TTLT is at least its own (ratio >= 1);
    partly when the best other is within :data:`GATE_TOLERANCE` (seed noise); not otherwise."""
    ratio = band.median
    if ratio is None:
        return Claim(claim, paper, "n/a", "not", "no value", figure_id)
    verdict = "reproduced" if ratio >= 1.0 else ("partly" if ratio >= 1.0 - GATE_TOLERANCE else "not")
    why = (f"best other, {best}, at {_num(ratio)}x {reference}'s TTLT" + ("" if ratio >= 1.0 else
           " (within seed noise)" if verdict == "partly" else ""))
    return Claim(claim, paper, band.cell(), verdict, why, figure_id, f"{best} / {reference}, per seed")


def _predictors_figure(base: _Base, parts: list[Figure]) -> dict[str, list[PolicyRun]]:
    names = ("semantic-knn", "input-length", "buckets", "regressor", "histogram")
    entries = [Contender(name, "gittins", predictor_spec(name, None)) for name in names]
    entries.append(Contender("oracle", "gittins"))
    runs = base.compare(ABLATIONS, entries, base.grid.ablation_load, "fig9")
    figure, versus = _ablation_figure(
        base, "fig9", "Gittins with each output-length predictor", runs, entries,
        paper_says="Fig. 9: the semantic history predictor gives SageSched its best TTLT, ahead of the "
                   "semantic-unaware (input-length) history predictor and a DistilBERT distribution predictor.",
        notes=["buckets: seed 000's embedding classifier over length buckets (for the paper's DistilBERT); "
               "regressor: a point; histogram: one global distribution; oracle: the true length (see gate)."],
        reference="semantic-knn")
    parts.append(figure)
    best, band = _best_other(versus, "semantic-knn", [n for n in names])
    base.ctx.add_claim(_ablation_claim("the semantic history predictor gives the best TTLT", "best",
                                       "semantic-knn", best, band, ABLATIONS))
    return runs


def _costs_figure(base: _Base, parts: list[Figure]) -> None:
    knn = predictor_spec("semantic-knn", None)
    entries = [Contender(f"cost={cost}", f"gittins:cost={cost}", knn)
               for cost in ("resource", "output", "weighted")]
    runs = base.compare(ABLATIONS, entries, base.grid.ablation_load, "fig10")
    figure, versus = _ablation_figure(
        base, "fig10", "Gittins with each cost model", runs, entries,
        paper_says="Fig. 10: the resource cost O²/2 + I·O beats output length alone and I + 2·O.",
        notes=["The mixed workload's long prompts are a tenth of its requests (Spec-Bench summarization, RAG)."],
        reference="cost=resource")
    parts.append(figure)
    best, band = _best_other(versus, "cost=resource", list(runs))
    base.ctx.add_claim(_ablation_claim("the resource cost model gives the best TTLT", "best", "cost=resource",
                                       best, band, ABLATIONS))


def _scheduling_figure(base: _Base, parts: list[Figure]) -> None:
    variants = (("gittins", "gittins"), ("gittins, no refresh", "gittins:refresh=false"), ("mean", "mean"),
                ("gittins, paper's preemption", "gittins:displace=true;victim=index"))
    entries: list[Contender] = []
    for noisy in (False, True):
        params = {"uniform_mix": NOISE_WEIGHT} if noisy else {}
        knn = predictor_spec("semantic-knn", None, **params)
        suffix = " + noise" if noisy else ""
        entries.extend(Contender(f"{label}{suffix}", policy, knn) for label, policy in variants)
    runs = base.compare(ABLATIONS, entries, base.grid.ablation_load, "fig11")
    degradation = {label: Band.of([_ratio(ttlt(n), ttlt(c)) for n, c in
                                   zip(runs[f"{label} + noise"], runs[label], strict=True)])
                   for label, _ in variants}
    figure, versus = _ablation_figure(
        base, "fig11", "Gittins vs no refresh vs Mean, with and without noise", runs, entries,
        paper_says="Fig. 11: Gittins ordering and refreshing both lower TTLT; noise (a uniform distribution "
                   "mixed in 1:4) hurts Gittins least.",
        notes=[f"Noise: a uniform distribution mixed in (weight {NOISE_WEIGHT}). paper's preemption: a smaller "
               "index displaces running work, KV pressure evicts the largest index, victims recomputed."],
        reference="gittins",
        extra={"noise_degradation": {k: v.median for k, v in degradation.items()}})
    parts.append(figure)
    best, band = _best_other(versus, "gittins", ["gittins, no refresh", "mean"])
    base.ctx.add_claim(_ablation_claim("Gittins ordering and refreshing both lower TTLT (vs Mean, vs no refresh)",
                                       "both help", "gittins", best, band, ABLATIONS))
    hurt = {k: v.median for k, v in degradation.items() if k in ("gittins", "gittins, no refresh", "mean")}
    least = min(hurt, key=lambda k: _inf(hurt[k]))
    verdict = "reproduced" if least == "gittins" else (
        "partly" if (hurt["gittins"] or math.inf) <= (hurt[least] or 0.0) + GATE_TOLERANCE else "not")
    base.ctx.add_claim(Claim("noise hurts Gittins least", "least", degradation["gittins"].cell(), verdict,
                             f"TTLT with / without noise: least for {least} ({_num(hurt[least])})", ABLATIONS,
                             "gittins with / without noise, per seed"))


def _sensitivity_figure(base: _Base, parts: list[Figure]) -> None:
    entries = [Contender(f"threshold={t:g}", "gittins", predictor_spec("semantic-knn", None, threshold=t))
               for t in (0.6, 0.7, 0.8, 0.9)]
    knn = predictor_spec("semantic-knn", None)
    entries += [Contender(f"buckets={b}", f"gittins:buckets={b}", knn) for b in (5, 20)]
    entries += [Contender(f"bucket_tokens={b}", f"gittins:bucket_tokens={b}", knn) for b in (50, 200, 800)]
    runs = base.compare(ABLATIONS, entries, base.grid.ablation_load, "fig13")
    changed = _changed_share(base.last_runs["threshold=0.6"], base.last_runs["threshold=0.9"])
    figure, versus = _ablation_figure(
        base, "fig13", "Similarity threshold and Gittins bucket size", runs, entries,
        paper_says="Fig. 13: a similarity threshold of 0.8 and a bucket size of 200 give the best TTLT.",
        notes=["Default: threshold 0.8, 10 cost buckets; bucket_tokens=200 is the paper's size in tokens. "
               f"Thresholds 0.6 and 0.9 changed {_pct(changed)} of the predicted means: few prompts reach cosine "
               "0.6 with another, so kNN falls back to its 20 nearest."],
        reference="threshold=0.8",
        extra={"threshold_changed_share": changed})
    parts.append(figure)
    best, band = _best_other(versus, "threshold=0.8", [f"threshold={t:g}" for t in (0.6, 0.7, 0.9)])
    base.ctx.add_claim(_ablation_claim("similarity threshold 0.8 is best", "0.8", "threshold=0.8", best, band,
                                       ABLATIONS))
    sizes = ["bucket_tokens=200", "bucket_tokens=50", "bucket_tokens=800"]
    size_versus = {lb: Band.of([_ratio(ttlt(r), ttlt(ref)) for r, ref in
                                zip(runs[lb], runs["bucket_tokens=200"], strict=True)]) for lb in sizes}
    best, band = _best_other(size_versus, "bucket_tokens=200", sizes)
    base.ctx.add_claim(_ablation_claim("bucket size 200 is best", "200", "bucket_tokens=200", best, band,
                                       ABLATIONS))


def _changed_share(first: PolicyRun, second: PolicyRun) -> float | None:
    """Share of requests (matched by id) whose predicted mean differs between two runs of one workload."""
    means = {r.request_id: r.predicted_output_tokens() for r in first.requests}
    pairs = [(means[r.request_id], r.predicted_output_tokens()) for r in second.requests if r.request_id in means]
    return sum(abs(a - b) > 1e-9 for a, b in pairs) / len(pairs) if pairs else None


# ---- Fig. 12: overhead per request vs cluster size -------------------------------------------------------
def _overhead_figure(base: _Base) -> Figure:
    knn = predictor_spec("semantic-knn", base.warmup())
    alpaca = f"alpaca-eval:outputs={base.path(ALPACA_FILE)};order=shuffle"
    ours: dict[str, Numbers] = {}
    for instances in base.grid.instances:
        rate = OVERHEAD_RATE_PER_INSTANCE * instances
        count = int(rate * base.grid.overhead_duration_s)
        workload = build_workload(alpaca, rate_per_s=rate, num_requests=count, seed=base.ctx.seed)
        cluster = base.cluster(instances=instances)
        walls: dict[str, float] = {}
        for contender in (Contender("gittins, oracle", "gittins"), Contender("sagesched", "gittins", knn)):
            point = base.point("fig12", workload, contender, {"instances": instances, "rate_per_s": rate}, cluster)
            walls[contender.label] = base.run_each([point])[0].wall_s  # with its predictor calls, not embedding
        n = len(workload)
        ours[str(instances)] = {
            "requests": float(n),
            "schedule_and_simulate_ms": 1e3 * walls["gittins, oracle"] / n,
            "predict_ms": 1e3 * max(walls["sagesched"] - walls["gittins, oracle"], 0.0) / n,
        }
    rows = tuple((k, _num(v["requests"], 0), _num(v["predict_ms"]), _num(v["schedule_and_simulate_ms"]))
                 for k, v in ours.items())
    largest = ours[str(base.grid.instances[-1])]
    per_request = (largest["predict_ms"] or 0.0) + (largest["schedule_and_simulate_ms"] or 0.0)
    predict_one = ours[str(base.grid.instances[0])]["predict_ms"]
    verdict = "reproduced" if per_request <= PAPER_OVERHEAD_MS else "not"
    base.ctx.add_claim(Claim("predicting and scheduling cost ~100 ms a request at 64 nodes, linear growth",
                             "~100 ms", f"{_num(per_request)} ms at {base.grid.instances[-1]}", verdict,
                             "at most the paper's (ours includes simulating the engines)"
                             if verdict == "reproduced" else "ours above the paper's", "fig12"))
    # rule: at most the paper's 0.5 ms is reproduced; at most 10x it partly (ours also counts learning from
    # every finished request and the warm-up corpus's look-ups); more is not
    verdict = ("not" if predict_one is None or predict_one > 10 * PAPER_PREDICT_MS else
               "reproduced" if predict_one <= PAPER_PREDICT_MS else "partly")
    base.ctx.add_claim(Claim("a prediction costs under 0.5 ms a request", "< 0.5 ms", f"{_num(predict_one)} ms",
                             verdict, "look-ups and learning, embeddings cached; partly: within 10x", "fig12"))
    return Figure(
        id="fig12",
        title="Predicting and scheduling overhead per request vs cluster size",
        paper_says="Fig. 12: overhead grows linearly with the cluster; ~100 ms per request at 64 nodes "
                   "(8 requests/s per node, up to 1,000 queued); a prediction takes under 0.5 ms.",
        paper={"overhead_ms_at_64": PAPER_OVERHEAD_MS, "predict_ms": PAPER_PREDICT_MS},
        ours=ours,
        config=base.config(alpaca, rate_per_instance=OVERHEAD_RATE_PER_INSTANCE,
                           duration_s=base.grid.overhead_duration_s, instances=list(base.grid.instances)),
        command=base.command("fig12", "wall time of gittins with oracle lengths and of sagesched on the same "
                             "requests, per instance count, divided by the request count"),
        table=Table(("instances", "requests", "predict (ms/request)", "schedule + simulate (ms/request)"), rows),
        plot=_xy_lines({key: ([float(k) for k in ours], [v[key] for v in ours.values()])
                        for key in ("predict_ms", "schedule_and_simulate_ms")},
                       "instances", "ms per request", "fig12: overhead per request"),
        ratios={"paper/ours at the largest cluster": _ratio(PAPER_OVERHEAD_MS, per_request)},
        ratio_direction="paper / ours (overhead per request; > 1: ours is lower)",
        notes=["predict: the extra wall time with online semantic-knn (look-ups and learning; embeddings "
               "cached); schedule + simulate: the whole simulation's, an upper bound. One process, this machine."],
        headline=f"{_num(per_request)} ms a request at {base.grid.instances[-1]} instances (paper ~100 ms at 64)",
    )


# ---- the sanity gate: true lengths against predicted ones ------------------------------------------------
@dataclass(frozen=True)
class GateSetting:
    """One engine and cost model on which Gittins runs with true and with predicted (semantic-knn) lengths."""

    name: str
    policy: str
    profile: str = PROFILE
    scheduler: SchedulerConfig | None = None
    #: the gate must hold here: the cost model prices exactly what the engine runs out of
    must_hold: bool = False


GATE_SETTINGS = (
    GateSetting("KV-bound, cost=resource (fig7's)", "gittins"),
    GateSetting("KV-bound, cost=output", "gittins:cost=output"),
    GateSetting("slot-bound, cost=resource", "gittins", scheduler=SLOT_BOUND),
    GateSetting("slot-bound, cost=output", "gittins:cost=output", scheduler=SLOT_BOUND, must_hold=True),
    GateSetting("as printed, cost=resource", "gittins", profile=AS_PRINTED_PROFILE),
)


@dataclass
class GateResult:
    """One setting's oracle / predicted mean TTLT per load (one value per seed) and whether the gate holds."""

    setting: GateSetting
    capacity_requests_per_s: float
    ratios: dict[float, list[float | None]]

    def band(self, load: float) -> Band:
        return Band.of(self.ratios[load])

    @property
    def holds(self) -> bool:
        """The median over seeds at most 1 + :data:`GATE_TOLERANCE` at every load."""
        medians = [self.band(load).median for load in self.ratios]
        return all(m is not None and m <= 1.0 + GATE_TOLERANCE for m in medians)

    def document(self) -> dict[str, Any]:
        return {"oracle_over_predicted": {f"{ld:g}": v for ld, v in self.ratios.items()},
                "median": {f"{ld:g}": self.band(ld).median for ld in self.ratios}, "holds": self.holds,
                "must_hold": self.setting.must_hold, "capacity_requests_per_s": self.capacity_requests_per_s}


def _gate(base: _Base, fig9: Mapping[str, list[PolicyRun]]) -> None:
    spec = base.mixed_spec()
    knn = predictor_spec("semantic-knn", None)
    loads = base.grid.side_loads
    results: list[GateResult] = []
    for setting in GATE_SETTINGS:
        cluster = base.cluster(setting.profile, setting.scheduler)
        capacity = base.capacity(spec, cluster)
        entries = [Contender("oracle", setting.policy), Contender("predicted", setting.policy, knn)]
        runs = base.over_load("gate", spec, entries, loads, capacity=capacity, cluster=cluster,
                              columns={"setting": setting.name})
        ratios = {load: [_ratio(ttlt(o), ttlt(p)) for o, p in
                         zip(runs["oracle"][load], runs["predicted"][load], strict=True)] for load in loads}
        results.append(GateResult(setting, capacity.requests_per_s, ratios))
    default = results[0]
    must = [r for r in results if r.setting.must_hold]
    holds_where_it_must = all(r.holds for r in must)
    failing = [r.setting.name for r in results if not r.holds]
    rows = tuple((r.setting.name, *(r.band(ld).cell() for ld in loads), "holds" if r.holds else "fails")
                 for r in results)
    series = {r.setting.name: (list(loads), [r.band(ld).median for ld in loads]) for r in results}
    base.ctx.add_figure(Figure(
        id="gate",
        title="Sanity gate: Gittins with true lengths vs predicted (semantic-knn), mean TTLT",
        paper_says="Implied by Fig. 9 (better predictions, better TTLT); before issue 30 (slipped profile) our "
                   "oracle's TTLT was 1.27x the predicted one's: the gate asks oracle <= predicted.",
        paper={"oracle_over_predicted_at_most": 1.0},
        ours={"settings": {r.setting.name: r.document() for r in results},
              "fig9_oracle_over_semantic_knn": [_ratio(ttlt(o), ttlt(p)) for o, p in
                                                zip(fig9["oracle"], fig9["semantic-knn"], strict=True)]},
        config=base.config(spec, loads=list(loads), tolerance=GATE_TOLERANCE,
                           settings=[{"name": s.name, "policy": s.policy, "profile": s.profile,
                                      "scheduler": dataclasses.asdict(s.scheduler) if s.scheduler else "default",
                                      "must_hold": s.must_hold} for s in GATE_SETTINGS]),
        command=base.command("gate", "gittins with true and predicted lengths per setting, load, seed"),
        table=Table(("engine, cost model", *(f"oracle / predicted TTLT at {ld:g}x" for ld in loads), "gate"),
                    rows),
        plot=_xy_lines(series, "load (fraction of each engine's capacity)", "oracle / predicted mean TTLT",
                       "gate: oracle / predicted (<= 1: the gate holds)"),
        notes=[f"Holds: median oracle / predicted <= {1 + GATE_TOLERANCE:g} at every load (of each engine's "
               "capacity). slot-bound: 16x the KV blocks, 128 sequences; as printed: the slipped alpha1.",
               "Why it fails: true lengths make Gittins exact SJF on its cost model. Where the model prices what "
               "the engine runs out of (slots for O steps: slot-bound, cost=output) the oracle wins; where not "
               "(O²/2 + I·O on slots, or the slip's quadratic prefill) a blurred prediction ranks closer to the "
               "real cost. Not a bug: the must-hold setting holds (tested)."],
        headline=(f"fig7's setting: {'holds' if default.holds else 'fails'}; fails: "
                  + (", ".join(failing) if failing else "none")
                  + f"; where it must hold: {'holds' if holds_where_it_must else 'FAILS'}"),
    ))
    worst = max((r.band(ld) for r in must for ld in loads), key=lambda b: _inf(b.median))
    base.ctx.add_claim(Claim(
        "sanity gate (ours): true lengths at least as good as predicted, oracle / predicted TTLT",
        "<= 1", worst.cell(), "reproduced" if holds_where_it_must else "not",
        f"holds where the cost model prices the bottleneck; fig7's setting "
        f"{'holds' if default.holds else 'fails'}", "gate",
        f"{', '.join(r.setting.name for r in must)}, worst load"))


# ---- untried settings: a warm history, swap preemption ---------------------------------------------------
def _warm(base: _Base, fig7: Runs) -> None:
    """fig7 at the side loads with every predictor warm (the history of :meth:`_Base.warm_history`)."""
    spec = base.mixed_spec()
    capacity = base.capacity(spec, base.cluster())
    warm = base.warm_history()
    entries = [c for c in contenders(warm) if c.predictor is not None]
    runs = base.over_load("warm", spec, entries, base.grid.side_loads, capacity=capacity)
    for label in ("fcfs", "fastserve"):  # they read no prediction: fig7's runs at these loads
        runs[label] = {load: fig7[label][load] for load in base.grid.side_loads}
    curve = _curve(base, runs, "mean TTLT (s)", ttlt, base.grid.side_loads, strict=False)
    cold = _curve(base, fig7, "mean TTLT (s)", ttlt, base.grid.side_loads, strict=False)
    title = "Mean TTLT over load, every predictor with a warm ~10,000-row history"
    figure = curve.figure(
        "warm", title=title,
        paper_says="§3.1: the history holds 10,000 finished requests, augmented with public datasets while it is "
                   "short; Fig. 7 runs with it warm (untested here before: every predictor started cold).",
        paper={"ratio": PAPER_GAIN},
        config=base.config(spec, loads=list(base.grid.side_loads), warm_history=warm,
                           capacity=capacity.as_config()),
        command=base.command("warm", "fig7 with warmup=<warm history> on every predictor"),
        notes=[f"Warm: {WARM_ALPACA_MODELS} other models' AlpacaEval and 32 models' MT-Bench answers (9,805 "
               "rows): other models' lengths for the same prompts, never the served model's. fcfs, fastserve: "
               "fig7's runs. Cold gains: results.json."],
        extra={"cold_largest_gain": cold.ours_document()["gain"]})
    base.ctx.add_figure(_log_figure(figure, curve, title))
    base.ctx.add_claim(_gain_claim(curve, "the same, every predictor with a warm 10,000-row history (untried)",
                                   "warm"))


def _swap(base: _Base, fig7: Runs) -> None:
    """fig7 at the side loads with swap preemption for every policy and CPU space for every victim."""
    spec = base.mixed_spec()
    scheduler = SchedulerConfig(num_cpu_blocks=SWAP_BLOCKS)
    cluster = base.cluster(scheduler=scheduler)
    capacity = base.capacity(spec, base.cluster())
    entries = contenders(None, policy_params="preemption=swap")
    runs = base.over_load("swap", spec, entries, base.grid.side_loads, capacity=capacity, cluster=cluster)
    curve = _curve(base, runs, "mean TTLT (s)", ttlt, base.grid.side_loads, strict=False)
    top = base.grid.side_loads[-1]
    versus = {label: _versus(runs[label][top], fig7[label][top]).median for label in runs}
    title = "Mean TTLT over load, every policy swapping its victims' KV"
    figure = curve.figure(
        "swap", title=title,
        paper_says="§3.3: preemption's overhead is negligible with swap-compute overlap and KV prefetching (the "
                   "paper's baselines and SageSched preempt freely).",
        paper={"ratio": PAPER_GAIN},
        config=base.config(spec, loads=list(base.grid.side_loads), num_cpu_blocks=SWAP_BLOCKS,
                           capacity=capacity.as_config(), contenders=[c.__dict__ for c in entries]),
        command=base.command("swap", "fig7 with preemption=swap on every policy"),
        notes=["Victims' KV to CPU (65,536 blocks) and back at the profile's 1e-4 s a token each way (seed "
               "000's beta), about a recompute's cost. Share swapped: results.json (swapped_share).",
               f"Swap / recompute (fig7) mean TTLT at {top:g}x, medians: "
               + ", ".join(f"{label} {_num(versus[label])}" for label in versus) + "."],
        extra={"swapped_share": {label: {f"{ld:g}": [_swapped_share(r) for r in per_seed]
                                         for ld, per_seed in per_load.items()}
                                 for label, per_load in runs.items()}})
    base.ctx.add_figure(_log_figure(figure, curve, title))
    base.ctx.add_claim(_gain_claim(curve, "the same, every policy swapping instead of recomputing (untried)",
                                   "swap"))


def _swapped_share(run: PolicyRun) -> float | None:
    """Of a run's preemptions, the share that swapped the victim's KV (None: no preemption)."""
    modes = [record.mode for record in run.result.monitor.preemptions]
    return sum(mode is PreemptionMode.SWAP for mode in modes) / len(modes) if modes else None


def _skipped_figure(base: _Base, figure_id: str, reason: str) -> Figure:
    return Figure(
        id=figure_id, title=f"{figure_id} (not run)", paper_says="see the paper", paper={}, ours={},
        config={}, command=base.command(figure_id, "not run"), table=Table(("reason",), ((reason,),)),
        plot=_xy_lines({}, "", "", f"{figure_id}: not run"), notes=[f"Not run: {reason}"],
        headline=f"not run: {reason}",
    )


# ---- plots and formatting --------------------------------------------------------------------------------
def _log_bands(path: Path, curve: LoadCurve, title: str) -> None:
    """:meth:`LoadCurve.plot` on a log axis: median lines, min-max bands, collapses as crosses."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure as MplFigure

    from semsched.experiments.plots import policy_colours
    from semsched.metrics.plots import figure_legend, log_scale

    figure = MplFigure(figsize=(9.0, 4.2), layout="constrained")
    FigureCanvasAgg(figure)
    ax = figure.subplots()
    colours = policy_colours(list(curve.values))
    for policy in curve.values:
        bands = [(ld, curve.band(policy, ld)) for ld in curve.loads]
        points = [(ld, b.median, b.low, b.high) for ld, b in bands if b.median is not None]
        if not points:
            continue
        xs, med, low, high = (list(column) for column in zip(*points, strict=True))
        ax.plot(xs, med, marker="o", label=policy, color=colours[policy])
        ax.fill_between(xs, low, high, color=colours[policy], alpha=0.18, linewidth=0)
    for collapse in curve.collapses():
        if collapse.value is not None:
            ax.plot([collapse.load], [collapse.value], marker="x", markersize=10, color=colours[collapse.policy])
    ax.set_xlabel(curve.xlabel)
    ax.set_ylabel(curve.metric)
    ax.set_title(title, fontsize="medium")
    log_scale(ax)
    figure_legend(figure, [ax])
    ax.grid(axis="y", alpha=0.3)
    figure.savefig(path, format="png", dpi=110)
    figure.clear()


def _ratio_bars(path: Path, bars: Sequence[tuple[str, float | None]], xlabel: str, title: str) -> None:
    """One horizontal bar per variant (top to bottom in the table's order), a line at 1 (the default)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure as MplFigure

    figure = MplFigure(figsize=(9.0, 0.28 * len(bars) + 1.2), layout="constrained")
    FigureCanvasAgg(figure)
    ax = figure.subplots()
    ys = list(range(len(bars)))[::-1]
    ax.barh(ys, [math.nan if v is None else v for _, v in bars], color="#1f77b4")
    ax.set_yticks(ys, [label for label, _ in bars], fontsize="small")
    ax.axvline(1.0, color="black", linewidth=0.8)
    values = [v for _, v in bars if v is not None]
    if values:
        ax.set_xlim(min(0.8, min(values) - 0.02), max(1.2, max(values) + 0.02))
    ax.set_xlabel(xlabel)
    ax.set_title(title, fontsize="medium")
    figure.savefig(path, format="png", dpi=110)
    figure.clear()


def _xy_lines(series: Mapping[str, tuple[Sequence[float], Sequence[float | None]]], xlabel: str, ylabel: str,
              title: str, *, log: bool = False) -> Callable[[Path], None]:
    def draw(path: Path) -> None:
        line_chart(path, series, xlabel=xlabel, ylabel=ylabel, title=title, log=log)

    return draw


def _bars(series: Mapping[str, Sequence[float | None]], groups: Sequence[str], ylabel: str, title: str
          ) -> Callable[[Path], None]:
    def draw(path: Path) -> None:
        bar_chart(path, groups, series, ylabel=ylabel, title=title)

    return draw


def _inf(value: float | None) -> float:
    return math.inf if value is None else value
