"""The report of ``semsched fidelity``: real-vs-simulated comparisons, the per-policy error analysis, and how
they are shown (a rich table, plain analysis lines) and written (``fidelity.json``, ``requests.csv``,
``steps.csv``)."""

from __future__ import annotations

import csv
import dataclasses
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from semsched.calibrate.fidelity_analysis import WINDOW_S, ErrorSource, StepClassFit, StepTimes
from semsched.calibrate.replay import ReplayResult, StepRecord
from semsched.core.errors import SemschedError
from semsched.core.request import Request
from semsched.metrics.request_metrics import request_metrics

TARGET_MEAN_ERROR = 0.10
"""The goal: every policy's TTFT and E2E means within 10 % of the real engine's."""
METRICS: tuple[tuple[str, str], ...] = (("ttft", "mean"), ("ttft", "p90"), ("e2e", "mean"), ("e2e", "p90"))

SENSITIVITY_FACTOR = 1.05
"""The report says how much the simulated latencies move when every step is this much longer."""


class FidelityError(SemschedError):
    """A fidelity setting, trace slice, model or earlier run's file is unusable; the message names which."""


@dataclass(frozen=True)
class MetricComparison:
    """One statistic (``ttft_mean``, ``e2e_p90``, ...) in seconds, real and simulated."""

    metric: str
    real_s: float
    sim_s: float
    #: the statistic in each replay when there were several (``real_s`` is their mean)
    real_repeats_s: tuple[float, ...] = ()

    @property
    def error(self) -> float:
        """``(sim - real) / real``: negative when the simulator is faster than the engine."""
        if self.real_s == 0:
            return 0.0 if self.sim_s == 0 else math.inf
        return (self.sim_s - self.real_s) / self.real_s

    @property
    def repeat_spread(self) -> float:
        """(slowest - fastest) / mean over the replays: how much the real engine disagreed with itself."""
        if len(self.real_repeats_s) < 2 or self.real_s == 0:
            return 0.0
        return (max(self.real_repeats_s) - min(self.real_repeats_s)) / self.real_s

    @property
    def within_repeats(self) -> bool:
        """Whether the simulated value lies between the fastest and the slowest replay."""
        return len(self.real_repeats_s) >= 2 and min(self.real_repeats_s) <= self.sim_s <= max(self.real_repeats_s)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"real_s": self.real_s, "sim_s": self.sim_s, "error": self.error}
        if self.real_repeats_s:
            data["real_repeats_s"] = list(self.real_repeats_s)
        return data


def find_metric(metrics: Sequence[MetricComparison], name: str) -> MetricComparison:
    """The comparison of statistic ``name`` (``ttft_mean``, ...); KeyError if there is none."""
    for comparison in metrics:
        if comparison.metric == name:
            return comparison
    raise KeyError(name)


def statistic(values: Sequence[float] | np.ndarray, name: str) -> float:
    """``mean`` or ``p90`` (numpy's linear interpolation, as :mod:`semsched.metrics` uses)."""
    array = np.asarray(values, dtype=np.float64)
    if array.size == 0:
        raise ValueError("statistic: no values")
    if name == "mean":
        return float(array.mean())
    if name == "p90":
        return float(np.percentile(array, 90.0))
    raise ValueError(f"statistic: unknown {name!r}; expected mean or p90")


def compare(
    real: Mapping[str, Sequence[float]], sim: Mapping[str, Sequence[float]]
) -> tuple[MetricComparison, ...]:
    """Every statistic of :data:`METRICS`; ``real``/``sim`` map ``"ttft"``/``"e2e"`` to per-request seconds."""
    return tuple(
        MetricComparison(f"{quantity}_{stat}", statistic(real[quantity], stat), statistic(sim[quantity], stat))
        for quantity, stat in METRICS
    )


def compare_repeats(
    reals: Sequence[Mapping[str, Sequence[float]]], sim: Mapping[str, Sequence[float]]
) -> tuple[MetricComparison, ...]:
    """:func:`compare` against several replays: each statistic's real side is its mean over the replays, and
    the per-replay values are kept (``real_repeats_s``). One replay gives exactly :func:`compare`.

    The mean, because the simulator predicts what the engine does on average, and the mean of a few replays
    estimates that with less scatter than their median (for normal noise the median of three varies 1.35x as
    much); the fidelity runs before this used the median (three runs re-read with the mean: worst errors 9.3,
    8.4 and 11.1 % instead of 9.7, 13.7 and 19.6 %)."""
    if not reals:
        raise ValueError("compare_repeats: no replays")
    if len(reals) == 1:
        return compare(reals[0], sim)
    runs = [compare(real, sim) for real in reals]
    return tuple(
        MetricComparison(
            first.metric,
            float(np.mean([run[i].real_s for run in runs])),
            first.sim_s,
            tuple(run[i].real_s for run in runs),
        )
        for i, first in enumerate(runs[0])
    )


