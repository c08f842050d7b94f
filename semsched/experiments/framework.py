"""What an experiment works with: :class:`ExperimentContext` (runs, figures), :class:`Figure`, and
:func:`run_experiment`, which runs one registered experiment and writes its report.

Every policy of a figure runs on the same requests: :meth:`ExperimentContext.run_policies` takes one
:class:`~semsched.workloads.Workload` and gives each policy fresh requests from it, on the same cluster
(:func:`semsched.sim.runner.run_policy`). The requests are kept, with the figure's id, for ``requests.csv``.

A figure's grid runs in parallel when the experiment hands it over whole: :meth:`ExperimentContext.run_grid`
takes its :class:`GridPoint` list and runs every (point, policy) pair on the context's runner
(:mod:`semsched.sim.parallel`: here, a process pool or Ray), gathering the runs in the grid's order, so the
report is the same byte for byte whatever runs them.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from semsched.core.request import Request
from semsched.experiments.registry import EXPERIMENTS, ExperimentError
from semsched.sim.parallel import InProcess, PointProgress, PointRunner, SimPoint
from semsched.sim.runner import ClusterSpec, PolicyRun
from semsched.workloads import Workload

_FIGURE_ID = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
REPORT_MARKER = "results.json"
"""A directory holding this file is a report directory: ``reproduce`` may replace it."""


@dataclass(frozen=True)
class Table:
    """A result table as text cells (formatted by the experiment), for ``report.md``."""

    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]

    def __post_init__(self) -> None:
        for index, row in enumerate(self.rows):
            if len(row) != len(self.columns):
                raise ExperimentError(
                    f"table row {index}: {len(row)} cells for {len(self.columns)} columns {list(self.columns)}"
                )


@dataclass(frozen=True)
class Figure:
    """One figure or table of a document, reproduced.

    ``paper_says`` is what the document measured and its number(s), in words; ``paper`` the same numbers as
    data (empty when the document has none, as for the demo); ``ours`` our numbers from this run; ``config``
    everything needed to rerun it (workload spec, rate, duration, seed, profile, policies with parameters);
    ``command`` the exact command or Python call. ``ratios`` are headline ratios named with their direction
    (``"baseline / ours"`` for latencies, ``"ours / baseline"`` for attainment and throughput, as
    ``ratio_direction`` says); ``notes`` explain every difference from the paper. ``plot`` draws the PNG
    (``<id>.png``). ``beyond_paper`` puts the figure under "Beyond the paper".
    """

    id: str
    title: str
    paper_says: str
    paper: Mapping[str, Any]
    ours: Mapping[str, Any]
    config: Mapping[str, Any]
    command: str
    table: Table
    plot: Callable[[Path], None]
    ratios: Mapping[str, float | None] = field(default_factory=dict)
    ratio_direction: str = ""
    notes: Sequence[str] = ()
    headline: str = ""
    beyond_paper: bool = False

    def __post_init__(self) -> None:
        if not _FIGURE_ID.match(self.id):
            raise ExperimentError(f"figure id {self.id!r}: use lower-case letters, digits, '-' and '_'")
        if self.ratios and not self.ratio_direction:
            raise ExperimentError(f"figure {self.id!r}: ratios need a ratio_direction (which way is better)")


@dataclass(frozen=True)
class GridPoint:
    """One point of a figure's grid: every policy of ``policies`` on fresh requests from ``workload`` (the same
    for all), recorded under ``figure_id`` with the constant ``columns`` (e.g. ``{"seed": 1, "load": 0.8}``)."""

    figure_id: str
    workload: Workload
    policies: Sequence[str]
    cluster: ClusterSpec | None = None
    columns: Mapping[str, Any] = field(default_factory=dict)

    def label(self, policy: str) -> str:
        """How a progress bar or an error names one of its runs: ``"fig10 vtc setting=... seed=1 load=0.8"``."""
        return " ".join([self.figure_id, policy, *(f"{key}={value}" for key, value in self.columns.items())])


@dataclass(frozen=True)
class RecordedRun:
    """One policy's simulation for one figure: its requests and the per-request columns it groups by."""

    figure_id: str
    policy: str
    run: PolicyRun
    columns: Mapping[str, Any]

    @property
    def requests(self) -> Sequence[Request]:
        return self.run.requests


