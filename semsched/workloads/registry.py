"""Named workloads and their specs: ``build_workload("spikes:gap_s=0.1;max_concurrent=100", rate_per_s=4,
duration_s=600, seed=0)``.

A workload spec has the syntax of a policy spec (:mod:`semsched.core.specs`): ``name:key=value;key=value``.
Each workload is one small builder function registered with :func:`register_workload` together with its frozen
config dataclass (a :class:`WorkloadConfig`), whose fields are the parameters a spec may set; an unknown key,
a repeated key or a bad value is a :class:`WorkloadError` naming it. :func:`describe_workloads` lists every
workload with its parameters, defaults and types.

The builder receives its config, the :class:`BuildArgs` (rate, and a time span and/or a request count) and a
generator created from the seed, and returns an untiered workload; :func:`build_workload` then applies the
length caps and draws tiers from the same generator, so the same arguments always give the identical workload.

Size. Before anything is drawn, the number of requests the arguments would give is computed (the expected
number for a random arrival process; a trace's is known once it is read and cut) and a workload above
``max_requests`` (default :data:`DEFAULT_MAX_REQUESTS`) is refused with a message that says how many.

Registered names
----------------
* ``azure-conv`` / ``azure-code``: Poisson arrivals at ``rate_per_s``; lengths sampled from the packaged
  quantile fit of the Azure 2023 conversation / code trace (no data file needed).
* ``azure-conv-trace`` / ``azure-code-trace``: the real trace files from the shared data directory,
  rescaled to ``rate_per_s`` (unless ``rescale=false``) and cut to ``duration_s`` if given.
* ``trace:path=FILE``: the same for any Azure-format ``.csv`` or Mooncake-format ``.jsonl`` file. A bare path
  ending in ``.csv`` or ``.jsonl`` is accepted as a spec too (with default parameters). Tiers found in a JSONL
  file are kept; otherwise tiers are drawn.
* ``spikes``: seed 000's request spikes: every ``gap_s`` seconds a batch of a uniformly random number of
  requests between 1 and ``max_concurrent`` (default :data:`SPIKE_MAX_CONCURRENT`). Without ``gap_s`` the gap
  is chosen so that the mean rate is ``rate_per_s`` (505 requests/s gives the seed's 0.1 s gap with 100
  concurrent requests, 50.5 requests/s its 1.0 s gap); with it, ``rate_per_s`` is not used. Lengths from the
  conversation fit, outputs capped at seed 000's 500 tokens (``max_output_tokens``, default
  :data:`SPIKE_MAX_OUTPUT_TOKENS` here). Each request gets an urgency level from 0 (most urgent) to
  ``urgency_levels - 1``, drawn uniformly (or by ``urgency_weights``) from a generator of its own, so the
  arrivals, lengths and tiers of a seed do not depend on it; ``urgency_error`` makes that fraction of the
  believed levels wrong (seed 000's noisy oracle, the true levels kept as ``urgency_true``).
* ``gamma-conv``: bursty gamma arrivals (gap coefficient of variation ``cv``, default :data:`GAMMA_CONV_CV`)
  with conversation-fit lengths.
* ``ktas-ed``: seed 000's emergency department, patients of the KTAS triage file in spikes, urgency from their
  KTAS level (:mod:`semsched.workloads.ktas_ed`, registered when :mod:`semsched.workloads` is imported).

Every workload also takes ``max_prompt_tokens`` / ``max_output_tokens`` (longer requests are cut to the cap,
e.g. to fit a model's context; no cap by default, except in ``spikes``) and ``tier_weights`` (one weight per
tier of the tier table, ``/``-separated, e.g. ``tier_weights=5/20/50/25`` for SYSTEM/PREMIUM/STANDARD/BACKGROUND;
default: each tier's own weight) and ``clients`` (each request sent by one of N clients, ``client-0`` ...,
drawn uniformly from a side stream of the seed; a trace with a ``client`` column names them itself).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from semsched.core.specs import ParameterInfo, SpecSyntax, describe_parameters
from semsched.core.tiers import DEFAULT_TIERS, UNTIERED, TierSpec
from semsched.workloads.arrivals import (
    expected_spike_requests,
    gamma_arrivals,
    gamma_arrivals_until,
    mean_spike_size,
    poisson_arrivals,
    poisson_arrivals_until,
    spike_arrivals,
)
from semsched.workloads.lengths import LengthSampler, fitted_lengths
from semsched.workloads.tiers import assign_tiers
from semsched.workloads.traces import (
    MAX_LENGTH_TOKENS,
    find_data_file,
    load_azure_csv,
    load_mooncake_jsonl,
    rescale_to_rate,
)
from semsched.workloads.urgency import URGENCY_STREAM, draw_urgency, side_stream, with_believed_urgency
from semsched.workloads.workload import Workload, WorkloadError

DEFAULT_MAX_REQUESTS = 1_000_000
"""The most requests :func:`build_workload` creates unless its ``max_requests`` says otherwise."""
SPIKE_MAX_CONCURRENT = 100
SPIKE_MAX_OUTPUT_TOKENS = 500
"""Seed 000's longest output in the spike experiments: the default ``max_output_tokens`` of ``spikes``."""
SPIKE_URGENCY_LEVELS = 5
MAX_URGENCY_LEVELS = 1_000
MAX_SPIKE_CONCURRENT = 1_000_000
#: most clients ``clients=N`` may draw from
MAX_CLIENTS = 1_000_000
#: the spawn key of the generator clients are drawn from (urgency has URGENCY_STREAM)
CLIENT_STREAM = 2
GAMMA_CONV_CV = 3.0
GAMMA_CV_RANGE = (0.01, 100.0)
TRACE_SUFFIXES = (".csv", ".jsonl")

