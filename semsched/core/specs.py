"""``name:key=value;key=value`` specs: the one syntax of policy and workload specs.

A spec names a registered thing and sets some of its parameters. The parameters land in a frozen config
dataclass; its field annotations say how each string is read (``int``, ``float``, ``str``, ``bool``,
``Literal[...]`` as a string, ``tuple[float, ...]`` as ``/``-separated values, any of them ``| None``), and
its ``__post_init__`` checks the values. :class:`SpecSyntax` holds the parsing and the coercion once, for
every kind of spec; each registry makes one with the word its messages use and its own error class.

A field's ``metadata={"doc": "..."}`` is its one-line description in listings (:func:`describe_parameters`).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from semsched.core.errors import SemschedError

C = TypeVar("C")

LIST_SEPARATOR = "/"
"""Separates the items of a list value (``tier_weights=5/20/50/25``); ``,`` separates specs, ``;`` parameters."""

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


@dataclass(frozen=True)
class ParameterInfo:
    """One parameter of a config dataclass, for listings: its name, type as written in a spec, default, doc."""

    name: str
    type_name: str
    default: Any
    doc: str


@dataclass(frozen=True)
class SpecSyntax:
    """Parses specs of one kind (``kind`` is the word messages use: "policy", "workload") and raises ``error``,
    with one line that names the spec, the parameter and what was wrong."""

    kind: str
    error: type[SemschedError]

    def parse(self, spec: str) -> tuple[str, dict[str, str]]:
        """Split ``name:key=value;key=value`` into the name and its parameters (values still strings).

        A parameter given twice is an error, never silently merged; ``,`` inside a value is refused with a hint,
        since it separates specs on the command line."""
        name, _, rest = spec.strip().partition(":")
        name = name.strip()
        if not name:
            raise self.error(f"{self.kind} spec {spec!r}: the {self.kind} name is empty")
        params: dict[str, str] = {}
        for item in filter(None, (part.strip() for part in rest.split(";"))):
            key, sep, value = item.partition("=")
            key = key.strip()
            if not sep or not key:
                raise self.error(f"{self.kind} {name!r}: parameter {item!r} must look like key=value")
            if "," in value:
                raise self.error(
                    f"{self.kind} {name!r}: parameter {key!r}: value {value.strip()!r} contains ','; "
                    "separate parameters with ';' (name:key=value;key=value)"
                )
            if key in params:
                raise self.error(f"{self.kind} {name!r}: parameter {key!r} given twice")
            params[key] = value.strip()
        return name, params

    def config(self, config_cls: type[C], params: Mapping[str, Any], *, name: str) -> C:
        """``config_cls`` built from ``params``: strings coerced by the field's annotation, other values as
        given. An unknown key, a value of the wrong type, or a value the config's own checks refuse raises
        ``error`` naming it."""
        fields = {f.name: f for f in dataclasses.fields(typing.cast(Any, config_cls))}
        hints = typing.get_type_hints(config_cls)
        values: dict[str, Any] = {}
        for key, raw in params.items():
            if key not in fields:
                known = ", ".join(fields) or "none"
                raise self.error(f"{self.kind} {name!r}: unknown parameter {key!r} (known: {known})")
            values[key] = self._coerce(raw, hints[key], name=name, key=key)
        try:
            return config_cls(**values)
        except (TypeError, ValueError) as exc:
            raise self.error(f"{self.kind} {name!r}: {exc}") from None

    def _coerce(self, raw: Any, hint: Any, *, name: str, key: str) -> Any:
        if not isinstance(raw, str):
            return raw
        target = _base_type(hint)
        if typing.get_origin(target) is tuple:
            item_type = _base_type(typing.get_args(target)[0])
            items = [item.strip() for item in raw.split(LIST_SEPARATOR)]
            return tuple(self._coerce_one(item, item_type, name=name, key=key, whole=raw) for item in items)
        return self._coerce_one(raw, target, name=name, key=key, whole=raw)

    def _coerce_one(self, raw: str, target: Any, *, name: str, key: str, whole: str) -> Any:
        try:
            if target is bool:
                if raw.lower() in _TRUE:
                    return True
                if raw.lower() in _FALSE:
                    return False
                raise ValueError(raw)
            if target in (int, float, str):
                return target(raw)
        except ValueError:
            what = target.__name__ if raw == whole else f"a {LIST_SEPARATOR!r}-separated list of {target.__name__}"
            raise self.error(f"{self.kind} {name!r}: parameter {key!r} must be {what}, got {whole!r}") from None
        return raw


def describe_parameters(config_cls: type[Any]) -> tuple[ParameterInfo, ...]:
    """Every field of ``config_cls`` as a spec would set it, in declaration order."""
    hints = typing.get_type_hints(config_cls)
    return tuple(
        ParameterInfo(
            name=f.name,
            type_name=type_name(hints[f.name]),
            default=f.default if f.default is not dataclasses.MISSING else None,
            doc=str(f.metadata.get("doc", "")),
        )
        for f in dataclasses.fields(config_cls)
    )


def type_name(hint: Any) -> str:
    """How a value of type ``hint`` is written in a spec: ``float``, ``'ttft' | 'e2e'``, ``float/float/...``."""
    optional = _allows_none(hint)
    target = _without_none(hint)
    if typing.get_origin(target) is typing.Literal:
        text = " | ".join(repr(a) for a in typing.get_args(target))
    elif typing.get_origin(target) is tuple:
        item = type_name(typing.get_args(target)[0])
        text = f"{item}{LIST_SEPARATOR}{item}{LIST_SEPARATOR}..."
    else:
        text = getattr(target, "__name__", str(target))
    return f"{text} (optional)" if optional else text


def _is_union(hint: Any) -> bool:
    return isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union


def _allows_none(hint: Any) -> bool:
    return _is_union(hint) and type(None) in typing.get_args(hint)


def _without_none(hint: Any) -> Any:
    if not _is_union(hint):
        return hint
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    return args[0] if len(args) == 1 else str


def _base_type(hint: Any) -> Any:
    """The type a string is converted to: ``X`` for ``X | None``, ``str`` for other unions and literals."""
    target = _without_none(hint)
    if typing.get_origin(target) is typing.Literal:
        return str
    return target
