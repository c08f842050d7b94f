"""Workloads: what requests arrive, when, how long they are and who sent them.

Start with :func:`build_workload` (workload specs ``name:key=value;key=value``, see
:mod:`semsched.workloads.registry`; :func:`describe_workloads` lists them with their parameters) and
:meth:`Workload.to_requests`. Module map: ``workload`` (the data type), ``arrivals`` (arrival processes),
``lengths`` (prompt/output length samplers), ``traces`` (real trace loaders), ``tiers`` (drawing or reading
each request's tier; the tier table is :mod:`semsched.core.tiers`), ``urgency`` (drawing or mislabelling each
request's urgency level), ``registry`` (named workloads, their parameters and the request-count limit),
``ktas_ed`` (the emergency-department workload on real triage data), ``answer_workloads`` (``alpaca-eval``,
``mt-bench``, ``mixed``: real prompts with one model's real output lengths, read by ``answers``),
``fit_default`` (regenerates the packaged length fit).
"""

from semsched.core.tiers import DEFAULT_TIERS, UNTIERED, TierError, TierSpec
from semsched.workloads.answer_workloads import AlpacaEvalConfig, MixedConfig, MtBenchConfig  # registers them
from semsched.workloads.arrivals import (
    ArrivalError,
    expected_spike_requests,
    gamma_arrivals,
    gamma_arrivals_until,
    mean_spike_size,
    poisson_arrivals,
    poisson_arrivals_until,
    spike_arrivals,
)
from semsched.workloads.ktas_ed import KtasEdConfig  # registers "ktas-ed"
from semsched.workloads.lengths import (
    EmpiricalLengths,
    LengthError,
    LengthSampler,
    QuantileLengths,
    UniformLengths,
    fitted_lengths,
    spearman_correlation,
)
from semsched.workloads.registry import (
    DEFAULT_MAX_REQUESTS,
    WORKLOADS,
    BuildArgs,
    WorkloadConfig,
    WorkloadInfo,
    build_workload,
    describe_workloads,
    parse_workload_spec,
    register_workload,
)
from semsched.workloads.spec_bench import MbppSpecConfig, SpecBenchConfig  # registers them
from semsched.workloads.tiers import assign_tiers, tiers_from_column
from semsched.workloads.traces import (
    MAX_LENGTH_TOKENS,
    DataNotFoundError,
    LoadReport,
    TraceFormatError,
    data_dir,
    find_data_file,
    load_azure_csv,
    load_mooncake_jsonl,
    read_azure_csv,
    read_mooncake_jsonl,
    rescale_to_rate,
)
from semsched.workloads.urgency import draw_urgency, side_stream, with_believed_urgency
from semsched.workloads.workload import Workload, WorkloadError

__all__ = [
    "AlpacaEvalConfig",
    "ArrivalError",
    "BuildArgs",
    "DEFAULT_MAX_REQUESTS",
    "DEFAULT_TIERS",
    "DataNotFoundError",
    "EmpiricalLengths",
    "KtasEdConfig",
    "LengthError",
    "LengthSampler",
    "LoadReport",
    "MAX_LENGTH_TOKENS",
    "MbppSpecConfig",
    "MixedConfig",
    "MtBenchConfig",
    "QuantileLengths",
    "SpecBenchConfig",
    "TierError",
    "TierSpec",
    "TraceFormatError",
    "UNTIERED",
    "UniformLengths",
    "WORKLOADS",
    "Workload",
    "WorkloadError",
    "WorkloadConfig",
    "WorkloadInfo",
    "assign_tiers",
    "build_workload",
    "data_dir",
    "describe_workloads",
    "draw_urgency",
    "expected_spike_requests",
    "find_data_file",
    "fitted_lengths",
    "gamma_arrivals",
    "gamma_arrivals_until",
    "load_azure_csv",
    "load_mooncake_jsonl",
    "mean_spike_size",
    "parse_workload_spec",
    "poisson_arrivals",
    "poisson_arrivals_until",
    "read_azure_csv",
    "read_mooncake_jsonl",
    "register_workload",
    "rescale_to_rate",
    "side_stream",
    "spearman_correlation",
    "spike_arrivals",
    "tiers_from_column",
    "with_believed_urgency",
]