@dataclass(frozen=True)
class ReplaySpeed:
    """The machine's speed during one replay against the profile (``machine_speed``): the lowest, highest and
    average window factor."""

    low: float
    high: float
    mean: float

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class GivenSpeed:
    """The simulator run once per replay on the machine's speed while that replay ran, against that replay.

    ``metrics``: each statistic's real side is its mean over the replays (as the main comparison) and its
    simulated side the mean over the per-replay simulations; ``per_replay`` has each replay's own comparison.
    What is left is the profile's error on every step that is not a settled decode step, the overheads, and the
    scheduling, with the machine's drift taken out."""

    window_s: float
    metrics: tuple[MetricComparison, ...]
    per_replay: tuple[tuple[MetricComparison, ...], ...]
    #: per replay; None when it had no settled decode-only steps to measure the speed with (the simulator then
    #: ran it at the profile's speed)
    speeds: tuple[ReplaySpeed | None, ...]

    @property
    def measured(self) -> list[ReplaySpeed]:
        return [speed for speed in self.speeds if speed is not None]

    @classmethod
    def of(
        cls,
        window_s: float,
        per_replay: Sequence[tuple[MetricComparison, ...]],
        speeds: Sequence[ReplaySpeed | None],
    ) -> GivenSpeed:
        if not per_replay or len(per_replay) != len(speeds):
            raise ValueError("GivenSpeed: give one comparison and one speed per replay")
        metrics = tuple(
            MetricComparison(
                first.metric,
                float(np.mean([run[i].real_s for run in per_replay])),
                float(np.mean([run[i].sim_s for run in per_replay])),
                tuple(run[i].real_s for run in per_replay) if len(per_replay) > 1 else (),
            )
            for i, first in enumerate(per_replay[0])
        )
        return cls(window_s, metrics, tuple(per_replay), tuple(speeds))

    def metric(self, name: str) -> MetricComparison:
        return find_metric(self.metrics, name)

    def to_dict(self) -> dict[str, Any]:
        return {
            "window_s": self.window_s,
            "metrics": {m.metric: m.to_dict() for m in self.metrics},
            "per_replay": [{m.metric: m.to_dict() for m in run} for run in self.per_replay],
            "speeds": [None if speed is None else speed.to_dict() for speed in self.speeds],
        }


@dataclass(frozen=True)
class ErrorAnalysis:
    """Why real and simulated latencies differ, for one policy."""

    step_times: StepTimes
    timing: str
    step_fit_mape: float
    step_classes: tuple[StepClassFit, ...]
    sources: tuple[ErrorSource, ...]
    real_steps: int
    sim_steps: int
    real_preemptions: int
    sim_preemptions: int
    #: real engine time over what the profile charges for the same batches
    engine_time_ratio: float = 1.0
    #: the engine-speed probe around the replay over the probe when profiled (None: no probe to compare)
    speed_drift: float | None = None
    #: the simulator with the profile scaled by ``engine_time_ratio``, against the real engine
    corrected: tuple[MetricComparison, ...] = ()
    #: per step class, real cycle time over the profile's; and the simulator with the profile scaled so
    class_factors: dict[str, float] = field(default_factory=dict)
    class_corrected: tuple[MetricComparison, ...] = ()
    #: real over class-corrected engine time per busy window of the replay: the machine's speed changing
    window_ratios: tuple[float, ...] = ()
    #: relative change of each simulated statistic when every step is SENSITIVITY_FACTOR times longer
    sensitivity: dict[str, float] = field(default_factory=dict)
    #: which of the policy's replays (0-based) this analysis is of: the one with the median mean E2E
    replay_index: int = 0
    #: decode-only steps right after a batch change vs the other decode-only steps (batch_change_fits)
    batch_changes: tuple[StepClassFit, ...] = ()

    @property
    def dominant(self) -> ErrorSource:
        return self.sources[0]

    def to_dict(self) -> dict[str, Any]:
        return {
            "step_times_ms": dataclasses.asdict(self.step_times) | {"cycle_ms": self.step_times.cycle_ms},
            "profiled_timing": self.timing,
            "step_fit_mape": self.step_fit_mape,
            "step_classes": [c.to_dict() for c in self.step_classes],
            "sources": [s.to_dict() for s in self.sources],
            "real_steps": self.real_steps,
            "sim_steps": self.sim_steps,
            "real_preemptions": self.real_preemptions,
            "sim_preemptions": self.sim_preemptions,
            "engine_time_ratio": self.engine_time_ratio,
            "speed_drift": self.speed_drift,
            "corrected": {m.metric: m.to_dict() for m in self.corrected},
            "class_factors": self.class_factors,
            "class_corrected": {m.metric: m.to_dict() for m in self.class_corrected},
            "window_ratios": list(self.window_ratios),
            "sensitivity": {"step_time_factor": SENSITIVITY_FACTOR, **self.sensitivity},
            "replay_index": self.replay_index,
            "batch_changes": [c.to_dict() for c in self.batch_changes],
        }


