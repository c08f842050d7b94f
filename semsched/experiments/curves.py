"""Headlines as curves, and the claim table (../shared/EXPERIMENTS.md, issue 30).

A headline is the metric over load (about 0.5x to 1.5x of measured capacity, at least 6 points), with 3 or more
seeds per point: :class:`LoadCurve` holds every policy's per-seed values and reduces them to the median and the
min-max band, ours against the best baseline per load (the ratio in the direction that makes bigger better for
us), the load where the gain is largest, the loads where ours is at least as good as the best baseline, and
every **collapse** (one seed's value 3x the others', or a run that left requests unfinished), which is shown,
never averaged away. :meth:`LoadCurve.figure` turns it into a report
:class:`~semsched.experiments.framework.Figure` (table with at most three numbers a cell, a PNG with bands,
the per-seed values in ``results.json``).

A record opens with one table, one row per paper claim (:class:`Claim`): the claim in words, the paper's
number, ours as a median and range, and a verdict computed from them (:func:`ratio_verdict`, or the
experiment's own rule with its reason).

How an experiment uses it::

    values = {policy: {load: [metric(run) for each seed]} for ...}      # from its own runs through ctx
    curve = LoadCurve("mean TTLT (s)", loads, seeds, values, ours="sagesched",
                      baselines=("ssjf", "trail"), higher_is_better=False)
    ctx.add_figure(curve.figure("fig7", title=..., paper_says=..., paper=..., config=..., command=...))
    ctx.add_claim(curve.claim("mean TTLT below the best baseline", paper=1.40, figure="fig7"))
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from semsched.experiments.framework import Figure, Table
from semsched.experiments.numbers import num
from semsched.experiments.registry import ExperimentError

#: a seed's value this many times the median of the others (or 1/this, for a higher-is-better metric) is a
#: collapse
COLLAPSE_FACTOR = 3.0
#: a paper's number within this relative distance of our median (or inside our min-max) is reproduced
REPRODUCED_TOLERANCE = 0.25
MIN_LOADS = 6
MIN_SEEDS = 3
VERDICTS = ("reproduced", "partly", "not")

Value = float | None


@dataclass(frozen=True)
class Band:
    """A median over seeds with its min-max; ``None`` throughout when no seed has a value."""

    median: Value
    low: Value
    high: Value
    missing: int = 0

    @classmethod
    def of(cls, values: Sequence[Value]) -> Band:
        present = [float(v) for v in values if v is not None and math.isfinite(v)]
        if not present:
            return cls(None, None, None, len(values))
        return cls(float(np.median(present)), min(present), max(present), len(values) - len(present))

    def cell(self, digits: int = 3) -> str:
        """``median [min-max]``: at most three numbers; ``n/a`` marks seeds without a value."""
        if self.median is None:
            return "n/a"
        text = num(self.median, digits)
        if self.low != self.high:
            text += f" [{num(self.low, digits)}-{num(self.high, digits)}]"
        return text + (f" ({self.missing} n/a)" if self.missing else "")


@dataclass(frozen=True)
class Collapse:
    """One policy's seed at one load far from the other seeds (or with no value at all)."""

    policy: str
    load: float
    seed: int
    value: Value
    others_median: Value

    def text(self) -> str:
        if self.value is None:
            return (f"{self.policy} at {self.load:g}x, seed {self.seed}: no value "
                    "(requests unfinished or none served)")
        return (f"{self.policy} at {self.load:g}x, seed {self.seed}: {num(self.value)} against "
                f"{num(self.others_median)} on the other seeds")


@dataclass(frozen=True)
class Claim:
    """One row of a record's claim table: at most three numbers a cell (checked when the report is written)."""

    claim: str
    paper: str
    ours: str
    verdict: str
    why: str
    figure: str = ""
    #: the loads behind ``ours`` (where it is measured, where ours holds up), if it is a curve
    where: str = ""

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ExperimentError(f"claim {self.claim!r}: verdict must be one of {VERDICTS}, got {self.verdict!r}")
        if not self.claim or not self.why:
            raise ExperimentError("a claim needs its words and a one-line reason for its verdict")


def ratio_verdict(paper: float | None, ours: Band, *, tolerance: float = REPRODUCED_TOLERANCE) -> tuple[str, str]:
    """Verdict on a gain claim (a ratio where > 1 means ours is better): reproduced when the paper's number is
    inside our min-max or within ``tolerance`` of our median; partly when ours is better (median > 1) but not by
    the paper's amount; not otherwise. The reason says which, with the numbers."""
    if ours.median is None:
        return "not", "no value: the runs left requests unfinished"
    if paper is None:
        return ("reproduced", f"ours better: {num(ours.median)}") if ours.median > 1 else (
            "not", f"ours not better: {num(ours.median)}")
    assert ours.low is not None and ours.high is not None
    if ours.low <= paper <= ours.high or abs(ours.median / paper - 1) <= tolerance:
        return "reproduced", f"paper's {num(paper)} within our range or {tolerance:.0%} of our median"
    if ours.median > 1:
        side = "less" if ours.median < paper else "more"
        return "partly", f"ours better, by {side} than the paper ({num(ours.median)} vs {num(paper)})"
    return "not", f"ours not better than the baseline ({num(ours.median)} vs the paper's {num(paper)})"


