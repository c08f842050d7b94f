"""Tests for semsched/core/specs.py: the one ``name:key=value;key=value`` syntax of policy and workload specs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import pytest

from semsched.core.errors import SemschedError
from semsched.core.specs import SpecSyntax, describe_parameters, type_name


class ThingError(SemschedError):
    pass


@dataclass(frozen=True)
class ThingConfig:
    count: int = 1
    scale: float = field(default=0.5, metadata={"doc": "how much"})
    mode: Literal["a", "b"] = "a"
    strict: bool = False
    weights: tuple[float, ...] | None = None
    limit: int | None = None

    def __post_init__(self) -> None:
        if self.count < 0:
            raise ValueError(f"count: must be >= 0 (got {self.count})")


SYNTAX = SpecSyntax("thing", ThingError)


def test_parse_splits_name_and_parameters() -> None:
    assert SYNTAX.parse(" box : count=3 ; scale = 2.5 ;") == ("box", {"count": "3", "scale": "2.5"})
    assert SYNTAX.parse("box") == ("box", {})
    assert SYNTAX.parse("box:path=a=b") == ("box", {"path": "a=b"})


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        (":count=1", "thing spec ':count=1': the thing name is empty"),
        ("box:count", "thing 'box': parameter 'count' must look like key=value"),
        ("box:count=1;count=2", "thing 'box': parameter 'count' given twice"),
        ("box:count=1,scale=2", "contains ','; separate parameters with ';'"),
    ],
)
def test_parse_errors_name_the_parameter(spec: str, needle: str) -> None:
    with pytest.raises(ThingError) as info:
        SYNTAX.parse(spec)
    assert needle in str(info.value)


def test_config_coerces_by_annotation() -> None:
    config = SYNTAX.config(
        ThingConfig,
        {"count": "4", "scale": "1e-3", "mode": "b", "strict": "yes", "weights": "1/2.5/0", "limit": "7"},
        name="box",
    )
    assert config == ThingConfig(4, 0.001, "b", True, (1.0, 2.5, 0.0), 7)
    assert SYNTAX.config(ThingConfig, {"count": 9}, name="box").count == 9  # non-strings pass as given


@pytest.mark.parametrize(
    ("params", "needle"),
    [
        (
            {"nope": "1"},
            "thing 'box': unknown parameter 'nope' (known: count, scale, mode, strict, weights, limit)",
        ),
        ({"count": "x"}, "thing 'box': parameter 'count' must be int, got 'x'"),
        ({"strict": "maybe"}, "parameter 'strict' must be bool, got 'maybe'"),
        ({"weights": "1/x"}, "parameter 'weights' must be a '/'-separated list of float, got '1/x'"),
        ({"count": "-1"}, "thing 'box': count: must be >= 0 (got -1)"),
    ],
)
def test_config_errors_name_the_parameter(params: dict[str, str], needle: str) -> None:
    with pytest.raises(ThingError) as info:
        SYNTAX.config(ThingConfig, params, name="box")
    assert needle in str(info.value)
    assert "\n" not in str(info.value)


def test_describe_parameters_for_listings() -> None:
    described = {p.name: p for p in describe_parameters(ThingConfig)}
    assert list(described) == ["count", "scale", "mode", "strict", "weights", "limit"]
    assert (described["scale"].type_name, described["scale"].default, described["scale"].doc) == (
        "float",
        0.5,
        "how much",
    )
    assert described["mode"].type_name == "'a' | 'b'"
    assert described["weights"].type_name == "float/float/... (optional)"
    assert described["limit"].type_name == "int (optional)"
    assert type_name(bool) == "bool"