@dataclass(frozen=True)
class PolicyFidelity:
    policy: str
    metrics: tuple[MetricComparison, ...]
    by_priority: dict[int, tuple[MetricComparison, ...]]
    analysis: ErrorAnalysis
    #: the replay the analysis is of (``analysis.replay_index`` in ``replays``)
    real: ReplayResult
    sim_requests: list[Request]
    #: every replay of the policy, in the order they ran (empty: only ``real``)
    replays: tuple[ReplayResult, ...] = ()
    #: the simulator on the machine's speed during each replay (None: not simulated)
    given_speed: GivenSpeed | None = None

    @property
    def all_replays(self) -> tuple[ReplayResult, ...]:
        return self.replays or (self.real,)

    def metric(self, name: str) -> MetricComparison:
        return find_metric(self.metrics, name)

    @property
    def num_complete(self) -> int:
        """Requests that finished with exactly the requested number of tokens, in the replay with fewest."""
        wanted = {r.request_id: r.output_tokens for r in self.sim_requests}
        return min(
            sum(r.finish_s is not None and r.num_output_tokens == wanted.get(r.request_id) for r in rs.requests)
            for rs in self.all_replays
        )


@dataclass(frozen=True)
class FidelityReport:
    meta: dict[str, Any]
    policies: tuple[PolicyFidelity, ...]

    @property
    def worst_mean_error(self) -> float:
        errors = [abs(p.metric(f"{q}_mean").error) for p in self.policies for q in ("ttft", "e2e")]
        return max(errors) if errors else 0.0

    @property
    def worst_given_speed_error(self) -> float | None:
        """The worst mean error of the simulations on the machine's measured speed; None if there were none."""
        errors = [
            abs(p.given_speed.metric(f"{q}_mean").error)
            for p in self.policies
            if p.given_speed is not None
            for q in ("ttft", "e2e")
        ]
        return max(errors) if errors else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "meta": self.meta,
            "target_mean_error": TARGET_MEAN_ERROR,
            "worst_mean_error": self.worst_mean_error,
            "worst_given_speed_error": self.worst_given_speed_error,
            "policies": {
                p.policy: {
                    "metrics": {m.metric: m.to_dict() for m in p.metrics},
                    "by_priority": {
                        str(priority): {m.metric: m.to_dict() for m in metrics}
                        for priority, metrics in p.by_priority.items()
                    },
                    "num_requests": len(p.sim_requests),
                    "num_complete": p.num_complete,
                    "replays": [
                        {
                            "startup_s": r.startup_s,
                            "warmup_s": r.warmup_s,
                            "replay_s": r.replay_s,
                            "vllm_version": r.vllm_version,
                            "num_gpu_blocks": r.num_gpu_blocks,
                            "probe_before_s": r.probe_before_s,
                            "probe_after_s": r.probe_after_s,
                        }
                        for r in p.all_replays
                    ],
                    "analysis": p.analysis.to_dict(),
                    "given_machine_speed": None if p.given_speed is None else p.given_speed.to_dict(),
                }
                for p in self.policies
            },
        }


# ---- output -------------------------------------------------------------------------------------------------
REQUEST_COLUMNS = (
    "policy", "repeat", "request_id", "tier", "priority", "arrival_s", "prompt_tokens", "output_tokens",
    "real_ttft_s", "sim_ttft_s", "real_e2e_s", "sim_e2e_s", "real_output_tokens", "real_preemptions",
    "sim_preemptions", "real_cached_tokens", "real_loop_delay_s",
)  # fmt: skip


