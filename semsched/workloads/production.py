"""The production mix (issue 31): one workload with everything a team running vLLM sees at once, and its cluster.

``production-mix`` (:func:`production_mix`):

* **arrivals**: the real Azure LLM conversation trace (one hour of 2023-11-16, ``azure_llm_2023_conv.csv``): a
  window of consecutive requests starting at a row drawn from the seed, rescaled to ``rate_per_s``
  (:func:`~semsched.workloads.traces.rescale_to_rate`: the window's own bursts and lulls kept, its mean rate made
  ``rate_per_s``) and shifted to start at 0. The trace's token counts are not used;
* **prompts and output lengths**: real ones, pooled from the answer files of the shared data: every AlpacaEval
  model's outputs (23 models x 805 instructions) and every MT-Bench model's first-turn answers (32 models x 80
  questions). A row is one model's answer to one prompt (Llama-2 token counts), so one prompt comes with many real
  lengths, which is what an online length predictor learns from; rows are dealt in shuffled passes drawn from the
  seed (AlpacaEval rows are ~88 % of the pool). The prompt text is kept for the predictor;
* **tiers**: the four of :data:`~semsched.core.tiers.DEFAULT_TIERS` with their SLOs, drawn with weights
  :data:`PRODUCTION_TIER_WEIGHTS` (SYSTEM 2 %, PREMIUM 20 %, STANDARD 53 %, BACKGROUND 25 %: ``azure-conv``'s
  defaults with a smaller SYSTEM share, health checks and warm-ups being rare); ``tier_weights`` overrides them;
* **urgency**: a share ``urgent_share`` (default :data:`URGENT_SHARE`, 20 %) of the requests, chosen independently
  of their tier, carries an urgency level from the KTAS triage classifier: each such request stands for a triage
  patient drawn at random from ``ktas_triage.csv``; its level is the classifier's out-of-fold prediction minus 1
  (0 = most urgent ... 4; :func:`semsched.workloads.ktas_ed.predicted_levels`), the expert's level minus 1 kept as
  ``urgency_true``. Every other request has no urgency (``None``). Drawn from a side stream of the seed, so the
  arrivals, rows and tiers of a seed do not depend on ``urgent_share``.

Deterministic in the seed. Missing data is a :class:`WorkloadError` naming the parameter or the file.

:func:`production_cluster`: ``num_instances`` engines of the corrected A100/Qwen1.5-7B profile behind the
``least-outstanding`` router, the first half of them speculating (EAGLE's costs, rounds drawn from the acceptance
model fitted to every turn of the Spec-Bench EAGLE log: the answer-file prompts carry no log), and an online
``semantic-knn`` length predictor (seed 002) that starts cold and learns from the run's finished requests, so
policies that read ``predicted_output`` get distributions. Why ``least-outstanding``: a speculating engine drains
its queue faster than a plain one, and routing to the fewest unfinished requests sends it more work without a model
of either; round-robin would load both alike, and ``min-load``'s work estimate knows nothing of speculation.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from semsched.core.tiers import DEFAULT_TIERS
from semsched.workloads.answer_workloads import row_indices
from semsched.workloads.answers import AnswerDataError, AnswerFile, answer_files, cached_answer_file
from semsched.workloads.ktas_ed import KTAS_FILE, predicted_levels, triage_rows
from semsched.workloads.registry import (
    BuildArgs,
    WorkloadConfig,
    build_workload,
    check_fraction,
    parameter,
    register_workload,
)
from semsched.workloads.traces import DataNotFoundError, data_dir, find_data_file, load_azure_csv, rescale_to_rate
from semsched.workloads.urgency import URGENCY_STREAM, side_stream
from semsched.workloads.workload import NO_URGENCY, Workload, WorkloadError

if TYPE_CHECKING:
    from semsched.sim.runner import ClusterSpec
    from semsched.sim.speculative import SpeculationSpec

NAME = "production-mix"
TRACE_FILE = "azure_llm_2023_conv.csv"
PRODUCTION_TIER_WEIGHTS: tuple[float, ...] = (2.0, 20.0, 53.0, 25.0)
"""SYSTEM/PREMIUM/STANDARD/BACKGROUND shares in percent (module docstring)."""
URGENT_SHARE = 0.2
"""The share of requests that carry an urgency level from the triage classifier."""
PRODUCTION_PROFILE = "a100-qwen1.5-7b"
PRODUCTION_ROUTER = "least-outstanding"
PRODUCTION_SPECULATION = "eagle"
PRODUCTION_LENGTH_PREDICTOR = "length=semantic-knn"
TRIAGE_FOLDS = 5


@dataclass(frozen=True)
class ProductionConfig(WorkloadConfig):
    """The production mix's parameters: its data files, the urgent share; tiers drawn with production weights."""

    tier_weights: tuple[float, ...] | None = parameter(
        PRODUCTION_TIER_WEIGHTS, "one weight per tier, '/'-separated (default 2/20/53/25: a small SYSTEM share)"
    )
    urgent_share: float = parameter(URGENT_SHARE, "share of requests with an urgency level from the triage "
                                                  "classifier (the rest have none)")
    trace: str = parameter("", f"Azure-format arrival trace (default: {TRACE_FILE} in the shared data)")
    answers: str = parameter("", "folder holding alpaca_eval/model_outputs and mt_bench/model_answer "
                                 "(default: the shared data)")
    triage: str = parameter("", f"KTAS triage file (default: {KTAS_FILE} in the shared data)")

    def __post_init__(self) -> None:
        super().__post_init__()
        check_fraction("urgent_share", self.urgent_share)

    def expected_requests(self, args: BuildArgs) -> float | None:
        return None  # the window is cut from the trace: known once it is read

    def trace_path(self) -> Path:
        return _given_or_shared("trace", self.trace, TRACE_FILE, "arrival trace")

    def triage_path(self) -> Path:
        return _given_or_shared("triage", self.triage, KTAS_FILE, "triage file")

    def answers_dir(self) -> Path:
        if not self.answers:
            return data_dir()
        folder = Path(self.answers)
        if not folder.is_dir():
            raise DataNotFoundError(f"answers: folder {self.answers} not found (looked at {folder.resolve()})")
        return folder


