"""Monitoring series of one run, per time bin (a minute by default): seed 003's §7.3 figures.

Per bin ``k`` (simulated time ``[k * bin_s, (k + 1) * bin_s)``; bins run from 0 to the end of the run):

* **preemptions** by mode (recompute, swap, drop) and by reason (KV pressure, displaced by priority), counted
  at the time the plan that made them was formed;
* **SLO compliance** per priority: of the requests with a target that *ended* in the bin (finished, rejected
  or dropped, at their finish time), the share that met their SLO by :mod:`.request_metrics`' definition
  (finished and met every target it has); ``None`` where no such request ended, and always for a priority
  without targets, never 100 %. The rolling figure pools the last ``rolling_bins`` bins (this one included);
* **queue depth** per priority: mean and max of the waiting requests over the monitor's samples in the bin
  (the simulator samples a fixed grid, see :mod:`semsched.sim.monitor`); ``None`` for a bin with no sample;
* **served tokens** per priority: output tokens emitted in the bin, by their emission times; the share of each
  priority, and with ``target_shares`` (priority -> share, normalised to sum to 1; a priority not named has
  target 0) its deviation from the target (served share minus target); ``None`` in a bin that served nothing;
* **swap space**: the most CPU (swap) blocks in use in the bin, also as a fraction of the swap space;
* **rejections** by :func:`~.request_metrics.rejection_kind` (rejected and dropped requests, at their finish
  time).

This module reads the simulator's record through the :class:`MonitorRecord` protocol (metrics does not import
the simulator); :class:`semsched.sim.monitor.MonitorLog` is one.
"""

from __future__ import annotations

import csv
import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import numpy as np

from semsched.core.plan import PreemptionMode, PreemptionReason
from semsched.core.request import Request
from semsched.metrics.request_metrics import RequestMetrics, rejection_kind, request_metrics

PathLike = str | os.PathLike[str]

DEFAULT_BIN_S = 60.0
DEFAULT_ROLLING_BINS = 5


class PreemptionLike(Protocol):
    @property
    def time_s(self) -> float: ...
    @property
    def priority(self) -> int: ...
    @property
    def mode(self) -> PreemptionMode: ...
    @property
    def reason(self) -> PreemptionReason: ...


class QueueSampleLike(Protocol):
    @property
    def time_s(self) -> float: ...
    @property
    def waiting_by_priority(self) -> Mapping[int, int]: ...
    @property
    def swap_blocks_used(self) -> int: ...
    @property
    def num_points(self) -> int: ...


class SwapLevelLike(Protocol):
    @property
    def time_s(self) -> float: ...
    @property
    def swap_blocks_used(self) -> int: ...


class MonitorRecord(Protocol):
    """What a run recorded (:class:`semsched.sim.monitor.MonitorLog`): preemptions, queue samples on the grid
    ``k * sample_interval_s`` (each for ``num_points`` consecutive points), swap levels after swap traffic, the
    swap space and the run's end."""

    @property
    def sample_interval_s(self) -> float: ...
    @property
    def num_swap_blocks(self) -> int: ...
    @property
    def preemptions(self) -> Sequence[PreemptionLike]: ...
    @property
    def queue_samples(self) -> Sequence[QueueSampleLike]: ...
    @property
    def swap_levels(self) -> Sequence[SwapLevelLike]: ...
    @property
    def end_time_s(self) -> float: ...


Counts = tuple[int, ...]


