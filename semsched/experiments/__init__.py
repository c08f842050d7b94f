"""Reproductions of the seed documents' experiments (``semsched reproduce NAME``), one file per experiment.

Adding one means writing one module in this package with a ``@register_experiment`` class; nothing else
changes. The contract every experiment follows is ../shared/EXPERIMENTS.md: the same requests for every policy
of a figure, ``report.md`` + ``results.json`` + one PNG per figure + ``requests.csv``, and a ``--quick`` grid.

Infrastructure:

* ``registry``: ``@register_experiment``, ``Experiment`` (``name``, ``summary``, ``run(ctx)``).
* ``framework``: ``ExperimentContext`` (``run_policies``: every policy on fresh requests from one workload,
  recorded for ``requests.csv``; ``run_grid``: whole grids handed to the ``--workers``/``--ray`` runner of
  :mod:`semsched.sim.parallel`), ``Figure`` (paper vs ours, config, command, table, ratios with their direction,
  notes, plot), ``run_experiment`` (writes to a scratch directory and moves it into place, so a failed run
  leaves no half report).
* ``report``: ``report.md``, ``results.json``, ``requests.csv``, one PNG per figure; ``record`` copies a full run
  into ``docs/reproductions/`` and refuses one that is not a readable record (no claim table, over 20k
  characters, a table cell with more than three numbers). ``plots``: each policy always in the same colour.
  ``numbers``: medians, ratios and table cells the experiments share.
* ``curves``: a headline as a curve (``LoadCurve``: per-seed values over load, median with min-max band, ours
  vs the best baseline per load, the largest-gain load, the loads where ours holds, collapses shown), and the
  claim table's rows (``Claim``, ``ratio_verdict``) that ``ctx.add_claim`` puts at the top of a report.

Experiments (``semsched reproduce NAME``):

* ``semantic`` (seed 000): predictor accuracy, latency and batching, request spikes against FCFS, SJF and HPJF,
  the emergency department on real triage data.
* ``proserve`` (seed 001): TDG ratio and SLO attainment against load versus vLLM-FCFS, weighted VTC,
  Sarathi-FCFS/-Priority and FairBatching; per-priority, ablation and priority-weight figures; the estimator's
  MAPE; PD and co-located clusters, GoRouting vs Min-Load.
* ``sagesched`` (seed 002): mean TTLT and TTFT against rate versus FCFS, FastServe, SSJF, LTR and TRAIL with real
  lengths and online predictors; ablations; overhead per request against cluster size.
* ``tiers`` (seed 003): the tier table's comparison as curves over a measured capacity, the SLO scale and load
  the article leaves open and its windowed p99 statistic, the cost table priced with
  :mod:`semsched.latency.roofline`, starvation, reservation sweep.
* ``laps-sd`` (seed 004): the Spec-Bench and MBPP logs replayed at batch 1, LAPS-SD (the paper's and ours)
  against LP-SJF, LAS and FCFS; K = 2-10; beyond the paper: a predictor instead of the oracle, Poisson arrivals.
* ``demo``: every baseline policy on the embedded workload (``semsched demo``).
* ``scoreboard`` (issue 31): every registered policy and each seed's tuned spec on one benchmark per seed plus
  long-context and production traffic, over load and seeds: the regret table and heatmap, ``utility``'s targets
  as the claim table. ``scoreboard.contenders`` and ``priced_with`` are what ``advise`` uses too.

Not an experiment: ``advise`` (``semsched advise``) replays the scoreboard's contenders on a user's own trace over
a load range and picks the one with the smallest worst regret in tier-weighted goodput.
"""

from __future__ import annotations

import importlib
import pkgutil

from semsched.experiments.framework import ExperimentContext, Figure, GridPoint, run_experiment
from semsched.experiments.registry import EXPERIMENTS, Experiment, ExperimentError, register_experiment

_INFRASTRUCTURE = {"framework", "registry", "report", "plots", "numbers", "curves"}

for _module in pkgutil.iter_modules(__path__):
    if _module.name not in _INFRASTRUCTURE:
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = [
    "EXPERIMENTS",
    "Experiment",
    "ExperimentContext",
    "ExperimentError",
    "Figure",
    "GridPoint",
    "register_experiment",
    "run_experiment",
]
