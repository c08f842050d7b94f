"""Small helpers for policy config dataclasses: a documented field, and range checks whose errors name the
field and the limit (``semsched policies`` shows each field's doc)."""

from __future__ import annotations

import math
from dataclasses import field
from typing import Any


def param(default: Any, doc: str) -> Any:
    """A config field with its one-line documentation (read by ``core.specs.describe_parameters``)."""
    return field(default=default, metadata={"doc": doc})


def check_int(name: str, value: object, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"{name} must be an integer from {low} to {high}, got {value!r}")


def check_float(name: str, value: object, low: float, high: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
            or not low <= value <= high:
        raise ValueError(f"{name} must be a number from {low:g} to {high:g}, got {value!r}")
