"""The ``ktas-ed`` workload: seed 000's emergency-department experiment on real triage data (issue 15).

Patients of a KTAS triage file (:mod:`semsched.predict.ktas`) arrive in spikes, as in ``spikes``: every
``gap_s`` seconds 1 to ``max_concurrent`` of them at once (default 5, seed 000's most concurrent requests per
arrival outside the spike experiments). Each request is one patient row drawn at random (without replacement
while there are enough rows, with replacement otherwise); its prompt is the row's triage text, counted with the
Llama-2 tokenizer of the shared data (``<s>`` included, as the model sees it), and its output is short, as in
the paper's one-round EMS conversations: uniform on ``output_tokens`` (default 5 to 50 tokens).

Urgency is the KTAS level minus 1 (0 = resuscitation, 4 = least urgent): the experts' label (``expert``), the
triage nurses' (``nurse``), or the out-of-fold prediction of the urgency classifier (``predicted``, from
:func:`semsched.predict.urgency.cross_val_levels`: every row predicted by a model not trained on it). With
``nurse`` or ``predicted`` the expert level is kept as ``urgency_true``; ``urgency_error`` instead mislabels the
expert levels with seed 000's noisy oracle.

The triage file, its token counts and the predictions are computed once per process and file version.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import numpy.typing as npt

from semsched.predict.ktas import NUM_LEVELS, TriageRecords, load_ktas
from semsched.workloads.arrivals import expected_spike_requests, spike_arrivals
from semsched.workloads.registry import (
    BuildArgs,
    WorkloadConfig,
    check_fraction,
    check_spikes,
    is_finite_number,
    is_int,
    parameter,
    register_workload,
)
from semsched.workloads.traces import DataNotFoundError, find_data_file
from semsched.workloads.urgency import URGENCY_STREAM, side_stream, with_believed_urgency
from semsched.workloads.workload import Workload, WorkloadError

KTAS_FILE = "ktas_triage.csv"
TOKENIZER_FILE = "tokenizers/llama2_tinyllama/tokenizer.json"
URGENCY_SOURCES = ("expert", "nurse", "predicted")
MAX_FOLDS = 100


@dataclass(frozen=True)
class KtasEdConfig(WorkloadConfig):
    """Spikes of triage patients: ``gap_s``, ``max_concurrent``, the urgency source and the output range."""

    data: str = parameter("", f"KTAS triage file (default: {KTAS_FILE} in the shared data directory)")
    urgency: Literal["expert", "nurse", "predicted"] = parameter(
        "expert", "urgency from the experts' KTAS label, the nurses', or the classifier's out-of-fold prediction"
    )
    gap_s: float = parameter(0.1, "seconds between spikes")
    max_concurrent: int = parameter(5, "each spike holds 1 to this many patients, uniformly")
    output_tokens: tuple[int, ...] = parameter((5, 50), "LOW/HIGH: output tokens drawn uniformly from LOW to HIGH")
    urgency_error: float = parameter(
        0.0, "fraction of expert labels made wrong by seed 000's noisy oracle (urgency=expert only)"
    )
    threshold: float | None = parameter(
        None, "the classifier's under-triage threshold (urgency=predicted; default: the classifier's own)"
    )
    folds: int = parameter(5, "cross-validation folds of the prediction (urgency=predicted)")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.urgency not in URGENCY_SOURCES:
            raise WorkloadError(f"urgency: must be one of {', '.join(URGENCY_SOURCES)} (got {self.urgency!r})")
        check_spikes(self.gap_s, self.max_concurrent)
        self._check_output_tokens()
        self._check_urgency()

    def _check_output_tokens(self) -> None:
        bounds = self.output_tokens
        if len(bounds) != 2 or not all(is_int(b) for b in bounds) or not 1 <= bounds[0] <= bounds[1]:
            raise WorkloadError(f"output_tokens: must be LOW/HIGH, integers 1 <= LOW <= HIGH (got {bounds!r})")

    def _check_urgency(self) -> None:
        check_fraction("urgency_error", self.urgency_error)
        if self.urgency_error > 0 and self.urgency != "expert":
            raise WorkloadError(f"urgency_error: mislabels the expert levels; not with urgency={self.urgency}")
        if self.threshold is not None:
            if self.urgency != "predicted":
                raise WorkloadError(f"threshold: sets the classifier's; only with urgency=predicted "
                                    f"(got urgency={self.urgency})")
            if not is_finite_number(self.threshold) or not 0 < self.threshold <= 1:
                raise WorkloadError(f"threshold: must be a number in (0, 1] (got {self.threshold!r})")
        if not is_int(self.folds) or not 2 <= self.folds <= MAX_FOLDS:
            raise WorkloadError(f"folds: must be an integer from 2 to {MAX_FOLDS} (got {self.folds!r})")

    @property
    def uses_rate(self) -> bool:
        return False

    def expected_requests(self, args: BuildArgs) -> float | None:
        if args.duration_s is None:
            args.required_count()
        return expected_spike_requests(self.gap_s, self.max_concurrent, args.duration_s, args.num_requests)

    def data_path(self) -> Path:
        """The triage file: ``data`` (relative to the working directory) or the shared data's; it must exist."""
        if not self.data:
            return find_data_file(KTAS_FILE)
        path = Path(self.data)
        if not path.is_file():
            raise DataNotFoundError(f"data: triage file {self.data} not found (looked at {path.resolve()})")
        return path