class ExperimentContext:
    """The state of one experiment run: its settings, the simulations it made and the figures it recorded."""

    def __init__(self, name: str, *, quick: bool, seed: int, progress: PointProgress | None = None,
                 workload: str | None = None, runner: PointRunner | None = None) -> None:
        self.name = name
        self.quick = quick
        self.seed = seed
        #: a workload spec of the user's (``--workload``), for experiments with a ``workload_help``
        self.workload = workload
        self._progress = progress
        self._runner: PointRunner = runner or InProcess()
        self.figures: list[Figure] = []
        self.runs: list[RecordedRun] = []
        #: the record's claim table (:class:`~semsched.experiments.curves.Claim`), in the order added
        self.claims: list[Any] = []
        #: what the full grid leaves out, when it is cut to fit the time (printed in the report's header)
        self.grid_note = ""

    def run_policies(
        self,
        figure_id: str,
        workload: Workload,
        policies: Sequence[str],
        cluster: ClusterSpec | None = None,
        *,
        columns: Mapping[str, Any] | None = None,
    ) -> dict[str, PolicyRun]:
        """Every policy on fresh requests from ``workload`` (the same for all), recorded for ``requests.csv``
        under ``figure_id``; ``columns`` adds constant columns to those rows (e.g. ``{"rate_per_s": 4}``). The
        policies run in parallel on the context's runner; a whole grid at once is :meth:`run_grid`."""
        return self.run_grid([GridPoint(figure_id, workload, policies, cluster, dict(columns or {}))])[0]

    def run_grid(self, points: Sequence[GridPoint]) -> list[dict[str, PolicyRun]]:
        """Every point's policies, all pairs at once on the context's runner (a pool runs them in parallel); the
        runs per point (by policy) in the points' order, recorded in that order for ``requests.csv``.

        A point must not depend on another's result: a figure that picks its next point from a run (a search)
        hands over one point, or one batch, at a time."""
        pairs = [(point, policy) for point in points for policy in point.policies]
        sims = [SimPoint(point.label(policy), point.workload, policy, point.cluster or ClusterSpec())
                for point, policy in pairs]
        runs = iter(self._runner.run(sims, self._progress))
        results: list[dict[str, PolicyRun]] = []
        for point in points:
            per_policy = {policy: next(runs) for policy in point.policies}
            for policy, run in per_policy.items():
                self.runs.append(RecordedRun(point.figure_id, policy, run, dict(point.columns)))
            results.append(per_policy)
        return results

    def add_claim(self, claim: Any) -> None:
        """A row of the claim table that opens the report (:class:`~semsched.experiments.curves.Claim`)."""
        from semsched.experiments.curves import Claim

        if not isinstance(claim, Claim):
            raise ExperimentError(f"add_claim takes a Claim, got {type(claim).__name__}")
        self.claims.append(claim)

    def add_figure(self, figure: Figure) -> None:
        if any(existing.id == figure.id for existing in self.figures):
            raise ExperimentError(f"figure id {figure.id!r} recorded twice")
        self.figures.append(figure)


@dataclass(frozen=True)
class ExperimentOutcome:
    """Where the report went and the headline of each figure."""

    out: Path
    report: Path
    headlines: tuple[str, ...]
    context: ExperimentContext


def check_out_dir(out: Path, option: str = "--out") -> None:
    """Refuse an output directory that cannot be written or holds something other than an earlier report,
    before anything runs."""
    for parent in (out, *out.parents):
        if parent.exists() and not parent.is_dir():
            raise ExperimentError(f"{option}: {parent} exists and is not a directory")
        if parent.exists():
            break
    if out.is_dir() and any(out.iterdir()) and not (out / REPORT_MARKER).is_file():
        raise ExperimentError(
            f"{option}: {out} is not empty and holds no earlier report ({REPORT_MARKER}); choose another directory"
        )


def run_experiment(
    name: str,
    out: Path,
    *,
    quick: bool = False,
    seed: int = 0,
    progress: PointProgress | None = None,
    command: str = "",
    workload: str | None = None,
    runner: PointRunner | None = None,
) -> ExperimentOutcome:
    """Run experiment ``name`` and write its report to ``out`` (replacing an earlier report there); its
    simulations run on ``runner`` (default: here, one after another), told to ``progress``.

    The report is written to a scratch directory beside ``out`` and moved into place only when complete, so a
    failed run never leaves half a report."""
    from semsched.experiments.report import write_report  # matplotlib: only when a report is written

    experiment = EXPERIMENTS.create(name)
    if workload is not None and not experiment.workload_help:
        raise ExperimentError(f"--workload: experiment {name!r} takes no workload of yours")
    check_out_dir(out)
    ctx = ExperimentContext(name, quick=quick, seed=seed, progress=progress, workload=workload, runner=runner)
    experiment.run(ctx)
    if not ctx.figures:
        raise ExperimentError(f"experiment {name!r} recorded no figure")
    out.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        write_report(ctx, experiment, scratch, command=command)
        if out.exists():
            shutil.rmtree(out)
        scratch.rename(out)
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    headlines = tuple(f"{fig.id}: {fig.headline}" for fig in ctx.figures if fig.headline)
    return ExperimentOutcome(out=out, report=out / "report.md", headlines=headlines, context=ctx)
