"""Real request traces: loading them, locating the shared data directory and rescaling their rate.

Formats
-------
* Azure LLM inference traces (2023): CSV with columns ``TIMESTAMP`` (``2023-11-16 18:15:46.6805900``: any
  number of fractional digits, or none; a ``T`` separator is also accepted), ``ContextTokens`` and
  ``GeneratedTokens``; an optional ``client`` column (who sent the request) is read when the header has it.
* Mooncake-style JSONL: one object per line with ``timestamp`` (milliseconds), ``input_length`` and
  ``output_length``; optional ``priority`` (int), ``tier`` (a tier name) and ``client`` (a string) are used when
  present. Blank lines are skipped. Optional ``hash_ids`` (a list of integers, one per 512-token block of the
  prompt, equal ids for equal prefixes) become the requests' ``prefix_hashes`` for the engine's block size
  (:func:`semsched.core.prefix.regroup_block_hashes`).
* ``client``: a non-empty string of at most 256 characters; a trace gives every row one or none (a JSONL row
  without one, when others have one, is an error naming the line).

Decisions
---------
* Arrival times are seconds relative to the earliest request, so a trace always starts at 0.
* Rows out of timestamp order are sorted with a stable sort (ties keep file order); :class:`LoadReport` counts
  how many rows arrived earlier than the row before them.
* A length of 0 (an empty prompt, or a request that generated nothing) is clamped to 1, because a
  :class:`~semsched.core.request.Request` needs at least one token of each; :class:`LoadReport` counts the
  clamped rows. The 2023 Azure files have no such rows (checked by the tests); other trace releases do.
  Negative or non-integer lengths, and lengths above :data:`MAX_LENGTH_TOKENS`, are errors.
* Any malformed input raises :class:`TraceFormatError` naming the file, the 1-based line (and, for CSV, data
  row), the field and what was wrong, never a raw ``csv``/``json``/``int`` exception; a path that is missing,
  a directory or unreadable is a :class:`WorkloadError` naming the path.
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import numpy.typing as npt

from semsched.core.prefix import regroup_block_hashes
from semsched.core.request import MAX_CLIENT_CHARS
from semsched.core.tiers import DEFAULT_TIERS, UNTIERED, TierSpec, tier_index
from semsched.workloads.workload import Workload, WorkloadError

DATA_DIR_ENV = "SEMSCHED_DATA_DIR"
MAX_LENGTH_TOKENS = 2**31 - 1
"""The longest prompt or output a trace row may give (tokens); far beyond any model's context."""
PRIORITY_RANGE = (-(2**31), 2**31 - 1)
AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")

_INT_RE = re.compile(r"^[+-]?\d+$")
_TIMESTAMP_RE = re.compile(r"^(\d{4}-\d{2}-\d{2})[ T](\d{2}:\d{2}:\d{2})(?:\.(\d+))?$")
_EPOCH = datetime(1970, 1, 1)


class TraceFormatError(WorkloadError):
    """A trace file is malformed; the message names the file, the line, the field and the problem."""


class DataNotFoundError(WorkloadError, FileNotFoundError):
    """The shared data directory, or a file in it, does not exist; the message says where we looked."""


@dataclass(frozen=True)
class LoadReport:
    """What a loader did beyond parsing: rows read, zero lengths clamped to 1, rows that were out of order."""

    path: Path
    num_rows: int
    num_zero_prompt_clamped: int
    num_zero_output_clamped: int
    num_out_of_order: int


@dataclass
class _Columns:
    """Raw per-row values gathered by a loader before sorting and clamping."""

    time_s: list[float]
    prompt_tokens: list[int]
    output_tokens: list[int]
    priority: list[int]
    tier: list[str]
    #: one per row (None where the row has no client); all None: the trace has no clients
    client: list[str | None]
    #: Mooncake ``hash_ids``, one per row (None where the row has none); all None: the trace has none
    hash_ids: list[tuple[int, ...] | None]

    @classmethod
    def empty(cls) -> _Columns:
        return cls([], [], [], [], [], [], [])


# ---- data directory --------------------------------------------------------------------------------------
def data_dir() -> Path:
    """The shared data directory: ``$SEMSCHED_DATA_DIR`` if set, else ``<project root>/../shared/data``."""
    override = os.environ.get(DATA_DIR_ENV)
    if override:
        return Path(override)
    project_root = Path(__file__).resolve().parents[2]
    return project_root.parent / "shared" / "data"