def request_rows(policy: PolicyFidelity) -> list[dict[str, Any]]:
    """One row per request and replay (``repeat``, 0-based): both sides' latencies and what the replay saw."""
    rows = []
    for repeat, replay in enumerate(policy.all_replays):
        rows.extend(_request_rows(policy, repeat, replay))
    return rows


def _request_rows(policy: PolicyFidelity, repeat: int, replay: ReplayResult) -> list[dict[str, Any]]:
    real = {r.request_id: r for r in replay.requests}
    rows = []
    for request in policy.sim_requests:
        metrics = request_metrics(request)
        record = real.get(request.request_id)
        rows.append(
            {
                "policy": policy.policy,
                "repeat": repeat,
                "request_id": request.request_id,
                "tier": request.tier,
                "priority": request.priority,
                "arrival_s": request.arrival_time_s,
                "prompt_tokens": request.prompt_tokens,
                "output_tokens": request.output_tokens,
                "real_ttft_s": None if record is None else record.ttft_s,
                "sim_ttft_s": metrics.ttft_s,
                "real_e2e_s": None if record is None else record.e2e_s,
                "sim_e2e_s": metrics.e2e_s,
                "real_output_tokens": None if record is None else record.num_output_tokens,
                "real_preemptions": None if record is None else record.num_preemptions,
                "sim_preemptions": request.num_preemptions,
                "real_cached_tokens": None if record is None else record.num_cached_tokens,
                "real_loop_delay_s": None if record is None else record.loop_delay_s,
            }
        )
    return rows


STEP_COLUMNS = (
    "policy", "repeat", "start_s", "duration_s", "schedule_s", "model_s", "update_s", "output_s", "gap_before_s",
    "prefill_chunks", "num_decode", "decode_context_tokens", "num_preempted", "cached_tokens",
)  # fmt: skip


def write_report(report: FidelityReport, out: Path) -> list[Path]:
    """``fidelity.json`` (the report), ``requests.csv`` (per request and replay, both sides) and ``steps.csv``
    (every real step of every replay); returns the paths."""
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "fidelity.json", out / "requests.csv", out / "steps.csv"]
    paths[0].write_text(json.dumps(report.to_dict(), indent=2, default=str) + "\n", encoding="utf-8")
    with paths[1].open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=REQUEST_COLUMNS)
        writer.writeheader()
        for policy in report.policies:
            writer.writerows(request_rows(policy))
    with paths[2].open("w", newline="", encoding="utf-8") as handle:
        step_writer = csv.writer(handle)
        step_writer.writerow(STEP_COLUMNS)
        for policy in report.policies:
            for repeat, s in ((i, s) for i, replay in enumerate(policy.all_replays) for s in replay.steps):
                chunks = " ".join(f"{lq}:{lkv}" for lq, lkv in s.prefill)
                step_writer.writerow(
                    [policy.policy, repeat, f"{s.start_s:.6f}", f"{s.duration_s:.6f}", f"{s.schedule_s:.6f}",
                     f"{s.model_s:.6f}", f"{s.update_s:.6f}", f"{s.output_s:.6f}", f"{s.gap_before_s:.6f}",
                     chunks, s.num_decode, s.decode_context_tokens, s.num_preempted, s.cached_tokens]
                )  # fmt: skip
    return paths


def read_steps_csv(path: Path) -> dict[tuple[str, int], list[StepRecord]]:
    """The real steps of a ``steps.csv`` that :func:`write_report` wrote, per (policy, repeat), in order."""
    steps: dict[tuple[str, int], list[StepRecord]] = {}
    with path.open(newline="", encoding="utf-8") as handle:
        for line, row in enumerate(csv.DictReader(handle), start=2):
            try:
                record = StepRecord(
                    start_s=float(row["start_s"]),
                    duration_s=float(row["duration_s"]),
                    schedule_s=float(row["schedule_s"]),
                    model_s=float(row["model_s"]),
                    update_s=float(row["update_s"]),
                    output_s=float(row["output_s"]),
                    gap_before_s=float(row["gap_before_s"]),
                    prefill=tuple(
                        (int(query), int(context))
                        for query, context in (chunk.split(":") for chunk in row["prefill_chunks"].split())
                    ),
                    num_decode=int(row["num_decode"]),
                    decode_context_tokens=int(row["decode_context_tokens"]),
                    num_preempted=int(row["num_preempted"]),
                    cached_tokens=int(row["cached_tokens"]),
                )
                key = (row["policy"], int(row["repeat"]))
            except (KeyError, TypeError, ValueError) as error:
                raise FidelityError(f"{path}:{line}: not a steps.csv row ({error})") from error
            steps.setdefault(key, []).append(record)
    return steps


