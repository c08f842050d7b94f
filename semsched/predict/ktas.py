"""KTAS emergency-department triage records (../shared/data/ktas_triage.csv): what an emergency-dispatch LLM would
be told about a patient, and the experts' urgency label (issue 15, seed 000's real-data urgency).

The file is ``;``-separated with decimal commas; missing values are blanks, ``??`` or the spreadsheet error
``#BOÞ!``.
Only what is known at triage is kept as input: the group, sex, age, arrival mode, injury, chief complaint,
mental state, pain and vital signs. The nurses' own label (``KTAS_RN``) is kept beside the expert label to compare
with; the diagnosis, disposition, length of stay and mistriage columns are never read (they come later, or are
derived from the labels).

KTAS levels: 1 = most urgent (resuscitation) ... 5 = least urgent. *Under-triage* is a predicted level less
urgent (larger) than the expert's.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from semsched.core.errors import SemschedError

NUM_LEVELS = 5
#: columns a triage file must have: the inputs and both labels
INPUT_COLUMNS = ("Group", "Sex", "Age", "Arrival mode", "Injury", "Chief_complain", "Mental", "Pain", "NRS_pain",
                 "SBP", "DBP", "HR", "RR", "BT", "Saturation")
LABEL_COLUMN, NURSE_COLUMN = "KTAS_expert", "KTAS_RN"
REQUIRED_COLUMNS = (*INPUT_COLUMNS, LABEL_COLUMN, NURSE_COLUMN)
#: numeric inputs (vital signs, age, pain score), NaN where missing
NUMERIC_COLUMNS = ("Age", "NRS_pain", "SBP", "DBP", "HR", "RR", "BT", "Saturation")
#: coded inputs (small integers), kept as categories
CATEGORICAL_COLUMNS = ("Group", "Sex", "Arrival mode", "Injury", "Mental", "Pain")
MISSING_MARKERS = frozenset({"", "??", "#BOÞ!", "#VALUE!", "NA", "nan"})

# Codes of the original study (Moon et al., PLOS ONE 2019), for the text a dispatcher model would receive.
_SEX = {"1": "female", "2": "male"}
_ARRIVAL = {"1": "walked in", "2": "public ambulance", "3": "private vehicle", "4": "private ambulance",
            "5": "other", "6": "other", "7": "other"}
_MENTAL = {"1": "alert", "2": "responds to verbal", "3": "responds to pain", "4": "unresponsive"}
_INJURY = {"1": "no injury", "2": "injury"}


class TriageDataError(SemschedError):
    """A triage file cannot be read: the message names the file, the row or the missing columns."""


@dataclass(frozen=True)
class TriageRecords:
    """The rows of a triage file: texts, numeric and coded inputs, and the labels (levels 1-5)."""

    texts: tuple[str, ...]
    complaints: tuple[str, ...]  # the chief complaint alone (free text)
    numeric: np.ndarray  # (n, len(NUMERIC_COLUMNS)), NaN where missing
    categorical: tuple[tuple[str, ...], ...]  # per row, one code per CATEGORICAL_COLUMNS ("" where missing)
    expert: np.ndarray  # (n,) int levels 1..5
    nurse: np.ndarray  # (n,) int levels 1..5

    def __len__(self) -> int:
        return len(self.texts)

    def subset(self, rows: Sequence[int]) -> TriageRecords:
        """The records at ``rows`` (in that order; repeats allowed)."""
        index = np.asarray(rows, dtype=np.int64)
        return TriageRecords(tuple(self.texts[i] for i in index), tuple(self.complaints[i] for i in index),
                             self.numeric[index], tuple(self.categorical[i] for i in index), self.expert[index],
                             self.nurse[index])


def load_ktas(path: str | Path) -> TriageRecords:
    """Read a KTAS triage file. Raises :class:`TriageDataError` naming missing columns, or the row and column of a
    bad value (a label outside 1-5, a number that is not one)."""
    source = Path(path)
    try:
        with source.open(encoding="utf-8", newline="") as handle:
            rows = list(csv.DictReader(handle, delimiter=";"))
    except OSError as error:
        raise TriageDataError(f"{source}: cannot read it ({error.strerror or error})") from error
    except UnicodeDecodeError as error:
        raise TriageDataError(f"{source}: not UTF-8 text ({error.reason})") from error
    header = set(rows[0]) if rows else set()
    missing = [column for column in REQUIRED_COLUMNS if column not in header]
    if missing:
        raise TriageDataError(f"{source}: missing columns {', '.join(missing)} (a KTAS file has "
                              f"{', '.join(REQUIRED_COLUMNS)})")
    texts, complaints, numeric, categorical, expert, nurse = [], [], [], [], [], []
    for line, row in enumerate(rows, start=2):  # line 1 is the header
        where = f"{source}: row {line}"
        numeric.append([_number(row[c], f"{where}, {c}") for c in NUMERIC_COLUMNS])
        categorical.append(tuple(_code(row[c]) for c in CATEGORICAL_COLUMNS))
        expert.append(_level(row[LABEL_COLUMN], f"{where}, {LABEL_COLUMN}"))
        nurse.append(_level(row[NURSE_COLUMN], f"{where}, {NURSE_COLUMN}"))
        texts.append(triage_text(row))
        complaints.append((row["Chief_complain"] or "").strip())
    if not texts:
        raise TriageDataError(f"{source}: no rows")
    return TriageRecords(tuple(texts), tuple(complaints), np.asarray(numeric, dtype=np.float64),
                         tuple(categorical),
                         np.asarray(expert, dtype=np.int64), np.asarray(nurse, dtype=np.int64))


def triage_text(row: dict[str, str]) -> str:
    """The message an emergency-dispatch LLM would receive about the patient in ``row`` (inputs only)."""

    def value(column: str) -> str | None:
        raw = (row.get(column) or "").strip()
        return None if raw in MISSING_MARKERS else raw.replace(",", ".")

    parts = [f"Chief complaint: {(row.get('Chief_complain') or '').strip() or 'not given'}."]
    who = [f"{value('Age')}-year-old" if value("Age") else None, _SEX.get(value("Sex") or "")]
    if any(who):
        parts.append("Patient: " + " ".join(w for w in who if w) + ".")
    arrival, mental, injury = (_ARRIVAL.get(value("Arrival mode") or ""), _MENTAL.get(value("Mental") or ""),
                               _INJURY.get(value("Injury") or ""))
    parts += [f"Arrival: {arrival}." if arrival else "", f"Mental state: {mental}." if mental else "",
              f"{injury.capitalize()}." if injury else ""]
    if value("NRS_pain"):
        parts.append(f"Pain score {value('NRS_pain')}/10.")
    vitals = [(label, value(column)) for label, column in (("BP", "SBP"), ("HR", "HR"), ("RR", "RR"),
                                                            ("temp", "BT"), ("SpO2", "Saturation"))]
    if value("SBP") and value("DBP"):
        vitals[0] = ("BP", f"{value('SBP')}/{value('DBP')}")
    shown = [f"{label} {v}" for label, v in vitals if v]
    if shown:
        parts.append("Vitals: " + ", ".join(shown) + ".")
    return " ".join(p for p in parts if p)


def _number(raw: str, where: str) -> float:
    text = (raw or "").strip()
    if text in MISSING_MARKERS:
        return math.nan
    try:
        value = float(text.replace(",", "."))
    except ValueError:
        raise TriageDataError(f"{where}: {text!r} is not a number") from None
    return value if math.isfinite(value) else math.nan


def _code(raw: str) -> str:
    text = (raw or "").strip()
    return "" if text in MISSING_MARKERS else text


def _level(raw: str, where: str) -> int:
    text = (raw or "").strip()
    if text not in {str(level) for level in range(1, NUM_LEVELS + 1)}:
        raise TriageDataError(f"{where}: a KTAS level is 1 to {NUM_LEVELS}, got {text!r}")
    return int(text)