def find_data_file(name: str) -> Path:
    """Path of ``name`` inside :func:`data_dir`.

    Raises :class:`DataNotFoundError` if the directory or the file is missing.
    """
    directory = data_dir()
    if not directory.is_dir():
        raise DataNotFoundError(
            f"data directory {directory} does not exist; set {DATA_DIR_ENV} to the directory holding "
            f"the shared data (looking for {name!r})"
        )
    path = directory / name
    if not path.is_file():
        raise DataNotFoundError(f"data file {name!r} not found in {directory} (set {DATA_DIR_ENV} to override)")
    return path


# ---- Azure CSV -------------------------------------------------------------------------------------------
def load_azure_csv(path: str | Path) -> Workload:
    """Load an Azure LLM inference trace CSV as an untiered :class:`Workload` named after the file."""
    return read_azure_csv(path)[0]


def read_azure_csv(path: str | Path) -> tuple[Workload, LoadReport]:
    """Like :func:`load_azure_csv`, also returning the :class:`LoadReport`."""
    path = Path(path)
    columns = _Columns.empty()
    for where, row in _azure_rows(path):
        columns.time_s.append(_parse_timestamp(where, "TIMESTAMP", row["TIMESTAMP"]))
        columns.prompt_tokens.append(_parse_length(where, "ContextTokens", row["ContextTokens"]))
        columns.output_tokens.append(_parse_length(where, "GeneratedTokens", row["GeneratedTokens"]))
        columns.priority.append(0)
        columns.tier.append(UNTIERED.name)
        columns.client.append(_client(where, row["client"]) if "client" in row else None)
    return _build(path, columns, (UNTIERED,))