def read_real_latencies(path: Path) -> dict[tuple[str, int], dict[str, list[float]]]:
    """The real TTFT and E2E of the requests that finished, per (policy, repeat), from a ``requests.csv`` that
    :func:`write_report` wrote (as ``real_latencies`` gives them for a replay)."""
    latencies: dict[tuple[str, int], dict[str, list[float]]] = {}
    with path.open(newline="", encoding="utf-8") as handle:
        for line, row in enumerate(csv.DictReader(handle), start=2):
            try:
                found = latencies.setdefault((row["policy"], int(row["repeat"])), {"ttft": [], "e2e": []})
                if row["real_e2e_s"]:
                    found["ttft"].append(float(row["real_ttft_s"] or 0.0))
                    found["e2e"].append(float(row["real_e2e_s"]))
            except (KeyError, ValueError) as error:
                raise FidelityError(f"{path}:{line}: not a requests.csv row ({error})") from error
    return latencies


# ---- presentation -------------------------------------------------------------------------------------------
def fidelity_table(report: FidelityReport) -> Any:
    """A rich table: policy x metric, real and simulated seconds and the relative error; with several replays per
    policy, the real column is their mean and a column gives the fastest and slowest replay."""
    from rich.table import Table

    repeated = any(m.real_repeats_s for p in report.policies for m in p.metrics)
    given = all(p.given_speed is not None for p in report.policies)
    table = Table(title="real vLLM vs simulator", title_justify="left")
    columns = [("policy", "left"), ("metric", "left"), ("real (s)", "right")]
    if repeated:
        columns.append(("real range (s)", "right"))
    columns += [("sim (s)", "right"), ("error", "right")]
    if given:
        columns += [("sim, machine speed (s)", "right"), ("error", "right")]
    for name, justify in columns:
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for index, policy in enumerate(report.policies):
        for comparison in policy.metrics:
            cells = [
                policy.policy if comparison is policy.metrics[0] else "",
                comparison.metric.replace("_", " "),
                f"{comparison.real_s:.3f}",
            ]
            if repeated:
                values = comparison.real_repeats_s
                cells.append(f"{min(values):.3f}-{max(values):.3f}" if values else "")
            cells += [f"{comparison.sim_s:.3f}", _error_cell(comparison)]
            if given and policy.given_speed is not None:
                conditioned = policy.given_speed.metric(comparison.metric)
                cells += [f"{conditioned.sim_s:.3f}", _error_cell(conditioned)]
            table.add_row(
                *cells, end_section=comparison is policy.metrics[-1] and index < len(report.policies) - 1
            )
    return table


def _error_cell(comparison: MetricComparison) -> str:
    """The relative error, red for a mean that misses the target."""
    missed = comparison.metric.endswith("_mean") and abs(comparison.error) > TARGET_MEAN_ERROR
    return f"[red]{comparison.error:+.1%}[/]" if missed else f"{comparison.error:+.1%}"


def analysis_lines(report: FidelityReport) -> list[str]:
    """The error analysis as plain lines: per policy, where step time goes, the sources, the counterfactuals,
    and what dominates; then the verdict on the target."""
    lines = [_machine_line(report.meta)] if "load_average_before" in report.meta else []
    if report.meta.get("full_profile_saturation_rate_per_s"):
        lines.append(_load_line(report.meta))
    overheads = report.meta.get("profile", {}).get("overheads")
    if overheads:
        lines.append(_overheads_line(overheads))
    for policy in report.policies:
        lines.extend(_policy_lines(policy))
    worst = report.worst_mean_error
    verdict = "met" if worst <= TARGET_MEAN_ERROR else "NOT met"
    lines.append(f"target |error of every mean| <= {TARGET_MEAN_ERROR:.0%}: {verdict} (worst {worst:.1%})")
    given = report.worst_given_speed_error
    if given is not None:
        verdict = "met" if given <= TARGET_MEAN_ERROR else "NOT met"
        lines.append(
            f"on the machine's speed during each replay (the drift taken out): {verdict} (worst {given:.1%})"
        )
    return lines