_SYNTAX = SpecSyntax("workload", WorkloadError)


# ---- what a builder is asked for -------------------------------------------------------------------------
@dataclass(frozen=True)
class BuildArgs:
    """What every builder is asked for: mean rate, and a time span and/or a request count (at least one)."""

    rate_per_s: float
    duration_s: float | None = None
    num_requests: int | None = None

    def __post_init__(self) -> None:
        if not is_finite_number(self.rate_per_s) or self.rate_per_s <= 0:
            raise WorkloadError(f"rate_per_s: must be a finite number > 0 (got {self.rate_per_s!r})")
        if self.duration_s is not None and (not is_finite_number(self.duration_s) or self.duration_s <= 0):
            raise WorkloadError(f"duration_s: must be a finite number > 0 or None (got {self.duration_s!r})")
        if self.num_requests is not None and (not is_int(self.num_requests) or self.num_requests < 1):
            raise WorkloadError(f"num_requests: must be an integer >= 1 or None (got {self.num_requests!r})")

    def required_count(self) -> int:
        if self.num_requests is None:
            raise WorkloadError("duration_s or num_requests: a synthetic workload needs at least one of them")
        return self.num_requests

    def renewal_count(self) -> float:
        """Expected requests of a renewal process at ``rate_per_s`` under these limits."""
        if self.duration_s is None:
            return float(self.required_count())
        expected = self.rate_per_s * self.duration_s  # may be inf: refused by the size check
        return expected if self.num_requests is None else min(expected, float(self.num_requests))


# ---- parameters ------------------------------------------------------------------------------------------
def parameter(default: Any, doc: str) -> Any:
    """A config field with its default and the one-line doc listings show."""
    return field(default=default, metadata={"doc": doc})


@dataclass(frozen=True)
class WorkloadConfig:
    """The parameters every workload takes; each workload's config adds its own fields.

    Subclasses check their fields in ``__post_init__`` (calling this one) and say in
    :meth:`expected_requests` how many requests the build arguments would give.
    """

    max_prompt_tokens: int | None = parameter(None, "prompts longer than this are cut to it")
    max_output_tokens: int | None = parameter(None, "outputs longer than this are cut to it")
    tier_weights: tuple[float, ...] | None = parameter(
        None, "one weight per tier, '/'-separated, in tier-table order (default: the tiers' own weights)"
    )

    clients: int | None = parameter(
        None, "each request sent by one of this many clients (client-0, client-1, ...), drawn uniformly "
              "(default: none; vtc then counts each priority as a client)"
    )

    def __post_init__(self) -> None:
        for name in ("max_prompt_tokens", "max_output_tokens"):
            value = getattr(self, name)
            if value is not None and (not is_int(value) or not 1 <= value <= MAX_LENGTH_TOKENS):
                raise WorkloadError(f"{name}: must be an integer from 1 to {MAX_LENGTH_TOKENS} (got {value!r})")
        check_weights("tier_weights", self.tier_weights)
        if self.clients is not None and (not is_int(self.clients) or not 1 <= self.clients <= MAX_CLIENTS):
            raise WorkloadError(f"clients: must be an integer from 1 to {MAX_CLIENTS:,} (got {self.clients!r})")

    def expected_requests(self, args: BuildArgs) -> float | None:
        """How many requests ``args`` would give, computed before anything is drawn; None when that is known
        only once the data is read (traces)."""
        return None

    @property
    def uses_rate(self) -> bool:
        """Whether ``rate_per_s`` shapes the workload (not for spikes with an explicit ``gap_s``, nor for a
        trace kept at its own timing): a caller that sweeps rates can say so instead of repeating one run."""
        return True