def _given_or_shared(name: str, given: str, shared: str, what: str) -> Path:
    if not given:
        return find_data_file(shared)
    path = Path(given)
    if not path.is_file():
        raise DataNotFoundError(f"{name}: {what} {given} not found (looked at {path.resolve()})")
    return path


# ---- building --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Pool:
    """Every (prompt, one model's answer) row of the answer files: text, prompt and output tokens."""

    texts: tuple[str, ...]
    prompt_tokens: npt.NDArray[np.int64]
    output_tokens: npt.NDArray[np.int64]


def answer_pool(folder: Path) -> _Pool:
    """The pooled rows of every AlpacaEval and MT-Bench answer file under ``folder`` (read once per process)."""
    files: list[AnswerFile] = []
    try:
        for dataset in ("alpaca-eval", "mt-bench"):
            files += [cached_answer_file(path) for path in answer_files(dataset, folder)]
    except AnswerDataError as error:
        raise DataNotFoundError(f"answers: {error}") from None
    return _Pool(
        texts=tuple(text for file in files for text in file.prompts),
        prompt_tokens=np.concatenate([file.prompt_tokens for file in files]),
        output_tokens=np.concatenate([file.output_tokens for file in files]),
    )


def arrival_window(trace: Workload, args: BuildArgs, rng: np.random.Generator) -> npt.NDArray[np.float64]:
    """Arrival times of a window of consecutive trace requests starting at a row drawn from ``rng``, rescaled to
    ``args.rate_per_s``, starting at 0, cut at ``num_requests`` and ``duration_s`` (whichever comes first)."""
    available = len(trace)
    wanted = args.num_requests
    if args.duration_s is not None:  # the window's mean rate is the rate: about rate x duration requests fit
        fitting = min(available, math.ceil(args.rate_per_s * args.duration_s) + 1)
        wanted = fitting if wanted is None else min(wanted, fitting)
    count = args.required_count() if wanted is None else wanted
    if count > available:
        raise WorkloadError(
            f"num_requests: the arrival trace has {available:,} requests, fewer than {count:,} (ask for fewer)"
        )
    count = max(count, 2)  # a rate needs two arrivals
    start = int(rng.integers(0, available - count + 1))
    times = trace.arrival_time_s[start : start + count]
    window = Workload.untiered(NAME, times - times[0], np.ones(count), np.ones(count))
    window = rescale_to_rate(window, args.rate_per_s)
    if args.duration_s is not None:
        window = window.slice_time(0.0, args.duration_s)
    if args.num_requests is not None:
        window = window.head(args.num_requests)
    return np.asarray(window.arrival_time_s, dtype=np.float64)