def _machine_line(meta: Mapping[str, Any]) -> str:
    cpus = meta.get("cpu_count") or 1
    before, after = meta["load_average_before"], meta["load_average_after"]
    line = (
        f"machine: load average {before:.1f} at the start, {after:.1f} at the end (this run's engine keeps about "
        f"one CPU busy), on {cpus} CPUs; {meta.get('torch_threads', '?')} torch thread(s) per engine"
    )
    if meta.get("onednn_primitive_cache_capacity"):
        line += (
            f"; oneDNN primitive cache {meta['onednn_primitive_cache_capacity']}, every batch size run once per "
            "engine before measuring"
        )
    if before > 0.5 * cpus or after > 1 + 0.5 * cpus:
        line += " (other processes competed for the CPUs: step times are noisier than the profile assumes)"
    return line


LOAD_DRIFT_NOTE = 0.05
"""How far (in load, a fraction of saturation) the replays' load against the full profile may lie from the load
that set the rate before the report says why."""


def _load_line(meta: Mapping[str, Any]) -> str:
    rate, first = meta["rate_per_s"], meta["simulated_saturation_rate_per_s"]
    full = meta["full_profile_saturation_rate_per_s"]
    line = (
        f"load: the replays ran at {rate / full:.0%} of the saturation rate of the full profile "
        f"({full:.2f} req/s; the rate was set at {rate / first:.0%} of the first part's, {first:.2f} req/s)"
    )
    if rate / full - rate / first > LOAD_DRIFT_NOTE:
        line += (
            "; the machine ran faster while the first part was measured, so the replays ran busier than asked, "
            "where queueing magnifies every step-time error (see each policy's sensitivity)"
        )
    elif rate / first - rate / full > LOAD_DRIFT_NOTE:
        line += "; the machine ran slower while the first part was measured, so the replays ran lighter than asked"
    return line


def _overheads_line(overheads: Mapping[str, float]) -> str:
    def ms(name: str) -> str:
        return f"{1000.0 * float(overheads.get(name, 0.0)):.2f} ms"

    return (
        f"engine time the simulator charges beside the steps (profile overheads): {ms('arrival_s')} per arrival "
        f"(request intake), {ms('idle_wakeup_s')} more per arrival that finds the engine idle (waking up), "
        f"{ms('new_shape_s')} on the first step of a batch size new to the engine"
    )


def _policy_lines(policy: PolicyFidelity) -> list[str]:
    a, t = policy.analysis, policy.analysis.step_times
    total, replays = len(policy.sim_requests), len(policy.all_replays)
    each = f" in each of {replays} replays" if replays > 1 else ""
    lines = [
        f"{policy.policy}: {policy.num_complete}/{total} requests finished with their exact token count{each}",
    ]
    if replays > 1:
        lines.append(f"  {_repeats_line(policy)}")
        lines.append(
            f"  the analysis below is of replay {a.replay_index + 1} of {replays} (the median mean E2E); its own "
            "errors: " + _means(compare_one(policy))
        )
    lines += [
        f"  steps real {a.real_steps:,} / sim {a.sim_steps:,}; preemptions real {a.real_preemptions} / "
        f"sim {a.sim_preemptions}",
        f"  real step {t.cycle_ms:.2f} ms = schedule {t.schedule_ms:.2f} + model {t.model_ms:.2f} + update "
        f"{t.update_ms:.2f} + output {t.output_ms:.2f} + loop gap {t.gap_ms:.2f}; the profile charges "
        f"{t.predicted_ms:.2f} ms ('{a.timing}' timing, per-step MAPE {a.step_fit_mape:.1%})",
        "  profile by step class: "
        + "; ".join(
            f"{c.name} {c.num_steps:,} steps, real {c.real_ms:.2f} vs {c.predicted_ms:.2f} ms"
            for c in a.step_classes
        ),
    ]
    if a.batch_changes:
        lines.append(
            "  decode-only steps by what came before: "
            + "; ".join(
                f"{c.name} {c.num_steps:,} steps, real {c.real_ms:.2f} vs {c.predicted_ms:.2f} ms "
                f"(x{c.real_ms / c.predicted_ms:.2f})"
                for c in a.batch_changes
                if c.predicted_ms > 0
            )
        )
    lines.append(
        "  sources (engine seconds over the run; + = the real engine spent time the simulator does not charge):"
    )
    real_engine_s = t.cycle_ms * t.num_steps / 1000.0
    for source in a.sources:
        share = source.engine_s / real_engine_s if real_engine_s else 0.0
        lines.append(f"    {source.name:<38} {source.engine_s:+8.2f} s ({share:+6.1%})  {source.note}")
    if a.speed_drift is not None:
        lines.append(f"  {_drift_line(policy.real, a.speed_drift)}")
    lines.append(f"  {_corrected_line(a)}")
    if a.class_corrected:
        lines.append(f"  {_class_corrected_line(a)}")
    if len(a.window_ratios) >= 2:
        lines.append(f"  {_windows_line(a)}")
    lines.append(f"  {_sensitivity_line(a)}")
    if policy.given_speed is not None:
        lines.append(f"  {_given_speed_line(policy.given_speed)}")
    lines.append(f"  dominant: {dominant_statement(policy)}")
    return lines


