"""Independent simulations in parallel: a list of :class:`SimPoint` in, their :class:`PolicyRun` out, in the same
order, whichever runner ran them.

A point is everything one simulation needs (workload, policy spec, cluster, TDG weights), so it gives the same run
in any process and in any order: its seeds are fixed by the grid that made it, not by when it runs. Runners:

* :class:`InProcess` (``--workers 1``): one after another, here;
* :class:`ProcessPool` (``--workers N``): a :class:`~concurrent.futures.ProcessPoolExecutor` of N forked
  processes, made once and kept for every batch of a command;
* :class:`RayRunner` (``--ray [ADDRESS]``): Ray tasks on a local or remote Ray cluster (the ``[ray]`` extra).

Results are gathered in the points' order, so a report written from them is byte-identical for any runner. A
point that fails stops the batch with a :class:`PointError` naming it (the worker's traceback as its cause); the
other points of the batch are cancelled. Ctrl-C cancels the pool too.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Iterator, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ProcessPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

from semsched.core.errors import SemschedError
from semsched.metrics import TDGWeights
from semsched.sim.runner import ClusterSpec, PolicyRun, run_policy
from semsched.workloads import Workload


class PointError(SemschedError):
    """A point of a grid failed; the message names the point, the worker's exception is the cause."""


@dataclass(frozen=True)
class SimPoint:
    """One simulation of a grid: ``policy`` on fresh requests from ``workload`` on ``cluster``. ``label`` names
    it in the progress bar and in errors (e.g. ``"fig10 vtc seed=1 load=0.8"``)."""

    label: str
    workload: Workload
    policy: str
    cluster: ClusterSpec
    fast_forward: bool = True
    #: the TDG weights of the summary (those of the workload when None; a comparison passes one set for all)
    tdg_weights: TDGWeights | None = None


def run_point(point: SimPoint) -> PolicyRun:
    """Simulate one point (what every runner calls, in whatever process it runs)."""
    return run_policy(point.workload, point.policy, point.cluster, fast_forward=point.fast_forward,
                      tdg_weights=point.tdg_weights)


class PointProgress(Protocol):
    """Told how many points a batch adds and when each finishes (in any order)."""

    def planned(self, count: int) -> None: ...

    def finished(self, label: str) -> None: ...


class PointRunner(Protocol):
    """Runs a batch of independent points; the runs come back in the points' order."""

    #: how many points may run at once (1: one after another)
    workers: int

    def run(self, points: Sequence[SimPoint], progress: PointProgress | None = None) -> list[PolicyRun]: ...


def _name(point: SimPoint) -> str:
    return f"point {point.label!r} ({point.policy} on {point.workload.name})"


def _failed(point: SimPoint, error: BaseException) -> BaseException:
    """What a failed point raises: bad input (a :class:`SemschedError`) as a :class:`PointError` naming the point,
    which the CLI prints as one line; anything else (a bug) as itself, its traceback kept, with a note naming
    the point."""
    if isinstance(error, SemschedError):
        failed = PointError(f"{_name(point)}: {error}")
        failed.__cause__ = error
        return failed
    error.add_note(f"(while simulating {_name(point)})")
    return error


class InProcess:
    """Every point here, one after another (``--workers 1``)."""

    workers = 1

    def run(self, points: Sequence[SimPoint], progress: PointProgress | None = None) -> list[PolicyRun]:
        if progress is not None:
            progress.planned(len(points))
        runs = []
        for point in points:
            try:
                runs.append(run_point(point))
            except Exception as error:
                raise _failed(point, error)  # noqa: B904 (the cause is set, or the error is itself)
            if progress is not None:
                progress.finished(point.label)
        return runs