@dataclass(frozen=True)
class MonitoringSeries:
    """The series of one run (see the module docstring); every per-bin tuple has :attr:`num_bins` entries and
    every per-priority mapping has one entry for each of :attr:`priorities`."""

    bin_s: float
    num_bins: int
    priorities: tuple[int, ...]
    tiers: Mapping[int, tuple[str, ...]]  # tier names seen at each priority
    preemptions_by_mode: Mapping[PreemptionMode, Counts]
    preemptions_by_reason: Mapping[PreemptionReason, Counts]
    slo_requests: Mapping[int, Counts]  # requests with a target that ended in the bin
    slo_met: Mapping[int, Counts]
    rolling_bins: int
    queue_depth_mean: Mapping[int, tuple[float | None, ...]]
    queue_depth_max: Mapping[int, tuple[int | None, ...]]
    output_tokens: Mapping[int, Counts]
    target_shares: Mapping[int, float] | None  # normalised
    swap_blocks_max: tuple[int | None, ...]
    num_swap_blocks: int
    rejections: Mapping[str, Counts]  # by rejection kind

    @property
    def starts_s(self) -> np.ndarray:
        return np.arange(self.num_bins, dtype=np.float64) * self.bin_s

    @property
    def preemptions(self) -> Counts:
        """All preemptions (every mode) per bin."""
        return _sum_counts(self.preemptions_by_mode.values(), self.num_bins)

    @property
    def num_rejections(self) -> Counts:
        return _sum_counts(self.rejections.values(), self.num_bins)

    def slo_compliance(self, priority: int) -> tuple[float | None, ...]:
        met, total = self.slo_met[priority], self.slo_requests[priority]
        return tuple(_ratio(m, n) for m, n in zip(met, total, strict=True))

    def slo_compliance_rolling(self, priority: int) -> tuple[float | None, ...]:
        met = _rolling_sum(self.slo_met[priority], self.rolling_bins)
        total = _rolling_sum(self.slo_requests[priority], self.rolling_bins)
        return tuple(_ratio(m, n) for m, n in zip(met, total, strict=True))

    def token_share(self, priority: int) -> tuple[float | None, ...]:
        totals = _sum_counts(self.output_tokens.values(), self.num_bins)
        return tuple(_ratio(t, n) for t, n in zip(self.output_tokens[priority], totals, strict=True))

    def share_deviation(self, priority: int) -> tuple[float | None, ...] | None:
        """Served share minus target share per bin; ``None`` without target shares."""
        if self.target_shares is None:
            return None
        target = self.target_shares.get(priority, 0.0)
        return tuple(None if s is None else s - target for s in self.token_share(priority))

    def swap_fraction_max(self) -> tuple[float | None, ...]:
        """:attr:`swap_blocks_max` over the swap space; ``None`` without swap space or sample."""
        space = self.num_swap_blocks
        return tuple(None if b is None or not space else b / space for b in self.swap_blocks_max)

    def rows(self) -> list[dict[str, Any]]:
        """One dict per bin, under :func:`series_columns` names (counts, fractions, seconds in ``_s`` names)."""
        columns: dict[str, Sequence[object]] = {
            "bin": range(self.num_bins),
            "start_s": self.starts_s.tolist(),
            "end_s": (self.starts_s + self.bin_s).tolist(),
            "preemptions": self.preemptions,
        }
        columns |= {f"preemptions_{m.value}": c for m, c in self.preemptions_by_mode.items()}
        columns |= {f"preemptions_{r.value}": c for r, c in self.preemptions_by_reason.items()}
        columns |= {"swap_blocks_max": self.swap_blocks_max, "swap_fraction_max": self.swap_fraction_max()}
        columns["rejections"] = self.num_rejections
        by_slug: dict[str, Counts] = {}
        for kind, counts in self.rejections.items():
            key = f"rejections_{_slug(kind)}"
            by_slug[key] = _sum_counts([by_slug.get(key, ()), counts], self.num_bins)
        columns |= by_slug
        for p in self.priorities:
            columns |= self._priority_columns(p)
        return [{name: _cell(values[k]) for name, values in columns.items()} for k in range(self.num_bins)]

    def _priority_columns(self, p: int) -> dict[str, Sequence[object]]:
        columns: dict[str, Sequence[object]] = {
            f"queue_depth_mean_p{p}": self.queue_depth_mean[p],
            f"queue_depth_max_p{p}": self.queue_depth_max[p],
            f"slo_requests_p{p}": self.slo_requests[p],
            f"slo_met_p{p}": self.slo_met[p],
            f"slo_compliance_p{p}": self.slo_compliance(p),
            f"slo_compliance_rolling_p{p}": self.slo_compliance_rolling(p),
            f"output_tokens_p{p}": self.output_tokens[p],
            f"token_share_p{p}": self.token_share(p),
        }
        deviation = self.share_deviation(p)
        if deviation is not None:
            columns[f"share_deviation_p{p}"] = deviation
        return columns