@dataclass(frozen=True)
class TriageRows:
    """A triage file's records and the Llama-2 token count of each row's text."""

    records: TriageRecords
    prompt_tokens: npt.NDArray[np.int64]


def triage_rows(path: Path) -> TriageRows:
    """The rows of the triage file at ``path``, read and tokenized once per process and file version."""
    stat = path.stat()
    return _triage_rows(str(path.resolve()), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=4)
def _triage_rows(path: str, mtime_ns: int, size: int) -> TriageRows:
    records = load_ktas(path)
    return TriageRows(records, token_counts(records.texts))


def token_counts(texts: tuple[str, ...]) -> npt.NDArray[np.int64]:
    """Tokens of each text under the shared Llama-2 tokenizer, the begin-of-sequence token included."""
    try:
        from tokenizers import Tokenizer
    except ImportError as error:
        raise WorkloadError("ktas-ed: counting prompt tokens needs the 'tokenizers' package") from error
    tokenizer = Tokenizer.from_file(str(find_data_file(TOKENIZER_FILE)))
    encodings = tokenizer.encode_batch(list(texts))
    return np.asarray([len(encoding.ids) for encoding in encodings], dtype=np.int64)


def predicted_levels(path: Path, threshold: float | None, folds: int) -> npt.NDArray[np.int64]:
    """Out-of-fold predicted KTAS levels (1-5) of every row of the triage file at ``path``, computed once per
    process, file version and settings (the classifier's folds are split with seed 0: one fixed predictor)."""
    stat = path.stat()
    return _predicted_levels(str(path.resolve()), stat.st_mtime_ns, stat.st_size, threshold, folds)


@functools.lru_cache(maxsize=8)
def _predicted_levels(
    path: str, mtime_ns: int, size: int, threshold: float | None, folds: int
) -> npt.NDArray[np.int64]:
    try:  # scikit-learn, not a core dependency: imported only when asked for
        from semsched.predict.urgency import cross_val_levels
    except ImportError as error:
        raise WorkloadError(f"ktas-ed: urgency=predicted needs the urgency classifier ({error})") from error
    records = _triage_rows(path, mtime_ns, size).records
    levels = np.asarray(cross_val_levels(records, threshold=threshold, folds=folds, seed=0), dtype=np.int64)
    if levels.shape != (len(records),) or levels.min() < 1 or levels.max() > NUM_LEVELS:
        raise WorkloadError(
            f"ktas-ed: cross_val_levels must give one level 1-{NUM_LEVELS} per row ({len(records)}); "
            f"got shape {levels.shape}, levels {levels.min()}..{levels.max()}"
        )
    levels.flags.writeable = False
    return levels


@register_workload("ktas-ed", KtasEdConfig)
def _ktas_ed(config: KtasEdConfig, args: BuildArgs, rng: np.random.Generator) -> Workload:
    """Seed 000's emergency department: spikes of KTAS triage patients, urgency = KTAS level - 1, short outputs."""
    if args.duration_s is None:
        args.required_count()
    times_s = spike_arrivals(config.gap_s, config.max_concurrent, args.duration_s, rng, args.num_requests)
    path = config.data_path()
    rows = triage_rows(path)
    n, num_rows = times_s.size, len(rows.records)
    picked = rng.choice(num_rows, size=n, replace=n > num_rows)
    low, high = config.output_tokens
    output_tokens = rng.integers(low, high + 1, size=n, dtype=np.int64)
    workload = Workload.untiered("ktas-ed", times_s, rows.prompt_tokens[picked], output_tokens)
    workload = workload.with_prompt_text([rows.records.texts[int(i)] for i in picked])
    expert = rows.records.expert[picked] - 1
    if config.urgency == "expert":
        urgency_rng = side_stream(rng, URGENCY_STREAM)
        return with_believed_urgency(workload, expert, NUM_LEVELS, config.urgency_error, urgency_rng)
    if config.urgency == "nurse":
        believed = rows.records.nurse[picked] - 1
    else:
        believed = predicted_levels(path, config.threshold, config.folds)[picked] - 1
    return workload.with_urgency(believed, urgency_true=expert)