def compare_one(policy: PolicyFidelity) -> tuple[MetricComparison, ...]:
    """The simulator against the analysed replay alone (``policy.real``)."""
    index = policy.analysis.replay_index
    return tuple(
        MetricComparison(m.metric, m.real_repeats_s[index] if m.real_repeats_s else m.real_s, m.sim_s)
        for m in policy.metrics
    )


def _repeats_line(policy: PolicyFidelity) -> str:
    parts = []
    for m in policy.metrics:
        if m.metric.endswith("_mean") and m.real_repeats_s:
            values = ", ".join(f"{v:.3f}" for v in m.real_repeats_s)
            where = "inside" if m.within_repeats else "outside"
            parts.append(
                f"{m.metric.replace('_', ' ')} {values} s (spread {m.repeat_spread:.0%} of the mean; sim "
                f"{m.sim_s:.3f} s, {where} that range)"
            )
    return "real replays: " + "; ".join(parts)


def _means(metrics: Sequence[MetricComparison]) -> str:
    return ", ".join(f"{m.metric.replace('_', ' ')} {m.error:+.1%}" for m in metrics if m.metric.endswith("_mean"))


def _drift_line(real: ReplayResult, drift: float) -> str:
    probes = " and ".join(
        f"{p * 1000:.2f} ms {when}"
        for p, when in ((real.probe_before_s, "before"), (real.probe_after_s, "after"))
        if p is not None
    )
    return (
        f"engine-speed probe (one decode-only step of 4 requests): {probes} this replay, {drift:.3f}x its time "
        f"when the profile was measured ({'slower' if drift > 1 else 'faster'} machine: {abs(drift - 1):.1%})"
    )


def _corrected_line(analysis: ErrorAnalysis) -> str:
    return (
        f"sim with the profile x{analysis.engine_time_ratio:.3f} (scaled to this replay's engine time): "
        f"{_means(analysis.corrected)}"
    )


def _class_corrected_line(analysis: ErrorAnalysis) -> str:
    factors = ", ".join(f"{name} x{factor:.2f}" for name, factor in analysis.class_factors.items())
    return f"sim with the profile corrected per step class ({factors}): {_means(analysis.class_corrected)}"


def _windows_line(analysis: ErrorAnalysis) -> str:
    ratios = np.asarray(analysis.window_ratios)
    return (
        f"speed during the replay: real / class-corrected profile per {WINDOW_S:g} s busy window from "
        f"{ratios.min():.2f} to {ratios.max():.2f} (sd {ratios.std():.0%})"
    )


def _given_speed_line(given: GivenSpeed) -> str:
    line = (
        f"sim on the machine's speed during each replay (its settled decode-only steps against the profile per "
        f"{given.window_s:g} s window: {_speed_range(given)}): {_means(given.metrics)}"
    )
    if len(given.per_replay) > 1:
        runs = "; ".join(
            "/".join(f"{m.error:+.0%}" for m in run if m.metric.endswith("_mean")) for run in given.per_replay
        )
        line += f"; per replay {runs} (TTFT/E2E means)"
    return line


def _speed_range(given: GivenSpeed) -> str:
    measured = given.measured
    if not measured:
        return "no replay had settled decode-only steps to measure it with; the profile's speed"
    means = ", ".join("-" if speed is None else f"x{speed.mean:.2f}" for speed in given.speeds)
    return (
        f"x{min(s.low for s in measured):.2f} to x{max(s.high for s in measured):.2f} window to window, "
        f"replay averages {means}"
    )


