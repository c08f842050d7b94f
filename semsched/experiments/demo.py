"""The demo: every policy on the embedded default workload (fitted from the Azure conversation trace, four
service tiers with seed 003's SLOs) at ~90 % load on the A100/Qwen1.5-4B profile. ``semsched demo`` runs it."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

from semsched.core.tiers import DEFAULT_TIERS
from semsched.experiments.framework import ExperimentContext, Figure, Table
from semsched.experiments.plots import bar_chart
from semsched.experiments.registry import Experiment, register_experiment
from semsched.metrics import MISSING, ClassSummary, Summary, TimeUnit, time_unit_for
from semsched.metrics.plots import NO_SLO, NOT_AVAILABLE, ZERO
from semsched.metrics.units import with_significant_digits
from semsched.sim.runner import DEFAULT_PROFILE, ClusterSpec
from semsched.workloads import build_workload

POLICIES = ("fcfs", "priority", "priority-preempt", "sjf", "srpt", "edf")
BASELINE = "fcfs"
WORKLOAD = "azure-conv"
RATE_PER_S = 4.0
DURATION_S = 600.0
QUICK_DURATION_S = 300.0
_NO_PAPER = "No document: the demo compares semsched's baseline policies on one workload; ratios are against fcfs."


@register_experiment
class Demo(Experiment):
    name = "demo"
    summary = "every baseline policy on the embedded Azure-conversation workload with four tiers at ~90 % load"

    def run(self, ctx: ExperimentContext) -> None:
        duration_s = QUICK_DURATION_S if ctx.quick else DURATION_S
        workload = build_workload(WORKLOAD, rate_per_s=RATE_PER_S, duration_s=duration_s, seed=ctx.seed)
        cluster = ClusterSpec()
        runs = ctx.run_policies("comparison", workload, POLICIES, cluster)
        summaries = {policy: run.summary for policy, run in runs.items()}
        config = {
            "workload": WORKLOAD,
            "num_requests": len(workload),
            "rate_per_s": RATE_PER_S,
            "duration_s": duration_s,
            "seed": ctx.seed,
            "profile": DEFAULT_PROFILE,
            "instances": cluster.num_instances,
            "policies": list(POLICIES),
            "tiers": {
                t.name: {
                    "priority": t.priority,
                    "ttft_slo_s": t.ttft_slo_s,
                    "tpot_slo_s": t.tpot_slo_s,
                    "e2e_slo_s": t.e2e_slo_s,
                }
                for t in DEFAULT_TIERS
            },
        }
        command = (
            f"semsched simulate --policy {','.join(POLICIES)} --workload {WORKLOAD} --rate {RATE_PER_S:g} "
            f"--duration {duration_s:g} --seed {ctx.seed} --profile {DEFAULT_PROFILE}"
        )
        ctx.add_figure(_overall_figure(summaries, config, command, quick=ctx.quick))
        ctx.add_figure(_tier_figure(summaries, config, command, quick=ctx.quick))


QUICK_NOTE = (
    "The quick grid ({requests:,} requests, {duration_s:g} s) is too small to rank the policies: their "
    "differences here are within what another seed or a longer run changes (the full run can order them "
    "otherwise). Run without --quick to rank them."
)


def _overall_figure(
    summaries: Mapping[str, Summary], config: Mapping[str, object], command: str, *, quick: bool
) -> Figure:
    ours: dict[str, dict[str, float | int | None]] = {}
    for policy, summary in summaries.items():
        overall = summary.overall
        ours[policy] = {
            "num_requests": overall.num_requests,
            "num_finished": overall.num_finished,
            "num_rejected": overall.num_rejected,
            "ttft_p90_s": overall.metric("ttft_p90"),
            "e2e_mean_s": overall.metric("e2e_mean"),
            "e2e_p90_s": overall.metric("e2e_p90"),
            "slo_attainment": overall.metric("slo_attainment"),
            "goodput_requests_per_s": overall.metric("goodput"),
            "num_preemptions": overall.num_preemptions,
        }
    time_keys = ("ttft_p90_s", "e2e_mean_s", "e2e_p90_s")
    unit = _unit(ours[p][key] for p in ours for key in time_keys)  # one unit for the table's latencies
    units = {key: with_significant_digits(unit, (_float(ours[p][key]) for p in ours)) for key in time_keys}
    columns = (
        "policy",
        "finished",
        "rejected",
        f"TTFT p90 ({units['ttft_p90_s'].symbol})",
        f"E2E mean ({units['e2e_mean_s'].symbol})",
        f"E2E p90 ({units['e2e_p90_s'].symbol})",
        "SLO met",
        "goodput (req/s)",
        "preemptions",
    )
    rows = [
        (
            policy,
            str(row["num_finished"]),
            str(row["num_rejected"]),
            *(units[key].format(_float(row[key])) for key in time_keys),
            _percent(row["slo_attainment"]),
            _number(row["goodput_requests_per_s"]),
            str(row["num_preemptions"]),
        )
        for policy, row in ours.items()
    ]
    ratios = {
        f"E2E p90, {BASELINE} / {policy}": _ratio(ours[BASELINE]["e2e_p90_s"], ours[policy]["e2e_p90_s"])
        for policy in summaries
        if policy != BASELINE
    }
    best = max(summaries, key=lambda p: ours[p]["slo_attainment"] or 0.0)
    headline = (
        f"SLO met by {_percent(ours[best]['slo_attainment'])} of requests under {best} "
        f"({_percent(ours[BASELINE]['slo_attainment'])} under {BASELINE})"
    )
    notes = [
        "A request meets its SLO when it finishes and meets every target its tier has (TTFT, TPOT, E2E); "
        "rejected and unfinished requests count as misses.",
    ]
    if quick:
        headline = f"quick grid, too small to rank: SLO met by {_spread(ours, 'slo_attainment')}"
        notes.append(_quick_note(config))
    return Figure(
        id="comparison",
        title="all requests, every policy",
        paper_says=_NO_PAPER,
        paper={},
        ours=ours,
        config=config,
        command=command,
        table=Table(columns, tuple(rows)),
        plot=_bars(summaries, None, "e2e_p90", "E2E p90 (s)", "E2E latency p90: all requests, then each tier",
                   log=True, with_all=True),
        ratios=ratios,
        ratio_direction="baseline / ours: above 1, the policy beats fcfs",
        notes=tuple(notes),
        headline=headline,
    )


def _tier_figure(
    summaries: Mapping[str, Summary], config: Mapping[str, object], command: str, *, quick: bool
) -> Figure:
    priorities = sorted({p for s in summaries.values() for p in s.by_priority})
    labels = [_tier_label(summaries, p) for p in priorities]
    ours: dict[str, dict[str, dict[str, float | None]]] = {}
    for policy, summary in summaries.items():
        per_tier: dict[str, dict[str, float | None]] = {}
        for priority, label in zip(priorities, labels, strict=True):
            cls = summary.class_summary(priority)
            per_tier[label] = {
                "slo_attainment": _metric(cls, "slo_attainment"),
                "ttft_p90_s": _metric(cls, "ttft_p90"),
                "e2e_p90_s": _metric(cls, "e2e_p90"),
            }
        ours[policy] = per_tier
    ttft = _unit(ours[p][label]["ttft_p90_s"] for p in ours for label in labels)
    columns = (
        "policy",
        *(f"{label} SLO met" for label in labels),
        *(f"{label} TTFT p90 ({ttft.symbol})" for label in labels),
    )
    rows = [
        (
            policy,
            *(_percent(per_tier[label]["slo_attainment"]) for label in labels),
            *(ttft.format(per_tier[label]["ttft_p90_s"]) for label in labels),
        )
        for policy, per_tier in ours.items()
    ]
    top = labels[1] if len(labels) > 1 else labels[0]  # PREMIUM: the most important tier with SLO targets
    ratios = {
        f"{top} SLO met, {policy} / {BASELINE}": _ratio(
            ours[policy][top]["slo_attainment"], ours[BASELINE][top]["slo_attainment"]
        )
        for policy in summaries
        if policy != BASELINE
    }
    best = max(summaries, key=lambda p: ours[p][top]["slo_attainment"] or 0.0)
    headline = (
        f"{top} SLO met: {_percent(ours[best][top]['slo_attainment'])} under {best}, "
        f"{_percent(ours[BASELINE][top]['slo_attainment'])} under {BASELINE}"
    )
    notes = ["A tier with no SLO target (SYSTEM) shows no attainment ('—' here, 'no SLO' in the plot), never "
             "100 %."]
    if quick:
        per_policy = {policy: per_tier[top] for policy, per_tier in ours.items()}
        headline = f"quick grid, too small to rank: {top} SLO met by {_spread(per_policy, 'slo_attainment')}"
        notes.append(_quick_note(config))
    return Figure(
        id="tiers",
        title="SLO attainment and TTFT p90 per service tier",
        paper_says=_NO_PAPER,
        paper={},
        ours=ours,
        config=config,
        command=command,
        table=Table(columns, tuple(rows)),
        plot=_bars(
            summaries,
            priorities,
            "slo_attainment",
            "requests meeting their SLO (fraction)",
            "SLO attainment by tier",
            zero="0 %",
            missing=NO_SLO,
        ),
        ratios=ratios,
        ratio_direction="ours / baseline: above 1, the policy beats fcfs",
        notes=tuple(notes),
        headline=headline,
    )


def _bars(
    summaries: Mapping[str, Summary],
    priorities: Sequence[int] | None,
    metric: str,
    ylabel: str,
    title: str,
    *,
    log: bool = False,
    with_all: bool = False,
    zero: str = ZERO,
    missing: str = NOT_AVAILABLE,
) -> Callable[[Path], None]:
    """Bars of ``metric`` per tier (``priorities``, default every one), after a group of all requests when
    ``with_all``."""
    tiers = sorted({p for s in summaries.values() for p in s.by_priority}) if priorities is None else priorities
    chosen: list[int | None] = [*([None] if with_all else []), *tiers]
    labels = ["all requests" if p is None else _tier_label(summaries, p) for p in chosen]

    def draw(path: Path) -> None:
        series = {policy: [_metric(s.class_summary(p), metric) for p in chosen] for policy, s in summaries.items()}
        bar_chart(path, labels, series, ylabel=ylabel, title=title, log=log, zero=zero, missing=missing)

    return draw


def _spread(ours: Mapping[str, Mapping[str, object]], key: str) -> str:
    """``key``'s lowest and highest value over the policies, and fcfs's: numbers, no winner."""
    values = [float(v) for row in ours.values() if isinstance(v := row[key], int | float)]
    if not values:
        return MISSING
    low, high, baseline = _percent(min(values)), _percent(max(values)), _percent(_baseline(ours, key))
    return f"{low}-{high} across the policies ({baseline} under {BASELINE})"


def _baseline(ours: Mapping[str, Mapping[str, object]], key: str) -> float | None:
    value = ours[BASELINE][key]
    return float(value) if isinstance(value, int | float) else None


def _quick_note(config: Mapping[str, object]) -> str:
    return QUICK_NOTE.format(requests=config["num_requests"], duration_s=config["duration_s"])


def _tier_label(summaries: Mapping[str, Summary], priority: int) -> str:
    names = sorted(
        {t for s in summaries.values() if priority in s.by_priority for t in s.by_priority[priority].tiers}
    )
    return "/".join(names) or f"p{priority}"


def _metric(summary: ClassSummary | None, name: str) -> float | None:
    return None if summary is None else summary.metric(name)


def _ratio(numerator: float | int | None, denominator: float | int | None) -> float | None:
    if numerator is None or denominator is None or denominator == 0:
        return None
    return float(numerator) / float(denominator)


def _unit(values_s: Iterable[float | int | None]) -> TimeUnit:
    return time_unit_for(_float(v) for v in values_s)


def _float(value: float | int | None) -> float | None:
    return None if value is None else float(value)


def _percent(value: float | int | None) -> str:
    return MISSING if value is None else f"{float(value):.1%}"


def _number(value: float | int | None) -> str:
    return MISSING if value is None else f"{float(value):.3g}"
