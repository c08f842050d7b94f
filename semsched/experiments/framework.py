"""What an experiment works with: :class:`ExperimentContext` (runs, figures), :class:`Figure`, and
:func:`run_experiment`, which runs one registered experiment and writes its report.

Every policy of a figure runs on the same requests: :meth:`ExperimentContext.run_policies` takes one
:class:`~semsched.workloads.Workload` and gives each policy fresh requests from it, on the same cluster, in the
same process (:func:`semsched.sim.runner.compare_policies`). The requests are kept, with the figure's id, for
``requests.csv``.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from semsched.core.request import Request
from semsched.experiments.registry import EXPERIMENTS, ExperimentError
from semsched.sim.engine import ProgressCallback
from semsched.sim.runner import ClusterSpec, PolicyRun, compare_policies
from semsched.workloads import Workload

_FIGURE_ID = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
REPORT_MARKER = "results.json"
"""A directory holding this file is a report directory: ``reproduce`` may replace it."""


class RunProgress(Protocol):
    """Told when each simulation of an experiment starts; returns the callback the simulation advances."""

    def start(self, label: str, total: int) -> ProgressCallback: ...


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

    def __init__(self, name: str, *, quick: bool, seed: int, progress: RunProgress | None = None,
                 workload: str | None = None) -> None:
        self.name = name
        self.quick = quick
        self.seed = seed
        #: a workload spec of the user's (``--workload``), for experiments with a ``workload_help``
        self.workload = workload
        self._progress = progress
        self.figures: list[Figure] = []
        self.runs: list[RecordedRun] = []

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
        under ``figure_id``; ``columns`` adds constant columns to those rows (e.g. ``{"rate_per_s": 4}``)."""
        runs: dict[str, PolicyRun] = {}
        for policy in policies:
            callback = self._progress.start(f"{figure_id} {policy}", len(workload)) if self._progress else None
            runs |= compare_policies(workload, [policy], cluster, progress=callback)
            self.runs.append(RecordedRun(figure_id, policy, runs[policy], dict(columns or {})))
        return runs

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
    progress: RunProgress | None = None,
    command: str = "",
    workload: str | None = None,
) -> ExperimentOutcome:
    """Run experiment ``name`` and write its report to ``out`` (replacing an earlier report there).

    The report is written to a scratch directory beside ``out`` and moved into place only when complete, so a
    failed run never leaves half a report."""
    from semsched.experiments.report import write_report  # matplotlib: only when a report is written

    experiment = EXPERIMENTS.create(name)
    if workload is not None and not experiment.workload_help:
        raise ExperimentError(f"--workload: experiment {name!r} takes no workload of yours")
    check_out_dir(out)
    ctx = ExperimentContext(name, quick=quick, seed=seed, progress=progress, workload=workload)
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