def _sensitivity_line(analysis: ErrorAnalysis) -> str:
    step = SENSITIVITY_FACTOR - 1
    changes = ", ".join(
        f"{name.replace('_', ' ')} {change:+.0%} (x{change / step:.1f})"
        for name, change in analysis.sensitivity.items()
        if name.endswith("_mean")
    )
    return f"sensitivity at this load: {step:.0%} longer steps move the simulated {changes}"


def _mean_errors(metrics: Sequence[MetricComparison]) -> float:
    return float(np.mean([abs(m.error) for m in metrics if m.metric.endswith("_mean")]))


def dominant_statement(policy: PolicyFidelity) -> str:
    """What dominates the error of the means, tested with the what-if simulations: within the target, say so;
    if every simulated mean lies inside the range of the real replays, the machine's noise; if the profile scaled
    to the replay's engine time halves the error, its step-time level (machine drift or fit, told apart by the
    probe); if the profile corrected per step class does, its step-time shape (the class off
    most); otherwise neither: scheduling differences or noise within the replay (the probe's spread)."""
    analysis = policy.analysis
    base = _mean_errors(policy.metrics)
    top = analysis.dominant
    source = f"{top.name} ({top.engine_s:+.2f} s of engine time)"
    if base <= TARGET_MEAN_ERROR:
        return f"the means are within {TARGET_MEAN_ERROR:.0%} ({base:.1%} on average); largest source: {source}"
    given = policy.given_speed
    if given is not None and max(abs(m.error) for m in given.metrics if m.metric.endswith("_mean")) <= (
        TARGET_MEAN_ERROR
    ):
        return (
            f"the machine's speed: on the speed the machine ran each replay at ({_speed_range(given)}), every "
            f"simulated mean is within {TARGET_MEAN_ERROR:.0%} ({_means(given.metrics)}, against "
            f"{_means(policy.metrics)} on the profile's speed); largest source in the analysed replay: {source}"
        )
    means = [m for m in policy.metrics if m.metric.endswith("_mean")]
    if means and all(m.within_repeats for m in means):
        spread = max(m.repeat_spread for m in means)
        return (
            f"machine noise: every simulated mean lies between the fastest and the slowest real replay, whose "
            f"means differ by up to {spread:.0%} of their mean with the same requests and policy; the simulator "
            f"cannot be judged closer than the engine agrees with itself (largest source in the analysed replay: "
            f"{source})"
        )
    ratio = analysis.engine_time_ratio
    level = (
        f"the profile charges {abs(1 - 1 / ratio):.1%} {'less' if ratio > 1 else 'more'} engine time than the "
        "real steps took"
    )
    corrected = _mean_errors(analysis.corrected) if analysis.corrected else base
    if corrected <= 0.5 * base:
        return (
            f"the profile's step-time level: {level}{_level_split(analysis)} (largest source: {source}); scaled "
            f"to the replay's engine time the mean errors fall from {base:.1%} to {corrected:.1%}"
        )
    by_class = _mean_errors(analysis.class_corrected) if analysis.class_corrected else base
    if by_class <= 0.5 * base and analysis.class_factors:
        worst = max(analysis.class_factors.items(), key=lambda item: abs(math.log(item[1])))
        return (
            f"the profile's step-time shape: it is off most for steps {worst[0]} (real x{worst[1]:.2f} the "
            f"profile), which dominate the busy stretches where requests queue; corrected per step class the mean "
            f"errors fall from {base:.1%} to {by_class:.1%} (scaling alone leaves {corrected:.1%})"
        )
    return (
        f"neither the profile's level nor its shape: corrected for both the mean errors stay {by_class:.1%} (vs "
        f"{base:.1%}); what is left is scheduling differences (steps, preemptions) or the machine speed changing "
        f"within the replay{_speed_spread(analysis)}; largest measured source: {source}"
    )


def _speed_spread(analysis: ErrorAnalysis) -> str:
    if len(analysis.window_ratios) < 2:
        return ""
    ratios = analysis.window_ratios
    return f" (real / class-corrected profile from {min(ratios):.2f} to {max(ratios):.2f} between windows)"


def _level_split(analysis: ErrorAnalysis) -> str:
    """The level error as machine-speed drift (the probe) times the rest (the profile's fit on these batches)."""
    drift = analysis.speed_drift
    if drift is None:
        return ""
    return (
        f": x{analysis.engine_time_ratio:.3f} = machine speed drift x{drift:.3f} (probe) times the fit on these "
        f"batches x{analysis.engine_time_ratio / drift:.3f}"
    )
