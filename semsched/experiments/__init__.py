"""Reproductions of the seed documents' experiments (``semsched reproduce NAME``), one file per experiment.

Adding one means writing one module in this package with a ``@register_experiment`` class; nothing else
changes. The contract every experiment follows is ../shared/EXPERIMENTS.md: the same requests for every policy
of a figure, ``report.md`` + ``results.json`` + one PNG per figure + ``requests.csv``, and a ``--quick`` grid.
"""

from __future__ import annotations

import importlib
import pkgutil

from semsched.experiments.framework import ExperimentContext, Figure, GridPoint, run_experiment
from semsched.experiments.registry import EXPERIMENTS, Experiment, ExperimentError, register_experiment

_INFRASTRUCTURE = {"framework", "registry", "report", "plots", "numbers"}

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