def monitoring_series(
    requests: Sequence[Request],
    record: MonitorRecord,
    *,
    bin_s: float = DEFAULT_BIN_S,
    target_shares: Mapping[int, float] | None = None,
    rolling_bins: int = DEFAULT_ROLLING_BINS,
) -> MonitoringSeries:
    """The series of one run: its requests (terminal) and what its simulation recorded."""
    if not (math.isfinite(bin_s) and bin_s > 0):
        raise ValueError(f"bin_s: must be a finite number > 0 (got {bin_s!r})")
    if isinstance(rolling_bins, bool) or not isinstance(rolling_bins, int) or rolling_bins < 1:
        raise ValueError(f"rolling_bins: must be an integer >= 1 (got {rolling_bins!r})")
    bins = _Bins(bin_s, _end_s(requests, record))
    priorities = _priorities(requests, record)
    metrics = [request_metrics(r) for r in requests]
    slo_requests, slo_met = _slo_counts(requests, metrics, priorities, bins)
    runs = _sample_runs(record, bins)
    depth_mean, depth_max = _queue_depth(runs, priorities, bins)
    return MonitoringSeries(
        bin_s=bin_s,
        num_bins=bins.count,
        priorities=priorities,
        tiers={p: tuple(sorted({r.tier for r in requests if r.priority == p})) for p in priorities},
        preemptions_by_mode={
            mode: bins.count_times([e.time_s for e in record.preemptions if e.mode is mode])
            for mode in PreemptionMode
        },
        preemptions_by_reason={
            reason: bins.count_times([e.time_s for e in record.preemptions if e.reason is reason])
            for reason in PreemptionReason
        },
        slo_requests=slo_requests,
        slo_met=slo_met,
        rolling_bins=rolling_bins,
        queue_depth_mean=depth_mean,
        queue_depth_max=depth_max,
        output_tokens=_output_tokens(requests, priorities, bins),
        target_shares=_normalised_shares(target_shares),
        swap_blocks_max=_swap_max(runs, record.swap_levels, bins),
        num_swap_blocks=record.num_swap_blocks,
        rejections=_rejections(requests, metrics, bins),
    )


def series_columns(series: Iterable[MonitoringSeries]) -> list[str]:
    """The CSV header: ``policy``, then every column of any of ``series`` in order of first appearance."""
    columns: dict[str, None] = {"policy": None}
    for one in series:
        rows = one.rows()
        if rows:
            columns |= dict.fromkeys(rows[0])
    return list(columns)


def write_series_csv(path: PathLike, series: Mapping[str, MonitoringSeries]) -> None:
    """One row per policy x bin, columns :func:`series_columns` (a column a policy lacks is an empty cell)."""
    rows = {policy: one.rows() for policy, one in series.items()}
    columns = series_columns(series.values())
    with Path(path).open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns, restval="")
        writer.writeheader()
        for policy, policy_rows in rows.items():
            writer.writerows({"policy": policy, **row} for row in policy_rows)