def _azure_rows(path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    """Yield ``(location, row)`` with the header checked and every row holding exactly the header's fields."""
    with _open_text(path) as handle:
        reader = csv.reader(handle)
        try:
            header = _read_header(path, reader)
            for row_number, fields in enumerate(reader, start=1):
                where = f"{path.name} line {reader.line_num} (row {row_number})"
                if not fields:
                    continue
                if len(fields) != len(header):
                    raise TraceFormatError(f"{where}: has {len(fields)} fields, the header has {len(header)}")
                yield where, dict(zip(header, fields, strict=True))
        except csv.Error as exc:
            raise TraceFormatError(f"{path.name} line {reader.line_num}: unreadable CSV ({exc})") from exc
        except UnicodeDecodeError as exc:
            raise _not_utf8(path, exc) from None


def _read_header(path: Path, reader: Any) -> list[str]:
    try:
        header = [name.strip() for name in next(reader)]
    except StopIteration:
        raise TraceFormatError(f"{path.name} line 1: file is empty, expected a header {AZURE_COLUMNS}") from None
    except csv.Error as exc:
        raise TraceFormatError(f"{path.name} line 1: unreadable CSV header ({exc})") from exc
    missing = [name for name in AZURE_COLUMNS if name not in header]
    if missing:
        raise TraceFormatError(f"{path.name} line 1: missing column(s) {missing} (header is {header})")
    return header


def _parse_timestamp(where: str, field: str, text: str) -> float:
    """Seconds since 1970-01-01 (naive, no time zone), keeping every fractional digit."""
    match = _TIMESTAMP_RE.match(text.strip())
    if match is None:
        raise TraceFormatError(f"{where}: {field} must look like '2023-11-16 18:15:46.6805900', got {text!r}")
    date, clock, fraction = match.groups()
    try:
        whole = datetime.fromisoformat(f"{date}T{clock}")
    except ValueError as exc:
        raise TraceFormatError(f"{where}: {field} is not a valid date and time ({exc}), got {text!r}") from exc
    seconds = (whole - _EPOCH).days * 86_400 + (whole - _EPOCH).seconds
    return seconds + (float(f"0.{fraction}") if fraction else 0.0)


def _parse_length(where: str, field: str, text: str) -> int:
    stripped = text.strip()
    if not _INT_RE.match(stripped):
        raise TraceFormatError(f"{where}: {field} must be an integer >= 0, got {text!r}")
    # a digit string longer than the limit's is refused before int() (which refuses > 4300 digits itself)
    digits = stripped.lstrip("+-").lstrip("0")
    value = int(stripped) if len(digits) <= len(str(MAX_LENGTH_TOKENS)) else MAX_LENGTH_TOKENS + 1
    return _checked_length(where, field, value, _short(text))


def _checked_length(where: str, field: str, value: int, shown: str) -> int:
    if value < 0:
        raise TraceFormatError(f"{where}: {field} must be an integer >= 0, got {shown}")
    if value > MAX_LENGTH_TOKENS:
        raise TraceFormatError(f"{where}: {field} must be at most {MAX_LENGTH_TOKENS} tokens, got {shown}")
    return value


# ---- Mooncake JSONL --------------------------------------------------------------------------------------
def load_mooncake_jsonl(path: str | Path, tiers: Sequence[TierSpec] = DEFAULT_TIERS,
                        prefix_block_size: int = 16) -> Workload:
    """Load a Mooncake-style JSONL trace.

    Rows with a ``tier`` must name a tier in ``tiers``; their priority defaults to that tier's. Rows without a
    ``tier`` get the SLO-less ``"default"`` tier and priority ``priority`` (0 if absent). The workload's tier
    table is ``tiers`` if any row has a tier, plus the default tier if any row lacks one.
    """
    return read_mooncake_jsonl(path, tiers, prefix_block_size)[0]


def read_mooncake_jsonl(
    path: str | Path, tiers: Sequence[TierSpec] = DEFAULT_TIERS, prefix_block_size: int = 16
) -> tuple[Workload, LoadReport]:
    """Like :func:`load_mooncake_jsonl`, also returning the :class:`LoadReport`."""
    path = Path(path)
    by_name = tier_index(tiers)
    columns = _Columns.empty()
    for where, record in _jsonl_records(path):
        columns.time_s.append(_json_number(where, record, "timestamp") / 1000.0)
        columns.prompt_tokens.append(_json_length(where, record, "input_length"))
        columns.output_tokens.append(_json_length(where, record, "output_length"))
        spec = _json_tier(where, record, by_name)
        columns.tier.append(spec.name)
        columns.priority.append(_json_priority(where, record, spec.priority))
        columns.client.append(_client(where, record["client"]) if "client" in record else None)
        columns.hash_ids.append(_json_hash_ids(where, record["hash_ids"]) if "hash_ids" in record else None)
    workload, report = _build(path, columns, _table_for(columns.tier, tuple(tiers)))
    if all(ids is None for ids in columns.hash_ids):
        return workload, report
    order = np.argsort(np.asarray(columns.time_s, dtype=np.float64), kind="stable")
    hashes = [None if (ids := columns.hash_ids[int(i)]) is None
              else regroup_block_hashes(ids, int(workload.prompt_tokens[k]), prefix_block_size)
              for k, i in enumerate(order)]
    return workload.with_prefix_hashes(hashes, prefix_block_size), report


def _json_hash_ids(where: str, value: Any) -> tuple[int, ...]:
    if not isinstance(value, list) or any(isinstance(v, bool) or not isinstance(v, int) for v in value):
        raise TraceFormatError(f"{where}: hash_ids must be a list of integers, got {_short(value)}")
    return tuple(value)


def _jsonl_records(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    with _open_text(path) as handle:
        try:
            for line_number, line in enumerate(handle, start=1):
                if line.strip():
                    where = f"{path.name} line {line_number}"
                    yield where, _json_object(where, line)
        except UnicodeDecodeError as exc:
            raise _not_utf8(path, exc) from None


def _json_object(where: str, line: str) -> dict[str, Any]:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        raise TraceFormatError(f"{where}: not valid JSON ({exc.msg} at column {exc.colno})") from None
    except ValueError as exc:  # an integer of more than 4300 digits
        raise TraceFormatError(f"{where}: not readable JSON ({exc})") from None
    if not isinstance(record, dict):
        raise TraceFormatError(f"{where}: expected a JSON object, got {type(record).__name__}")
    return record


def _json_field(where: str, record: dict[str, Any], field: str) -> Any:
    if field not in record:
        raise TraceFormatError(f"{where}: missing field {field!r}")
    return record[field]


def _json_number(where: str, record: dict[str, Any], field: str) -> float:
    value = _json_field(where, record, field)
    if isinstance(value, bool) or not isinstance(value, int | float) or not _finite_float(value):
        raise TraceFormatError(f"{where}: {field} must be a finite number, got {_short(value)}")
    return float(value)


def _finite_float(value: int | float) -> bool:
    try:
        return math.isfinite(float(value))
    except OverflowError:  # an integer beyond a float's range
        return False


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:20]}...{text[-8:]} ({len(text)} characters)"


def _json_length(where: str, record: dict[str, Any], field: str) -> int:
    value = _json_field(where, record, field)
    if isinstance(value, bool) or not isinstance(value, int):
        raise TraceFormatError(f"{where}: {field} must be an integer >= 0, got {_short(value)}")
    return _checked_length(where, field, value, _short(value))


def _json_tier(where: str, record: dict[str, Any], by_name: dict[str, TierSpec]) -> TierSpec:
    if "tier" not in record:
        return UNTIERED
    name = record["tier"]
    if not isinstance(name, str) or name not in by_name:
        raise TraceFormatError(f"{where}: tier must be one of {sorted(by_name)}, got {name!r}")
    return by_name[name]