def with_triage_urgency(workload: Workload, config: ProductionConfig, rng: np.random.Generator) -> Workload:
    """``urgent_share`` of the requests with a triage patient's predicted urgency (and the expert's as the truth),
    the others with none (module docstring); drawn from ``rng``'s urgency side stream."""
    if config.urgent_share == 0:
        return workload
    stream = side_stream(rng, URGENCY_STREAM)
    n = len(workload)
    urgent = stream.random(n) < config.urgent_share
    path = config.triage_path()
    records = triage_rows(path).records
    patients = stream.integers(0, len(records), size=n)
    predicted = predicted_levels(path, None, TRIAGE_FOLDS)[patients] - 1
    expert = records.expert[patients] - 1
    return workload.with_urgency(np.where(urgent, predicted, NO_URGENCY),
                                 urgency_true=np.where(urgent, expert, NO_URGENCY))


@register_workload(NAME, ProductionConfig)
def _production_mix(config: ProductionConfig, args: BuildArgs, rng: np.random.Generator) -> Workload:
    """Azure conversation arrivals, real prompts and lengths of many models, 4 tiers, triage urgency on 20 %."""
    times_s = arrival_window(load_azure_csv(config.trace_path()), args, rng)
    pool = answer_pool(config.answers_dir())
    picked = row_indices(len(pool.texts), times_s.size, "shuffle", rng)
    workload = Workload.untiered(NAME, times_s, pool.prompt_tokens[picked], pool.output_tokens[picked])
    workload = workload.with_prompt_text([pool.texts[int(i)] for i in picked])
    return with_triage_urgency(workload, config, rng)


def production_mix(rate_per_s: float, seed: int, num_requests: int) -> Workload:
    """The ``production-mix`` workload at its defaults (module docstring), tiers from ``DEFAULT_TIERS``."""
    return build_workload(NAME, rate_per_s=rate_per_s, seed=seed, num_requests=num_requests, tiers=DEFAULT_TIERS)


# ---- the cluster -----------------------------------------------------------------------------------------
def production_cluster(num_instances: int = 4, profile: str = PRODUCTION_PROFILE) -> ClusterSpec:
    """``num_instances`` engines, the first ``num_instances // 2`` speculating, behind ``least-outstanding``, with
    an online ``semantic-knn`` length predictor (module docstring)."""
    from semsched.sim.prediction import parse_length_spec
    from semsched.sim.runner import ClusterSpec

    return ClusterSpec(
        profile=profile,
        num_instances=num_instances,
        router=PRODUCTION_ROUTER,
        length_predictor=parse_length_spec(PRODUCTION_LENGTH_PREDICTOR),
        speculation=_speculation(),
        speculating_instances=num_instances // 2,
    )


@functools.cache
def _speculation() -> SpeculationSpec:
    """EAGLE's preset with the acceptance model fitted to every turn of its Spec-Bench log (fitted once)."""
    from semsched.sim.acceptance import fit_acceptance
    from semsched.sim.speculative import speculation_preset
    from semsched.workloads.spec_bench import SpecBenchError, load_spec_bench

    preset = speculation_preset(PRODUCTION_SPECULATION)
    try:
        log = load_spec_bench(PRODUCTION_SPECULATION)
    except SpecBenchError as error:
        raise DataNotFoundError(f"speculation: {error}") from None
    return dataclasses.replace(preset, fallback=fit_acceptance(log.accept_sequences(), preset.draft_tokens))
