"""Online output-length predictors by name (issue 16): ``make_length_predictor("semantic-knn:threshold=0.8")``.

Specs use the project's one syntax (:mod:`semsched.core.specs`): ``name:key=value;key=value``; ``,`` separates
several specs on a command line. Every predictor takes

* ``capacity`` (int, default 10,000): how many finished requests its FIFO history keeps;
* ``warmup`` (answer files, default none): the paper's "public datasets", AlpacaEval ``model_outputs.json`` or
  MT-Bench ``model_answer/*.jsonl`` files, several joined with ``+``, each a path or a glob
  (``warmup=../shared/data/mt_bench/model_answer/*.jsonl``). What a predictor does with them is its cold start,
  said in its docstring.

and its own parameters (``semsched.predict.knn``, ``semsched.predict.fitted``). A predictor is a class
registered with :func:`register_length_predictor`, its frozen config dataclass (a :class:`PredictorConfig`) in
``config_cls``; the config's ``__post_init__`` checks the values and its message names the field and the limit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from semsched.core.errors import SemschedError
from semsched.core.specs import ParameterInfo, SpecSyntax, describe_parameters
from semsched.predict.history import (
    DEFAULT_CAPACITY,
    MAX_CAPACITY,
    Corpus,
    TextEncoder,
    load_corpus,
    resolve_paths,
)
from semsched.predict.online import OnlineLengthPredictor


class LengthPredictorError(SemschedError):
    """Unknown length predictor, unknown parameter or a bad value; the message names the field and the limit."""


def check_int(name: str, value: object, low: int, high: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ValueError(f"{name}: must be an integer from {low} to {high} (got {value!r})")


def check_float(name: str, value: object, low: float, high: float) -> None:
    if (isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value)
            or not low <= value <= high):
        raise ValueError(f"{name}: must be a number from {low:g} to {high:g} (got {value!r})")


@dataclass(frozen=True)
class PredictorConfig:
    """What every online length predictor takes (module docstring)."""

    capacity: int = field(default=DEFAULT_CAPACITY, metadata={"doc": "finished requests kept (FIFO)"})
    warmup: str | None = field(default=None, metadata={
        "doc": "warm-up answer files ('+'-joined paths or globs): the cold start"})

    def __post_init__(self) -> None:
        check_int("capacity", self.capacity, 1, MAX_CAPACITY)
        if self.warmup is not None and not self.warmup.strip():
            raise ValueError("warmup: give at least one path or glob, or leave it out")


class PredictorClass(Protocol):
    """What :func:`register_length_predictor` needs of a predictor class."""

    name: str
    summary: str
    config_cls: type[PredictorConfig]

    def __call__(self, config: Any, warmup: Corpus) -> OnlineLengthPredictor: ...


T = TypeVar("T")
_PREDICTORS: dict[str, PredictorClass] = {}
_SYNTAX = SpecSyntax("length predictor", LengthPredictorError)


def register_length_predictor(cls: T) -> T:
    """Class decorator: make ``cls`` (with ``name``, ``summary`` and ``config_cls``) buildable by name."""
    entry: PredictorClass = cls  # type: ignore[assignment]
    if entry.name in _PREDICTORS and _PREDICTORS[entry.name] is not entry:
        raise LengthPredictorError(f"length predictor {entry.name!r} registered twice")
    _PREDICTORS[entry.name] = entry
    return cls


def _builtin() -> dict[str, PredictorClass]:
    from semsched.predict import fitted, knn  # noqa: F401  (importing them registers them)

    return _PREDICTORS


def length_predictor_names() -> list[str]:
    return sorted(_builtin())


def predictor_class(name: str) -> PredictorClass:
    try:
        return _builtin()[name]
    except KeyError:
        raise LengthPredictorError(f"unknown length predictor {name!r}; known: "
                                   f"{', '.join(length_predictor_names())}") from None


def parse_length_spec(spec: str) -> tuple[PredictorClass, PredictorConfig]:
    """The class and validated config a spec names (nothing loaded or built yet)."""
    name, params = _SYNTAX.parse(spec)
    cls = predictor_class(name)
    config: PredictorConfig = _SYNTAX.config(cls.config_cls, params, name=name)
    return cls, config


def make_length_predictor(spec: str, embedder: TextEncoder | None = None) -> OnlineLengthPredictor:
    """Build the predictor a spec names, its warm-up files read and embedded (``embedder``, default a disk-cached
    :class:`~semsched.predict.embed.Embedder`).
    A warm-up path that matches nothing or a file of the wrong format is an error naming it."""
    cls, config = parse_length_spec(spec)
    warmup = Corpus.empty()
    if config.warmup is not None:
        try:
            warmup = load_corpus(resolve_paths(config.warmup), embedder)
        except SemschedError as error:
            raise LengthPredictorError(f"length predictor {cls.name!r}: {error}") from None
    return cls(config, warmup)


def describe_length_predictors() -> list[tuple[str, str, tuple[ParameterInfo, ...]]]:
    """(name, summary, parameters) of every registered predictor, for listings."""
    return [(name, cls.summary, describe_parameters(cls.config_cls)) for name, cls in sorted(_builtin().items())]
