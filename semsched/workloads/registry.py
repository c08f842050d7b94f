"""Named workloads: ``build_workload("azure-conv", rate_per_s=4, duration_s=600, seed=0)``.

Each builder is one small function registered with :func:`register`. It receives the build parameters and a
generator created from the seed, and returns an untiered workload; :func:`build_workload` then draws
tiers from the same generator, so the same arguments always give the identical workload.

Registered names
----------------
* ``azure-conv`` / ``azure-code``: Poisson arrivals at ``rate_per_s``; lengths sampled from the packaged
  quantile fit of the Azure 2023 conversation / code trace (no data file needed).
* ``azure-conv-trace`` / ``azure-code-trace``: the real trace files from the shared data directory,
  rescaled to ``rate_per_s`` and cut to ``duration_s`` if given.
* ``spikes``: seed 000's request spikes (up to :data:`SPIKE_MAX_CONCURRENT` simultaneous requests per spike)
  with the gap between spikes chosen so that the mean rate is ``rate_per_s``: for example 505 requests/s gives
  the seed's 0.1 s gap and 50.5 requests/s its 1.0 s gap. Lengths from the conversation fit.
* ``gamma-conv``: bursty gamma arrivals (gap coefficient of variation :data:`GAMMA_CONV_CV`) with
  conversation-fit lengths.

A path ending in ``.csv`` (Azure format) or ``.jsonl`` (Mooncake format) is also accepted as a name; it is
treated like a ``*-trace`` workload. Tiers found in a JSONL file are kept; otherwise tiers are drawn.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

import numpy as np
import numpy.typing as npt

from semsched.core.tiers import DEFAULT_TIERS, UNTIERED, TierSpec
from semsched.workloads.arrivals import (
    gamma_arrivals,
    gamma_arrivals_until,
    mean_spike_size,
    poisson_arrivals,
    poisson_arrivals_until,
    spike_arrivals,
)
from semsched.workloads.lengths import LengthSampler, fitted_lengths
from semsched.workloads.tiers import assign_tiers
from semsched.workloads.traces import find_data_file, load_azure_csv, load_mooncake_jsonl, rescale_to_rate
from semsched.workloads.workload import Workload, WorkloadError

SPIKE_MAX_CONCURRENT = 100
GAMMA_CONV_CV = 3.0
TRACE_SUFFIXES = (".csv", ".jsonl")


@dataclass(frozen=True)
class WorkloadParams:
    """What a builder is asked for: mean rate, and a time span and/or a request count (at least one)."""

    rate_per_s: float
    duration_s: float | None = None
    num_requests: int | None = None

    def __post_init__(self) -> None:
        if not math.isfinite(self.rate_per_s) or self.rate_per_s <= 0:
            raise WorkloadError(f"rate_per_s: must be a finite number > 0 (got {self.rate_per_s!r})")
        if self.duration_s is not None and (not math.isfinite(self.duration_s) or self.duration_s <= 0):
            raise WorkloadError(f"duration_s: must be a finite number > 0 or None (got {self.duration_s!r})")
        if self.num_requests is not None and self.num_requests < 1:
            raise WorkloadError(f"num_requests: must be >= 1 or None (got {self.num_requests!r})")


WorkloadBuilder = Callable[[WorkloadParams, np.random.Generator], Workload]

_BUILDERS: dict[str, WorkloadBuilder] = {}
WORKLOADS: Mapping[str, WorkloadBuilder] = MappingProxyType(_BUILDERS)
"""Read-only view of the registered builders, by name."""


def register(name: str) -> Callable[[WorkloadBuilder], WorkloadBuilder]:
    """Class-free plug-in point: ``@register("my-workload")`` on a builder function."""

    def decorate(builder: WorkloadBuilder) -> WorkloadBuilder:
        if name in _BUILDERS:
            raise WorkloadError(f"register: a workload named {name!r} is already registered")
        _BUILDERS[name] = builder
        return builder

    return decorate


def build_workload(
    name: str,
    *,
    rate_per_s: float,
    duration_s: float | None = None,
    seed: int,
    tiers: Sequence[TierSpec] = DEFAULT_TIERS,
    num_requests: int | None = None,
) -> Workload:
    """Build the named workload (or load a ``.csv``/``.jsonl`` trace path) with tiers drawn from ``tiers``.

    Synthetic workloads need ``duration_s`` or ``num_requests``; with both, requests stop at whichever limit
    comes first. Unknown names raise :class:`WorkloadError` listing the known ones.
    """
    params = WorkloadParams(rate_per_s, duration_s, num_requests)
    rng = np.random.default_rng(seed)
    builder = _builder_for(name)
    workload = builder(params, rng)
    if _is_untiered(workload):
        workload = assign_tiers(workload, tuple(tiers), rng)
    return workload


def _builder_for(name: str) -> WorkloadBuilder:
    if name in _BUILDERS:
        return _BUILDERS[name]
    if name.endswith(TRACE_SUFFIXES):
        return lambda params, rng: _trace_workload(Path(name), params)
    raise WorkloadError(
        f"unknown workload {name!r}; known: {sorted(_BUILDERS)} or a path ending in {list(TRACE_SUFFIXES)}"
    )


def _is_untiered(workload: Workload) -> bool:
    return all(spec.name == UNTIERED.name for spec in workload.tiers)


# ---- synthetic -------------------------------------------------------------------------------------------
def _synthetic(
    name: str, arrival_time_s: npt.NDArray[np.float64], lengths: LengthSampler, rng: np.random.Generator
) -> Workload:
    prompt_tokens, output_tokens = lengths.sample(arrival_time_s.size, rng)
    return Workload.untiered(name, arrival_time_s, prompt_tokens, output_tokens)


def _cap(times_s: npt.NDArray[np.float64], params: WorkloadParams) -> npt.NDArray[np.float64]:
    return times_s if params.num_requests is None else times_s[: params.num_requests]


def _poisson_times(params: WorkloadParams, rng: np.random.Generator) -> npt.NDArray[np.float64]:
    if params.duration_s is None:
        return poisson_arrivals(params.rate_per_s, _required_count(params), rng)
    return _cap(poisson_arrivals_until(params.rate_per_s, params.duration_s, rng), params)


def _gamma_times(params: WorkloadParams, cv: float, rng: np.random.Generator) -> npt.NDArray[np.float64]:
    if params.duration_s is None:
        return gamma_arrivals(params.rate_per_s, cv, _required_count(params), rng)
    return _cap(gamma_arrivals_until(params.rate_per_s, cv, params.duration_s, rng), params)


def _spike_times(params: WorkloadParams, rng: np.random.Generator) -> npt.NDArray[np.float64]:
    gap_s = mean_spike_size(SPIKE_MAX_CONCURRENT) / params.rate_per_s
    # without a duration, one spike per requested request is always enough (each spike holds >= 1)
    duration_s = params.duration_s if params.duration_s is not None else gap_s * _required_count(params)
    return _cap(spike_arrivals(gap_s, SPIKE_MAX_CONCURRENT, duration_s, rng), params)


def _required_count(params: WorkloadParams) -> int:
    if params.num_requests is None:
        raise WorkloadError("duration_s or num_requests: a synthetic workload needs at least one of them")
    return params.num_requests


@register("azure-conv")
def _azure_conv(params: WorkloadParams, rng: np.random.Generator) -> Workload:
    return _synthetic("azure-conv", _poisson_times(params, rng), fitted_lengths("azure-conv"), rng)


@register("azure-code")
def _azure_code(params: WorkloadParams, rng: np.random.Generator) -> Workload:
    return _synthetic("azure-code", _poisson_times(params, rng), fitted_lengths("azure-code"), rng)


@register("spikes")
def _spikes(params: WorkloadParams, rng: np.random.Generator) -> Workload:
    return _synthetic("spikes", _spike_times(params, rng), fitted_lengths("azure-conv"), rng)


@register("gamma-conv")
def _gamma_conv(params: WorkloadParams, rng: np.random.Generator) -> Workload:
    times_s = _gamma_times(params, GAMMA_CONV_CV, rng)
    return _synthetic("gamma-conv", times_s, fitted_lengths("azure-conv"), rng)


# ---- traces ----------------------------------------------------------------------------------------------
def _trace_workload(path: Path, params: WorkloadParams) -> Workload:
    workload = load_mooncake_jsonl(path) if path.suffix == ".jsonl" else load_azure_csv(path)
    workload = rescale_to_rate(workload, params.rate_per_s)
    if params.duration_s is not None:
        workload = workload.slice_time(0.0, params.duration_s)
    if params.num_requests is not None:
        workload = workload.head(params.num_requests)
    return workload


@register("azure-conv-trace")
def _azure_conv_trace(params: WorkloadParams, rng: np.random.Generator) -> Workload:
    return _trace_workload(find_data_file("azure_llm_2023_conv.csv"), params).with_name("azure-conv-trace")


@register("azure-code-trace")
def _azure_code_trace(params: WorkloadParams, rng: np.random.Generator) -> Workload:
    return _trace_workload(find_data_file("azure_llm_2023_code.csv"), params).with_name("azure-code-trace")
