"""Experiment registry: one decorator, one lookup; the package ``__init__`` imports every module it finds.

An experiment reproduces one document's figures (or the demo's comparison) with semsched's own code. It is a
small class in its own file::

    @register_experiment
    class Demo(Experiment):
        name = "demo"
        summary = "every policy on the embedded default workload at ~90 % load"

        def run(self, ctx: ExperimentContext) -> None:
            runs = ctx.run_policies("comparison", workload, policies, cluster)
            ctx.add_figure(Figure(id="comparison", ...))

The framework (:mod:`semsched.experiments.framework`) runs the policies with a progress callback, keeps every
request for ``requests.csv`` and writes ``report.md``, ``results.json`` and the PNGs
(:mod:`semsched.experiments.report`), following ../shared/EXPERIMENTS.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, TypeVar

from semsched.core.errors import SemschedError

if TYPE_CHECKING:
    from semsched.experiments.framework import ExperimentContext


class ExperimentError(SemschedError):
    """Unknown experiment, or an experiment's settings are invalid; the message says which and why."""


class Experiment:
    """One reproduction. Subclasses set ``name`` and ``summary`` and implement :meth:`run`.

    ``run`` must use ``ctx.quick`` to pick a reduced grid (the whole ``--quick`` run takes under two minutes on
    a 2-core machine) and ``ctx.seed`` (and seeds derived from it) for every random choice, so that the same
    command gives the same report. It records its figures with ``ctx.add_figure``; every number in a figure
    must come from the runs it made through ``ctx``.
    """

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    source: ClassVar[str] = ""
    #: what ``semsched reproduce NAME --workload SPEC`` does with a workload of the user's (empty: it takes none)
    workload_help: ClassVar[str] = ""
    """The document it reproduces (a path under ../shared/seeds), or empty for semsched's own experiments."""

    def run(self, ctx: ExperimentContext) -> None:
        raise NotImplementedError


E = TypeVar("E", bound=type[Experiment])


class ExperimentRegistry:
    """Maps names to experiment classes. The package keeps one instance, :data:`EXPERIMENTS`."""

    def __init__(self) -> None:
        self._classes: dict[str, type[Experiment]] = {}

    def register(self, cls: E) -> E:
        if not cls.name or not cls.summary:
            raise ExperimentError(f"{cls.__name__}: an experiment needs a name and a one-line summary")
        if cls.name in self._classes and self._classes[cls.name] is not cls:
            raise ExperimentError(f"experiment name {cls.name!r} registered twice")
        self._classes[cls.name] = cls
        return cls

    def unregister(self, name: str) -> None:
        """Forget ``name`` (for tests that register an experiment for a while)."""
        self._classes.pop(name, None)

    def names(self) -> list[str]:
        return sorted(self._classes)

    def get(self, name: str) -> type[Experiment]:
        try:
            return self._classes[name]
        except KeyError:
            known = ", ".join(self.names()) or "none"
            raise ExperimentError(f"unknown experiment {name!r}; known: {known}") from None

    def create(self, name: str) -> Experiment:
        return self.get(name)()


EXPERIMENTS = ExperimentRegistry()


def register_experiment(cls: E) -> E:
    """Class decorator: make ``cls`` available to ``semsched reproduce`` under ``cls.name``."""
    return EXPERIMENTS.register(cls)