class ProcessPool:
    """``workers`` forked processes (made once, at construction, before any thread of the caller's progress bar
    starts, so that no lock is copied held); :meth:`close` (or the context manager) shuts them down."""

    def __init__(self, workers: int) -> None:
        if workers < 2:
            raise ValueError(f"workers: a pool needs >= 2 (got {workers}); use InProcess for 1")
        self.workers = workers
        # fork: the workers start in milliseconds with semsched and its data caches already imported; spawn would
        # import everything again in each. The pool is made before the caller starts any thread.
        context = multiprocessing.get_context("fork" if os.name == "posix" else "spawn")
        self._executor = ProcessPoolExecutor(max_workers=workers, mp_context=context)
        # start every worker now (a fork executor starts them all at its first submit)
        self._executor.submit(int).result()

    def run(self, points: Sequence[SimPoint], progress: PointProgress | None = None) -> list[PolicyRun]:
        if progress is not None:
            progress.planned(len(points))
        futures: list[Future[PolicyRun]] = [self._executor.submit(run_point, point) for point in points]
        owner = {future: point for future, point in zip(futures, points, strict=True)}
        pending: set[Future[PolicyRun]] = set(futures)
        # a failed point or Ctrl-C leaves the rest to close(cancel=True) (point_runner calls it): cancelling the
        # futures here as well would crash the executor's manager thread once the workers are terminated (Python
        # 3.11 sets BrokenProcessPool on the cancelled futures too) and hang the interpreter's exit
        while pending:
            done, pending = wait(pending, return_when=FIRST_EXCEPTION)
            for future in done:
                error = future.exception()
                if error is not None:
                    raise _failed(owner[future], error)
                if progress is not None:
                    progress.finished(owner[future].label)
        return [future.result() for future in futures]

    def close(self, *, cancel: bool = False) -> None:
        """Shut the workers down: when the batch is done, or (``cancel``: after an error or Ctrl-C) at once, the
        simulations still running stopped too (a worker would otherwise finish its point before exiting)."""
        # the executor has no public way to stop a running task: its processes are terminated directly
        workers = list((getattr(self._executor, "_processes", None) or {}).values()) if cancel else []
        self._executor.shutdown(wait=not cancel, cancel_futures=cancel)
        for worker in workers:
            worker.terminate()


class RayRunner:
    """Every point as a Ray task (``--ray [ADDRESS]``): ``address`` of a running cluster, or None for a local Ray
    started here (``num_cpus`` of this machine's cores, or all). Needs the ``[ray]`` extra; the workers import
    semsched, so it must be installed on every node."""

    def __init__(self, address: str | None = None, *, num_cpus: int | None = None) -> None:
        try:
            import ray
        except ImportError:
            raise PointError("--ray: Ray is not installed; pip install 'semsched[ray]'") from None
        self._ray: Any = ray  # untyped
        self._started = not self._ray.is_initialized()
        if self._started:
            kwargs: dict[str, Any] = {"address": address, "include_dashboard": False, "log_to_driver": False}
            if address is None and num_cpus is not None:
                kwargs["num_cpus"] = num_cpus
            self._ray.init(**kwargs)
        self.workers = max(1, int(self._ray.cluster_resources().get("CPU", 1)))
        self._task = self._ray.remote(num_cpus=1)(run_point)

    def run(self, points: Sequence[SimPoint], progress: PointProgress | None = None) -> list[PolicyRun]:
        ray = self._ray
        if progress is not None:
            progress.planned(len(points))
        refs = [self._task.remote(point) for point in points]
        owner = {ref: point for ref, point in zip(refs, points, strict=True)}
        pending = list(refs)
        try:
            while pending:
                done, pending = ray.wait(pending, num_returns=1)
                for ref in done:
                    try:
                        ray.get(ref)
                    except Exception as error:  # a RayTaskError: the worker's exception is its cause
                        cause = getattr(error, "cause", None)
                        raise _failed(owner[ref], cause if isinstance(cause, Exception) else error) from error
                    if progress is not None:
                        progress.finished(owner[ref].label)
        except BaseException:
            for ref in pending:
                ray.cancel(ref, force=True)
            raise
        return list(ray.get(refs))

    def close(self, *, cancel: bool = False) -> None:
        if self._started:
            self._ray.shutdown()


def default_workers() -> int:
    """All the cores this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


@contextmanager
def point_runner(workers: int = 1, *, ray_address: str | None = None, ray: bool = False) -> Iterator[PointRunner]:
    """The runner for ``--workers``/``--ray``, shut down on exit (cancelling what is left after an error or
    Ctrl-C)."""
    runner: InProcess | ProcessPool | RayRunner
    if ray:
        runner = RayRunner(ray_address, num_cpus=None if ray_address else workers)
    elif workers > 1:
        runner = ProcessPool(workers)
    else:
        runner = InProcess()
    try:
        yield runner
    except BaseException:
        if not isinstance(runner, InProcess):
            runner.close(cancel=True)
        raise
    if not isinstance(runner, InProcess):
        runner.close()
