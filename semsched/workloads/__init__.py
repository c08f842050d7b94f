"""Workloads: what requests arrive, when, how long they are and who sent them.

Start with :func:`build_workload` (workload specs ``name:key=value;key=value``, see
:mod:`semsched.workloads.registry`; :func:`describe_workloads` lists them with their parameters) and
:meth:`Workload.to_requests`. Module map: ``workload`` (the data type), ``arrivals`` (arrival processes),
``lengths`` (prompt/output length samplers), ``traces`` (real trace loaders), ``tiers`` (drawing or reading
each request's tier; the tier table is :mod:`semsched.core.tiers`), ``urgency`` (drawing or mislabelling each
request's urgency level), ``registry`` (named workloads, their parameters and the request-count limit),
``ktas_ed`` (the emergency-department workload on real triage data), ``answer_workloads`` (``alpaca-eval``,
``mt-bench``, ``mixed``: real prompts with one model's real output lengths, read by ``answers``),
``fit_default`` (regenerates the packaged length fit), ``production`` (``production-mix`` and its cluster).

In more detail:

* ``workload``: :class:`Workload`, arrays of arrivals, prompt and output lengths, priorities, tiers, clients;
  optional ``urgency``, ``urgency_true``, ``predicted_length``, ``prompt_text``, ``accept_lengths`` (seed 004:
  logged tokens per verification round), checked and carried through ``head``/``slice_time``/``with_*``;
  ``to_requests`` makes fresh :class:`~semsched.core.request.Request` objects for every run.
* ``arrivals``: Poisson, gamma and seed 000's spikes. ``lengths``: empirical, quantile fit with a Gaussian
  copula, uniform. ``traces``: Azure CSV and Mooncake JSONL loaders with row/field errors, ``rescale_to_rate``.
* ``tiers``: ``assign_tiers``, ``tiers_from_column``. ``urgency``: levels drawn from a ``side_stream`` of the
  seed, so a seed's arrivals, lengths and tiers do not depend on them; ``urgency_error`` mislabels with
  :func:`semsched.predict.oracle.mislabel`, the truth kept as ``urgency_true``.
* ``ktas_ed``: ``ktas-ed``, seed 000's emergency department: KTAS triage patients in spikes, prompt tokens
  counted with the shared Llama-2 tokenizer, urgency = KTAS level - 1 from the expert, the nurse or
  :func:`semsched.predict.urgency.cross_val_levels`.
* ``answers``, ``answer_workloads``: one model's AlpacaEval ``model_outputs.json`` or MT-Bench/Spec-Bench
  ``model_answer/*.jsonl`` (format told from the content, lengths in Llama-2 tokens, errors naming the file);
  ``alpaca-eval:outputs=PATH``, ``mt-bench:answers=PATH``, ``mixed:parts=PATH+PATH``: real prompts with real
  output lengths, Poisson arrivals, rows in seeded shuffled passes or ``order=file``.
* ``spec_bench``: Spec-Bench speculative-decoding logs (``load_spec_bench``: one ``SpecTurn`` per turn with its
  rounds; every malformed line a ``SpecBenchError`` naming file, line and field; short names ``eagle``,
  ``sps-68m``, ``vanilla``), workloads ``spec-bench`` (logged rounds replayed) and ``mbpp-spec`` (MBPP prompts,
  rounds from a fitted acceptance model, :mod:`semsched.sim.acceptance`).
* ``multi_turn``: ``mt-bench-turns`` (issue 32): two-turn MT-Bench conversations, turn 2's prompt holding turn 1
  and its answer, every request with ``prefix_hashes`` (prompt and replayed answer) for prefix caching.
* ``production``: ``production-mix`` (issue 31): the Azure conversation trace's arrivals, real prompts and
  output lengths of many models (AlpacaEval, MT-Bench), four tiers with SLOs (SYSTEM 2 %), triage-classifier
  urgency on 20 % of the requests (the others none: ``NO_URGENCY``); ``production_cluster``: half the engines
  speculating (``ClusterSpec.speculating_instances``), ``least-outstanding``, an online length predictor.
* ``registry``: each workload a builder registered with ``@register_workload`` and a frozen, validated config
  dataclass; specs ``name:key=value;key=value`` (``trace:path=FILE``, or a bare ``.csv``/``.jsonl`` path;
  ``spikes`` caps outputs at seed 000's 500 tokens by default); ``parse_workload_spec`` validates without
  building; ``uses_rate`` says whether the rate changes the arrivals; the expected request count is checked
  against ``max_requests`` (default 1,000,000) before anything is drawn. The embedded default fit is
  ``data/azure_conv_fit.json``.
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
from semsched.workloads.multi_turn import MtBenchTurnsConfig  # registers "mt-bench-turns"
from semsched.workloads.production import ProductionConfig  # registers "production-mix"
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
    "MtBenchTurnsConfig",
    "ProductionConfig",
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