def _json_priority(where: str, record: dict[str, Any], default: int) -> int:
    value = record.get("priority", default)
    low, high = PRIORITY_RANGE
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise TraceFormatError(f"{where}: priority must be an integer from {low} to {high}, got {_short(value)}")
    return value


def _client(where: str, value: object) -> str:
    if not isinstance(value, str) or not 1 <= len(value.strip()) <= MAX_CLIENT_CHARS:
        raise TraceFormatError(
            f"{where}: client must be a non-empty string of at most {MAX_CLIENT_CHARS} characters, "
            f"got {_short(value)}"
        )
    return value.strip()


def _clients(path: Path, clients: list[str | None], order: npt.NDArray[np.intp]) -> tuple[str, ...] | None:
    """The client column in arrival order, or None when no row names one."""
    missing = [i for i, client in enumerate(clients) if client is None]
    if len(missing) == len(clients):
        return None
    if missing:
        raise TraceFormatError(f"{path.name}: client given on some rows but not on row {missing[0] + 1}")
    return tuple(str(clients[int(i)]) for i in order)


def _table_for(labels: Sequence[str], tiers: tuple[TierSpec, ...]) -> tuple[TierSpec, ...]:
    used = set(labels)
    table = tiers if used - {UNTIERED.name} else ()
    if UNTIERED.name in used and UNTIERED.name not in {t.name for t in table}:
        table = (*table, UNTIERED)
    return table or (UNTIERED,)


# ---- shared ----------------------------------------------------------------------------------------------
def _open_text(path: Path) -> TextIO:
    if path.is_dir():
        raise WorkloadError(f"trace path {path}: is a directory, not a trace file")
    if not path.exists():
        raise DataNotFoundError(f"trace path {path}: no such file")
    try:
        return path.open("r", encoding="utf-8-sig", newline="", errors="strict")
    except OSError as exc:
        raise WorkloadError(f"trace path {path}: cannot be read ({exc.strerror or exc})") from None


def _not_utf8(path: Path, exc: UnicodeDecodeError) -> TraceFormatError:
    return TraceFormatError(f"{path.name}: not UTF-8 text ({exc.reason} at byte {exc.start})")


def _build(path: Path, columns: _Columns, tiers: tuple[TierSpec, ...]) -> tuple[Workload, LoadReport]:
    """Sort by time (stable), clamp zero lengths to 1, make times relative to the earliest request."""
    if not columns.time_s:
        raise TraceFormatError(f"{path.name}: contains no requests")
    times = np.asarray(columns.time_s, dtype=np.float64)
    order = np.argsort(times, kind="stable")
    prompt = np.asarray(columns.prompt_tokens, dtype=np.int64)[order]
    output = np.asarray(columns.output_tokens, dtype=np.int64)[order]
    report = LoadReport(
        path=path,
        num_rows=len(times),
        num_zero_prompt_clamped=int(np.count_nonzero(prompt == 0)),
        num_zero_output_clamped=int(np.count_nonzero(output == 0)),
        num_out_of_order=int(np.count_nonzero(np.diff(times) < 0)),
    )
    workload = Workload(
        name=path.stem,
        arrival_time_s=times[order] - times[order[0]],
        prompt_tokens=np.maximum(prompt, 1),
        output_tokens=np.maximum(output, 1),
        priority=np.asarray(columns.priority, dtype=np.int64)[order],
        tier=tuple(columns.tier[int(i)] for i in order),
        tiers=tiers,
        client=_clients(path, columns.client, order),
    )
    return workload, report


# ---- rate ------------------------------------------------------------------------------------------------
def rescale_to_rate(workload: Workload, target_rate_per_s: float) -> Workload:
    """Stretch or compress inter-arrival gaps so that ``workload.mean_rate()`` equals ``target_rate_per_s``.

    Times are scaled about the first arrival, so the relative shape of the traffic (bursts and lulls) is kept;
    lengths, priorities and tiers are unchanged.
    """
    if isinstance(target_rate_per_s, bool) or not math.isfinite(target_rate_per_s) or target_rate_per_s <= 0:
        raise WorkloadError(f"target_rate_per_s: must be a finite number > 0 (got {target_rate_per_s!r})")
    factor = workload.mean_rate() / target_rate_per_s
    times: npt.NDArray[np.float64] = workload.arrival_time_s
    first_s = float(times[0])
    if not math.isfinite(first_s + (float(times[-1]) - first_s) * factor):
        raise WorkloadError(
            f"target_rate_per_s: {target_rate_per_s!r} stretches {workload.name!r} beyond a float's range "
            f"(its own rate is {workload.mean_rate():g}/s)"
        )
    return workload.with_arrival_times(first_s + (times - first_s) * factor)