@dataclass
class LoadCurve:
    """Every policy's metric over load and seeds (module doc). ``values[policy][load]`` lists one value per seed
    of ``seeds`` (``None`` for a run without one); ``ours`` is compared with ``baselines``."""

    metric: str
    loads: Sequence[float]
    seeds: Sequence[int]
    values: Mapping[str, Mapping[float, Sequence[Value]]]
    ours: str
    baselines: Sequence[str]
    higher_is_better: bool
    #: "load (fraction of measured capacity)" unless the x axis is something else (a burst size, a rate)
    xlabel: str = "load (fraction of measured capacity)"
    x_name: str = "load"
    strict: bool = True
    _bands: dict[tuple[str, float], Band] = field(init=False, repr=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.loads = tuple(self.loads)
        self.seeds = tuple(self.seeds)
        if self.strict and (len(self.loads) < MIN_LOADS or len(self.seeds) < MIN_SEEDS):
            raise ExperimentError(
                f"a headline curve needs at least {MIN_LOADS} loads and {MIN_SEEDS} seeds, got "
                f"{len(self.loads)} and {len(self.seeds)} (strict=False for a quick grid or a side figure)")
        if self.ours not in self.values or any(b not in self.values for b in self.baselines):
            raise ExperimentError(f"curve of {self.metric}: ours {self.ours!r} and every baseline "
                                  f"{list(self.baselines)} need values; have {list(self.values)}")
        if not self.baselines:
            raise ExperimentError(f"curve of {self.metric}: no baseline to compare {self.ours!r} with")
        for policy, per_load in self.values.items():
            for load in self.loads:
                got = per_load.get(load)
                if got is None or len(got) != len(self.seeds):
                    raise ExperimentError(f"curve of {self.metric}: {policy} at {self.x_name} {load:g} has "
                                          f"{0 if got is None else len(got)} values for {len(self.seeds)} seeds")

    # ---- reductions ----------------------------------------------------------------------------------------
    def band(self, policy: str, load: float) -> Band:
        key = (policy, load)
        if key not in self._bands:
            self._bands[key] = Band.of(self.values[policy][load])
        return self._bands[key]

    def _better(self, a: float, b: float) -> bool:
        return a >= b if self.higher_is_better else a <= b

    def best_baseline(self, load: float) -> str | None:
        """The baseline with the best median at ``load`` (None when none has a value)."""
        scored = [(b, m) for b in self.baselines if (m := self.band(b, load).median) is not None]
        if not scored:
            return None
        best = scored[0]
        for candidate in scored[1:]:
            if not self._better(best[1], candidate[1]):
                best = candidate
        return best[0]

    def gain(self, load: float) -> Band:
        """Ours against the best baseline at ``load``, per seed, bigger is better for us (baseline / ours for a
        lower-is-better metric, ours / baseline otherwise)."""
        best = self.best_baseline(load)
        if best is None:
            return Band.of([None] * len(self.seeds))
        ratios: list[Value] = []
        for ours, theirs in zip(self.values[self.ours][load], self.values[best][load], strict=True):
            if ours is None or theirs is None:
                ratios.append(None)
                continue
            numerator, denominator = (ours, theirs) if self.higher_is_better else (theirs, ours)
            ratios.append(numerator / denominator if denominator else (math.inf if numerator else 1.0))
        return Band.of(ratios)

    def largest_gain_load(self) -> float | None:
        gains = [(load, g.median) for load in self.loads if (g := self.gain(load)).median is not None]
        return max(gains, key=lambda item: item[1])[0] if gains else None

    def as_good_loads(self) -> list[float]:
        """The loads where our median is at least as good as the best baseline's."""
        good = []
        for load in self.loads:
            best = self.best_baseline(load)
            ours = self.band(self.ours, load).median
            if best is not None and ours is not None and self._better(ours, self.band(best, load).median or 0.0):
                good.append(load)
        return good

    def collapses(self) -> list[Collapse]:
        """Every (policy, load, seed) whose value is missing or :data:`COLLAPSE_FACTOR` times off the median of
        the other seeds (in the bad direction)."""
        found = []
        for policy, per_load in self.values.items():
            for load in self.loads:
                seeds_values = list(zip(self.seeds, per_load[load], strict=True))
                for index, (seed, value) in enumerate(seeds_values):
                    others = Band.of([v for j, (_, v) in enumerate(seeds_values) if j != index]).median
                    if value is None:
                        found.append(Collapse(policy, load, seed, None, others))
                    elif others is not None and others > 0 and value > 0:
                        factor = others / value if self.higher_is_better else value / others
                        if factor >= COLLAPSE_FACTOR:
                            found.append(Collapse(policy, load, seed, value, others))
        return found

    # ---- text ----------------------------------------------------------------------------------------------
    def direction(self) -> str:
        return "ours / best baseline" if self.higher_is_better else "best baseline / ours"

    def headline(self) -> str:
        where = self.largest_gain_load()
        if where is None:
            return f"{self.ours}: no load where ours and a baseline both have a value"
        gain = self.gain(where)
        good = self.as_good_loads()
        collapses = self.collapses()
        text = (f"{self.ours} vs the best baseline ({self.direction()}, {self.metric}): largest gain "
                f"{gain.cell()} at {where:g}x; at least as good at {_ranges(good, self.loads)}")
        if collapses:
            text += f"; {len(collapses)} collapse(s) shown"
        return text

    def table(self) -> Table:
        others = [p for p in self.values if p != self.ours and p not in self.baselines]
        policies = [self.ours, *self.baselines, *others]
        rows = []
        for load in self.loads:
            best = self.best_baseline(load)
            rows.append((f"{load:g}", *(self.band(p, load).cell() for p in policies), best or "—",
                         self.gain(load).cell()))
        return Table((self.x_name, *policies, "best baseline", f"{self.direction()}"), tuple(rows))

    def ours_document(self) -> dict[str, Any]:
        """Everything the figure shows, for ``results.json``: per-seed values, medians, bands, gains."""
        return {
            "metric": self.metric,
            "higher_is_better": self.higher_is_better,
            "loads": list(self.loads),
            "seeds": list(self.seeds),
            "per_seed": {p: {f"{load:g}": list(v[load]) for load in self.loads} for p, v in self.values.items()},
            "median": {p: {f"{load:g}": self.band(p, load).median for load in self.loads} for p in self.values},
            "best_baseline": {f"{load:g}": self.best_baseline(load) for load in self.loads},
            "gain": {f"{load:g}": {"median": (g := self.gain(load)).median, "min": g.low, "max": g.high}
                     for load in self.loads},
            "largest_gain_load": self.largest_gain_load(),
            "as_good_loads": self.as_good_loads(),
            "collapses": [c.text() for c in self.collapses()],
        }

    def plot(self, path: Path, *, title: str, ylabel: str | None = None) -> None:
        from semsched.experiments.plots import band_chart  # matplotlib only when drawing

        series = {p: [self.band(p, load) for load in self.loads] for p in self.values}
        marks = [(c.policy, c.load, c.value) for c in self.collapses()]
        band_chart(path, list(self.loads), series, marks, xlabel=self.xlabel, ylabel=ylabel or self.metric,
                   title=title)

    def figure(self, figure_id: str, *, title: str, paper_says: str, paper: Mapping[str, Any],
               config: Mapping[str, Any], command: str, notes: Sequence[str] = (), beyond_paper: bool = False,
               extra: Mapping[str, Any] | None = None) -> Figure:
        """The report figure of this curve; ``extra`` adds entries to its ``ours`` in results.json."""
        where = self.largest_gain_load()
        ratios = {f"{self.metric}, {self.direction()}, at {load:g}x": self.gain(load).median
                  for load in self.loads}
        collapse_notes = [f"Collapse: {c.text()}." for c in self.collapses()]
        return Figure(
            id=figure_id, title=title, paper_says=paper_says, paper=paper,
            ours={**self.ours_document(), **(extra or {})}, config=config, command=command, table=self.table(),
            plot=lambda path: self.plot(path, title=title),
            ratios=ratios if where is not None else {}, ratio_direction=self.direction(),
            notes=[*notes, *collapse_notes], headline=self.headline(), beyond_paper=beyond_paper,
        )

    def claim(self, claim: str, *, paper: float | None, paper_text: str | None = None, figure: str = "",
              load: float | None = None) -> Claim:
        """A claim on the gain: at ``load`` (default: where the gain is largest, as "up to" claims read)."""
        at = load if load is not None else self.largest_gain_load()
        gain = self.gain(at) if at is not None else Band(None, None, None)
        verdict, why = ratio_verdict(paper, gain)
        where = f"at {at:g}x; " if at is not None else ""
        good = _ranges(self.as_good_loads(), self.loads)
        return Claim(claim, paper_text or (num(paper) if paper is not None else "—"), gain.cell(), verdict, why,
                     figure, f"{where}as good as the best at {good}")


def _ranges(chosen: Sequence[float], grid: Sequence[float]) -> str:
    """The chosen loads as runs of consecutive grid points: ``0.5-0.9x, 1.3x`` (``none`` when empty)."""
    if not chosen:
        return "no load"
    index = {load: i for i, load in enumerate(grid)}
    runs: list[list[float]] = []
    for load in sorted(chosen, key=index.__getitem__):
        if runs and index[load] == index[runs[-1][-1]] + 1:
            runs[-1].append(load)
        else:
            runs.append([load])
    return ", ".join(f"{r[0]:g}x" if len(r) == 1 else f"{r[0]:g}-{r[-1]:g}x" for r in runs)