@dataclass(frozen=True)
class PoissonConfig(WorkloadConfig):
    """Poisson arrivals at ``rate_per_s``."""

    def expected_requests(self, args: BuildArgs) -> float | None:
        return args.renewal_count()


@dataclass(frozen=True)
class GammaConfig(WorkloadConfig):
    """Gamma-renewal arrivals at ``rate_per_s`` whose gaps have coefficient of variation ``cv``."""

    cv: float = parameter(GAMMA_CONV_CV, "coefficient of variation of the gaps (1 = Poisson, > 1 = bursty)")

    def __post_init__(self) -> None:
        super().__post_init__()
        low, high = GAMMA_CV_RANGE
        if not is_finite_number(self.cv) or not low <= self.cv <= high:
            raise WorkloadError(f"cv: must be a number from {low:g} to {high:g} (got {self.cv!r})")

    def expected_requests(self, args: BuildArgs) -> float | None:
        return args.renewal_count()


@dataclass(frozen=True)
class SpikesConfig(WorkloadConfig):
    """Seed 000's spikes: every ``gap_s`` a batch of 1 to ``max_concurrent`` requests (uniform), each with an
    urgency level drawn at random; outputs capped at seed 000's 500 tokens unless ``max_output_tokens`` says
    otherwise."""

    max_output_tokens: int | None = parameter(SPIKE_MAX_OUTPUT_TOKENS, "outputs longer than this are cut to it")
    gap_s: float | None = parameter(None, "seconds between spikes (default: the gap that gives rate_per_s)")
    max_concurrent: int = parameter(SPIKE_MAX_CONCURRENT, "each spike holds 1 to this many requests, uniformly")
    urgency_levels: int = parameter(SPIKE_URGENCY_LEVELS, "urgency levels, 0 = most urgent; one drawn per request")
    urgency_weights: tuple[float, ...] | None = parameter(
        None, "one weight per urgency level, '/'-separated, most urgent first (default: uniform)"
    )
    urgency_error: float = parameter(
        0.0, "fraction of requests whose believed urgency is wrong (seed 000's noisy oracle; 0 = exact)"
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        check_spikes(self.gap_s, self.max_concurrent)
        self._check_urgency()

    def _check_urgency(self) -> None:
        levels = self.urgency_levels
        if not is_int(levels) or not 1 <= levels <= MAX_URGENCY_LEVELS:
            limit = f"{MAX_URGENCY_LEVELS:,}"
            raise WorkloadError(f"urgency_levels: must be an integer from 1 to {limit} (got {levels!r})")
        check_weights("urgency_weights", self.urgency_weights, count=levels, of="urgency level")
        check_fraction("urgency_error", self.urgency_error)
        if self.urgency_error > 0 and levels < 2:
            raise WorkloadError("urgency_error: a wrong label needs at least 2 urgency levels (urgency_levels=1)")

    @property
    def uses_rate(self) -> bool:
        return self.gap_s is None

    def gap_for(self, args: BuildArgs) -> float:
        """``gap_s`` if given, else the gap whose mean rate is ``args.rate_per_s``."""
        if self.gap_s is not None:
            return self.gap_s
        return mean_spike_size(self.max_concurrent) / args.rate_per_s

    def expected_requests(self, args: BuildArgs) -> float | None:
        if args.duration_s is None:
            args.required_count()
        return expected_spike_requests(self.gap_for(args), self.max_concurrent, args.duration_s, args.num_requests)


@dataclass(frozen=True)
class TraceConfig(WorkloadConfig):
    """A recorded trace, rescaled to ``rate_per_s`` unless ``rescale`` is false."""

    rescale: bool = parameter(True, "stretch the trace's gaps to rate_per_s (false: keep its own timing)")

    @property
    def uses_rate(self) -> bool:
        return self.rescale


@dataclass(frozen=True)
class TraceFileConfig(TraceConfig):
    """A trace read from ``path``."""

    path: str = parameter("", "an Azure-format .csv or Mooncake-format .jsonl trace file (required)")
    prefix_block_size: int = parameter(16, "a Mooncake trace's hash_ids become prefix hashes of blocks this long "
                                           "(the engine's --block-size)")

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.path:
            raise WorkloadError("path: required, a .csv (Azure format) or .jsonl (Mooncake format) file")
        if not self.path.endswith(TRACE_SUFFIXES):
            raise WorkloadError(f"path: must end in {' or '.join(TRACE_SUFFIXES)} (got {self.path!r})")
        if isinstance(self.prefix_block_size, bool) or not isinstance(self.prefix_block_size, int) or (
                self.prefix_block_size < 1):
            raise WorkloadError(f"prefix_block_size: must be an integer >= 1 (got {self.prefix_block_size!r})")


# ---- the registry ----------------------------------------------------------------------------------------
K = TypeVar("K", bound=WorkloadConfig)
WorkloadBuilder = Callable[[Any, BuildArgs, np.random.Generator], Workload]
"""``(config, args, rng) -> Workload``: an untiered workload, drawn only from ``rng``."""
Builder = Callable[[K, BuildArgs, np.random.Generator], Workload]


@dataclass(frozen=True)
class WorkloadInfo:
    """One registered workload: its name, one-line summary, config class and builder."""

    name: str
    summary: str
    config_cls: type[WorkloadConfig]
    build: WorkloadBuilder

    @property
    def parameters(self) -> tuple[ParameterInfo, ...]:
        """Every parameter a spec may set, with its type, default and one-line doc: the workload's own first,
        then those every workload takes."""
        common = {p.name for p in describe_parameters(WorkloadConfig)}
        every = describe_parameters(self.config_cls)
        return tuple(p for p in every if p.name not in common) + tuple(p for p in every if p.name in common)


_WORKLOADS: dict[str, WorkloadInfo] = {}
WORKLOADS: Mapping[str, WorkloadInfo] = MappingProxyType(_WORKLOADS)
"""Read-only view of the registered workloads, by name."""


def register_workload(name: str, config_cls: type[K]) -> Callable[[Builder[K]], Builder[K]]:
    """``@register_workload("my-workload", MyConfig)`` on a builder ``(config, args, rng) -> Workload``; the
    first line of the builder's docstring is the workload's summary in listings."""

    def decorate(builder: Builder[K]) -> Builder[K]:
        if name in _WORKLOADS:
            raise WorkloadError(f"register_workload: a workload named {name!r} is already registered")
        lines = (builder.__doc__ or "").strip().splitlines()
        summary = lines[0] if lines else ""
        _WORKLOADS[name] = WorkloadInfo(name, summary, config_cls, builder)
        return builder

    return decorate


def describe_workloads() -> list[WorkloadInfo]:
    """Every registered workload, by name, with its parameters (``info.parameters``)."""
    return [_WORKLOADS[name] for name in sorted(_WORKLOADS)]


def parse_workload_spec(spec: str) -> tuple[WorkloadInfo, WorkloadConfig]:
    """The workload a spec names and its validated config, without building anything.

    A spec that does not start with a workload's name and ends in ``.csv`` or ``.jsonl`` is a path: the
    ``trace`` workload on that file."""
    if spec.partition(":")[0].strip() not in _WORKLOADS and spec.strip().endswith(TRACE_SUFFIXES):
        info = _WORKLOADS["trace"]
        return info, _SYNTAX.config(info.config_cls, {"path": spec.strip()}, name=info.name)
    name, params = _SYNTAX.parse(spec)
    if name not in _WORKLOADS and Path(spec.strip()).is_dir():
        raise WorkloadError(
            f"workload {spec.strip()!r} is a directory; give a trace file (a path ending in "
            f"{' or '.join(TRACE_SUFFIXES)}) or a workload name (`semsched workloads` lists them)"
        )
    if name not in _WORKLOADS:
        raise WorkloadError(
            f"unknown workload {name!r}; known: {', '.join(sorted(_WORKLOADS))}, "
            f"or a path ending in {' or '.join(TRACE_SUFFIXES)}"
        )
    info = _WORKLOADS[name]
    return info, _SYNTAX.config(info.config_cls, params, name=name)


def build_workload(
    spec: str,
    *,
    rate_per_s: float,
    duration_s: float | None = None,
    seed: int,
    tiers: Sequence[TierSpec] = DEFAULT_TIERS,
    num_requests: int | None = None,
    max_requests: int = DEFAULT_MAX_REQUESTS,
) -> Workload:
    """Build the workload ``spec`` names (``name:key=value;key=value`` or a trace path), tiers drawn from
    ``tiers``.

    Synthetic workloads need ``duration_s`` or ``num_requests``; with both, requests stop at whichever limit
    comes first. A workload of more than ``max_requests`` requests is refused before anything is drawn (see
    the module docstring). Every bad name, parameter or argument raises :class:`WorkloadError` naming it.
    """
    args = BuildArgs(rate_per_s, duration_s, num_requests)
    if not is_int(max_requests) or max_requests < 1:
        raise WorkloadError(f"max_requests: must be an integer >= 1 (got {max_requests!r})")
    info, config = parse_workload_spec(spec)
    expected = config.expected_requests(args)
    _check_size(info.name, expected, max_requests, args)
    rng = np.random.default_rng(seed)
    workload = info.build(config, args, rng)
    if expected is None:  # known only now that the data is read
        _check_size(info.name, float(len(workload)), max_requests, args, exact=True)
    tiered = _with_tiers(info.name, _capped(workload, config), config, tuple(tiers), rng)
    return _with_clients(info.name, tiered, config, rng)


def _check_size(
    name: str, expected: float | None, max_requests: int, args: BuildArgs, *, exact: bool = False
) -> None:
    if expected is None or expected <= max_requests:
        return
    given = f"rate_per_s={args.rate_per_s:g}"
    if args.duration_s is not None:
        given += f", duration_s={args.duration_s:g}"
    if args.num_requests is not None:
        given += f", num_requests={args.num_requests}"
    count = f"{expected:,.0f}" if expected < 1e18 else f"{expected:.3g}" if math.isfinite(expected) \
        else "more than 10^308"
    gives = "gives" if exact else "would give about"
    raise WorkloadError(
        f"workload {name!r}: {given} {gives} {count} requests, more than the limit of "
        f"{max_requests:,}; lower the rate or the duration, or raise the limit (max_requests; "
        "--max-requests on the command line)"
    )


def _capped(workload: Workload, config: WorkloadConfig) -> Workload:
    if config.max_prompt_tokens is None and config.max_output_tokens is None:
        return workload
    return workload.with_lengths(
        _clip(workload.prompt_tokens, config.max_prompt_tokens),
        _clip(workload.output_tokens, config.max_output_tokens),
    )


def _clip(values: npt.NDArray[np.int64], cap: int | None) -> npt.NDArray[np.int64]:
    return values if cap is None else np.minimum(values, cap)


def _with_tiers(
    name: str, workload: Workload, config: WorkloadConfig, tiers: tuple[TierSpec, ...], rng: np.random.Generator
) -> Workload:
    weights = config.tier_weights
    if not _is_untiered(workload):
        if weights is not None:
            raise WorkloadError(
                f"workload {name!r}: tier_weights: {workload.name!r} names each request's tier itself, "
                "so none are drawn"
            )
        return workload
    if weights is not None and len(weights) != len(tiers):
        names = "/".join(t.name for t in tiers)
        raise WorkloadError(
            f"workload {name!r}: tier_weights: {len(weights)} given, one per tier needed ({len(tiers)}: {names})"
        )
    return assign_tiers(workload, tiers, rng, weights)


def _with_clients(name: str, workload: Workload, config: WorkloadConfig, rng: np.random.Generator) -> Workload:
    """Clients drawn uniformly from ``config.clients``, from a side stream of the seed (so the arrivals,
    lengths, tiers and urgency of a seed do not depend on them)."""
    if config.clients is None:
        return workload
    if workload.client is not None:
        raise WorkloadError(f"workload {name!r}: clients: {workload.name!r} names each request's client itself, "
                            "so none are drawn")
    drawn = side_stream(rng, CLIENT_STREAM).integers(0, config.clients, size=len(workload))
    return workload.with_client(tuple(f"client-{int(i)}" for i in drawn))


def _is_untiered(workload: Workload) -> bool:
    return all(spec.name == UNTIERED.name for spec in workload.tiers)


def check_spikes(gap_s: float | None, max_concurrent: int) -> None:
    """A spike gap (None: derived from the rate) and a spike's most requests are in range."""
    if gap_s is not None and (not is_finite_number(gap_s) or gap_s <= 0):
        raise WorkloadError(f"gap_s: must be a finite number > 0 (got {gap_s!r})")
    if not is_int(max_concurrent) or not 1 <= max_concurrent <= MAX_SPIKE_CONCURRENT:
        limit = f"{MAX_SPIKE_CONCURRENT:,}"
        raise WorkloadError(f"max_concurrent: must be an integer from 1 to {limit} (got {max_concurrent!r})")


def check_weights(
    name: str, weights: tuple[float, ...] | None, *, count: int | None = None, of: str = ""
) -> None:
    """Weights are None, or finite numbers >= 0 that are not all zero (``count`` of them, one per ``of``)."""
    if weights is None:
        return
    if not weights or not all(is_finite_number(w) and w >= 0 for w in weights) or not math.fsum(weights) > 0:
        raise WorkloadError(f"{name}: must be finite numbers >= 0, not all zero (got {weights!r})")
    if count is not None and len(weights) != count:
        raise WorkloadError(f"{name}: {len(weights)} given, one per {of} needed ({count})")


def check_fraction(name: str, value: float) -> None:
    """``value`` is a number from 0 to 1."""
    if not is_finite_number(value) or not 0 <= value <= 1:
        raise WorkloadError(f"{name}: must be a number from 0 to 1 (got {value!r})")


def is_int(value: object) -> bool:
    """An integer that is not a bool."""
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


def is_finite_number(value: object) -> bool:
    """A real number that is finite as a float (a huge int is not: it cannot become one)."""
    if isinstance(value, bool) or not isinstance(value, int | float | np.number):
        return False
    try:
        return math.isfinite(float(value))
    except OverflowError:
        return False


# ---- synthetic -------------------------------------------------------------------------------------------
def _synthetic(
    name: str, arrival_time_s: npt.NDArray[np.float64], lengths: LengthSampler, rng: np.random.Generator
) -> Workload:
    prompt_tokens, output_tokens = lengths.sample(arrival_time_s.size, rng)
    return Workload.untiered(name, arrival_time_s, prompt_tokens, output_tokens)


def _renewal_times(
    args: BuildArgs,
    first_n: Callable[[int], npt.NDArray[np.float64]],
    until: Callable[[float], npt.NDArray[np.float64]],
) -> npt.NDArray[np.float64]:
    """Arrivals that stop at ``num_requests`` or ``duration_s``, whichever comes first, drawn by the limit that
    is expected to come first (so a huge value of the other limit never sizes an array)."""
    n, duration_s = args.num_requests, args.duration_s
    if duration_s is None or (n is not None and n <= args.rate_per_s * duration_s):
        times_s = first_n(args.required_count())
        return times_s if duration_s is None else times_s[times_s < duration_s]
    times_s = until(duration_s)
    return times_s if n is None else times_s[:n]


def _poisson_times(args: BuildArgs, rng: np.random.Generator) -> npt.NDArray[np.float64]:
    rate = args.rate_per_s
    return _renewal_times(
        args, lambda n: poisson_arrivals(rate, n, rng), lambda d: poisson_arrivals_until(rate, d, rng)
    )


def _gamma_times(args: BuildArgs, cv: float, rng: np.random.Generator) -> npt.NDArray[np.float64]:
    rate = args.rate_per_s
    return _renewal_times(
        args, lambda n: gamma_arrivals(rate, cv, n, rng), lambda d: gamma_arrivals_until(rate, cv, d, rng)
    )


@register_workload("azure-conv", PoissonConfig)
def _azure_conv(config: PoissonConfig, args: BuildArgs, rng: np.random.Generator) -> Workload:
    """Poisson arrivals at the rate; lengths from the packaged fit of the Azure 2023 conversation trace."""
    return _synthetic("azure-conv", _poisson_times(args, rng), fitted_lengths("azure-conv"), rng)


@register_workload("azure-code", PoissonConfig)
def _azure_code(config: PoissonConfig, args: BuildArgs, rng: np.random.Generator) -> Workload:
    """Poisson arrivals at the rate; lengths from the packaged fit of the Azure 2023 code trace."""
    return _synthetic("azure-code", _poisson_times(args, rng), fitted_lengths("azure-code"), rng)


@register_workload("spikes", SpikesConfig)
def _spikes(config: SpikesConfig, args: BuildArgs, rng: np.random.Generator) -> Workload:
    """Seed 000's spikes: every gap_s 1 to max_concurrent requests, each with an urgency; max_output_tokens = 500.

    Conversation-fit lengths, outputs capped at seed 000's 500 tokens unless ``max_output_tokens`` says otherwise;
    urgency levels drawn from a generator of their own."""
    if args.duration_s is None:
        args.required_count()
    times_s = spike_arrivals(config.gap_for(args), config.max_concurrent, args.duration_s, rng, args.num_requests)
    workload = _synthetic("spikes", times_s, fitted_lengths("azure-conv"), rng)
    urgency_rng = side_stream(rng, URGENCY_STREAM)  # leaves rng, and so the tiers drawn next, as they were
    true = draw_urgency(len(workload), config.urgency_levels, urgency_rng, config.urgency_weights)
    return with_believed_urgency(workload, true, config.urgency_levels, config.urgency_error, urgency_rng)


@register_workload("gamma-conv", GammaConfig)
def _gamma_conv(config: GammaConfig, args: BuildArgs, rng: np.random.Generator) -> Workload:
    """Bursty gamma-renewal arrivals at the rate (gap CV cv); conversation-fit lengths."""
    return _synthetic("gamma-conv", _gamma_times(args, config.cv, rng), fitted_lengths("azure-conv"), rng)


# ---- traces ----------------------------------------------------------------------------------------------
def _trace_workload(path: Path, config: TraceConfig, args: BuildArgs) -> Workload:
    block_size = config.prefix_block_size if isinstance(config, TraceFileConfig) else 16
    workload = load_mooncake_jsonl(path, prefix_block_size=block_size) if path.suffix == ".jsonl" else (
        load_azure_csv(path))
    if config.rescale and workload.duration_s() <= 0:
        raise WorkloadError(
            f"trace {path}: its {len(workload)} request(s) arrive at one instant, so it has no rate to stretch "
            f"to rate_per_s={args.rate_per_s:g} (--rate); give rescale=false to keep its own timing "
            f"(e.g. trace:path={path};rescale=false)"
        )
    if config.rescale:
        workload = rescale_to_rate(workload, args.rate_per_s)
    if args.duration_s is not None:
        workload = workload.slice_time(0.0, args.duration_s)
    if args.num_requests is not None:
        workload = workload.head(args.num_requests)
    return workload


@register_workload("trace", TraceFileConfig)
def _trace_file(config: TraceFileConfig, args: BuildArgs, rng: np.random.Generator) -> Workload:
    """A trace file (Azure .csv or Mooncake .jsonl), rescaled to the rate and cut to the duration."""
    return _trace_workload(Path(config.path), config, args)


@register_workload("azure-conv-trace", TraceConfig)
def _azure_conv_trace(config: TraceConfig, args: BuildArgs, rng: np.random.Generator) -> Workload:
    """The real Azure 2023 conversation trace (shared data), rescaled to the rate and cut to the duration."""
    path = find_data_file("azure_llm_2023_conv.csv")
    return _trace_workload(path, config, args).with_name("azure-conv-trace")


@register_workload("azure-code-trace", TraceConfig)
def _azure_code_trace(config: TraceConfig, args: BuildArgs, rng: np.random.Generator) -> Workload:
    """The real Azure 2023 code trace (shared data), rescaled to the rate and cut to the duration."""
    path = find_data_file("azure_llm_2023_code.csv")
    return _trace_workload(path, config, args).with_name("azure-code-trace")