# ---- binning ---------------------------------------------------------------------------------------------
class _Bins:
    """Bins ``[k * width_s, (k + 1) * width_s)`` from 0 to the bin that holds ``end_s``."""

    def __init__(self, width_s: float, end_s: float) -> None:
        self.width_s = width_s
        self.count = int(end_s // width_s) + 1

    def index_of(self, time_s: float) -> int:
        return min(max(int(time_s // self.width_s), 0), self.count - 1)

    def index(self, times_s: Sequence[float] | np.ndarray) -> np.ndarray:
        index = np.floor_divide(np.asarray(times_s, dtype=np.float64), self.width_s).astype(np.int64)
        return np.clip(index, 0, self.count - 1)

    def count_times(self, times_s: Sequence[float] | np.ndarray, weights: np.ndarray | None = None) -> Counts:
        counts = np.bincount(self.index(times_s), weights=weights, minlength=self.count)
        return tuple(int(c) for c in counts)


def _end_s(requests: Sequence[Request], record: MonitorRecord) -> float:
    finishes = [r.finish_time_s for r in requests if r.finish_time_s is not None]
    return max([record.end_time_s, *finishes, *(r.arrival_time_s for r in requests)])


def _priorities(requests: Sequence[Request], record: MonitorRecord) -> tuple[int, ...]:
    seen = {r.priority for r in requests} | {e.priority for e in record.preemptions}
    seen.update(p for sample in record.queue_samples for p in sample.waiting_by_priority)
    return tuple(sorted(seen))


# ---- the series ------------------------------------------------------------------------------------------
def _slo_counts(
    requests: Sequence[Request], metrics: Sequence[RequestMetrics], priorities: Sequence[int], bins: _Bins
) -> tuple[dict[int, Counts], dict[int, Counts]]:
    ended: dict[int, list[float]] = {p: [] for p in priorities}
    met: dict[int, list[float]] = {p: [] for p in priorities}
    for request, outcome in zip(requests, (m.slo_met for m in metrics), strict=True):
        if request.finish_time_s is None or outcome is None:
            continue  # still in flight (it ended in no bin), or without a target
        ended[request.priority].append(request.finish_time_s)
        if outcome:
            met[request.priority].append(request.finish_time_s)
    return (
        {p: bins.count_times(times) for p, times in ended.items()},
        {p: bins.count_times(times) for p, times in met.items()},
    )


class _SampleRun(NamedTuple):
    """``num_points`` grid points of one queue sample that fall in bin ``bin``."""

    bin: int
    num_points: int
    sample: QueueSampleLike


def _sample_runs(record: MonitorRecord, bins: _Bins) -> list[_SampleRun]:
    """Each queue sample split by bin. A sample's points are ``k * interval`` for ``k`` from its first index
    on (the times the monitor computed); the bin changes monotonically with ``k``, so each bin's first point is
    found by bisection: O(bins touched), however many points a sample holds."""
    interval = record.sample_interval_s
    runs = []
    for sample in record.queue_samples:
        index = round(sample.time_s / interval)
        end = index + sample.num_points
        while index < end:
            bin_index = bins.index_of(index * interval)
            inside, beyond = index, end  # bin(inside) == bin_index; beyond: end, or the first point past the bin
            while beyond - inside > 1:
                middle = (inside + beyond) // 2
                if bins.index_of(middle * interval) > bin_index:
                    beyond = middle
                else:
                    inside = middle
            runs.append(_SampleRun(bin_index, beyond - index, sample))
            index = beyond
    return runs


def _queue_depth(
    runs: Sequence[_SampleRun], priorities: Sequence[int], bins: _Bins
) -> tuple[dict[int, tuple[float | None, ...]], dict[int, tuple[int | None, ...]]]:
    num_points = [0] * bins.count
    for run in runs:
        num_points[run.bin] += run.num_points
    means: dict[int, tuple[float | None, ...]] = {}
    maxima: dict[int, tuple[int | None, ...]] = {}
    for p in priorities:
        sums, peaks = [0] * bins.count, [0] * bins.count
        for run in runs:
            depth = run.sample.waiting_by_priority.get(p, 0)
            sums[run.bin] += depth * run.num_points
            peaks[run.bin] = max(peaks[run.bin], depth)
        means[p] = tuple(s / n if n else None for s, n in zip(sums, num_points, strict=True))
        maxima[p] = tuple(m if n else None for m, n in zip(peaks, num_points, strict=True))
    return means, maxima


def _output_tokens(requests: Sequence[Request], priorities: Sequence[int], bins: _Bins) -> dict[int, Counts]:
    times: dict[int, list[np.ndarray]] = {p: [] for p in priorities}
    for request in requests:
        times[request.priority].append(request.token_times_s())
    return {p: bins.count_times(np.concatenate(t) if t else np.empty(0)) for p, t in times.items()}


def _swap_max(runs: Sequence[_SampleRun], levels: Sequence[SwapLevelLike], bins: _Bins) -> tuple[int | None, ...]:
    peaks: list[int | None] = [None] * bins.count
    points = [(run.bin, run.sample.swap_blocks_used) for run in runs]
    points += [(bins.index_of(level.time_s), level.swap_blocks_used) for level in levels]
    for bin_index, used in points:
        peak = peaks[bin_index]
        peaks[bin_index] = used if peak is None else max(peak, used)
    return tuple(peaks)


def _rejections(requests: Sequence[Request], metrics: Sequence[RequestMetrics], bins: _Bins) -> dict[str, Counts]:
    """Rejected and dropped requests by kind of reason, at their finish time; the most frequent kind first."""
    times: dict[str, list[float]] = {}
    for request, reason in zip(requests, (m.rejection_reason for m in metrics), strict=True):
        if reason is not None and request.finish_time_s is not None:
            times.setdefault(rejection_kind(reason), []).append(request.finish_time_s)
    ordered = sorted(times.items(), key=lambda item: (-len(item[1]), item[0]))
    return {kind: bins.count_times(t) for kind, t in ordered}


def _normalised_shares(shares: Mapping[int, float] | None) -> dict[int, float] | None:
    if shares is None:
        return None
    for priority, share in shares.items():
        if not (math.isfinite(share) and share >= 0):
            raise ValueError(f"target_shares[{priority}]: must be a finite number >= 0 (got {share!r})")
    total = sum(shares.values())
    if total <= 0:
        raise ValueError("target_shares: at least one share must be > 0")
    return {p: s / total for p, s in sorted(shares.items())}


# ---- helpers ---------------------------------------------------------------------------------------------
def _sum_counts(series: Iterable[Sequence[int]], length: int) -> Counts:
    total = [0] * length
    for counts in series:
        for k, c in enumerate(counts):
            total[k] += c
    return tuple(total)


def _rolling_sum(counts: Sequence[int], window: int) -> Counts:
    cumulative = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)])
    k = np.arange(len(counts))
    return tuple(int(v) for v in cumulative[k + 1] - cumulative[np.maximum(k + 1 - window, 0)])


def _ratio(part: int, whole: int) -> float | None:
    return part / whole if whole else None


def _slug(text: str) -> str:
    return re.sub(r"[^0-9a-z]+", "_", text.lower()).strip("_") or "other"


def _cell(value: object) -> object:
    return "" if value is None else value
