"""Policy registry: one decorator, one lookup, and ``name:key=value;key=value`` spec parsing.

The spec syntax is the same everywhere: on the command line (where ``,`` separates several specs), in
``SEMSCHED_POLICY`` and in experiment configurations.

Adding a policy means writing one file in this package with a ``@register_policy`` class; nothing else
changes (the package ``__init__`` imports every module it finds).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, TypeVar

from semsched.core.errors import SemschedError
from semsched.core.policy import Policy, PolicyConfig

P = TypeVar("P", bound=type[Policy])


class PolicyError(SemschedError):
    """Unknown policy, unknown parameter or bad parameter value; the message says which and why."""


class PolicyRegistry:
    """Maps names to policy classes. The package keeps one instance, :data:`POLICIES`."""

    def __init__(self) -> None:
        self._classes: dict[str, type[Policy]] = {}

    def register(self, cls: P) -> P:
        name = cls.name
        if name in self._classes and self._classes[name] is not cls:
            raise PolicyError(f"policy name {name!r} registered twice")
        self._classes[name] = cls
        return cls

    def unregister(self, name: str) -> None:
        """Forget ``name`` (for tests and plug-ins that register a policy for a while)."""
        self._classes.pop(name, None)

    def names(self) -> list[str]:
        return sorted(self._classes)

    def get(self, name: str) -> type[Policy]:
        try:
            return self._classes[name]
        except KeyError:
            raise PolicyError(f"unknown policy {name!r}; known: {', '.join(self.names())}") from None

    def create(self, spec: str, **overrides: Any) -> Policy:
        """Build a policy from ``name`` or ``name:key=value;key=value`` plus keyword overrides."""
        name, params = parse_spec(spec)
        cls = self.get(name)
        params.update(overrides)
        return cls(build_config(cls.config_cls, params, policy=name))


POLICIES = PolicyRegistry()


def register_policy(cls: P) -> P:
    """Class decorator: make ``cls`` available under ``cls.name``."""
    return POLICIES.register(cls)


def make_policy(spec: str, **overrides: Any) -> Policy:
    return POLICIES.create(spec, **overrides)


def parse_spec(spec: str) -> tuple[str, dict[str, Any]]:
    """Split ``name:key=value;key=value`` into the name and its parameters (values still strings).

    A parameter given twice is an error, never silently merged; ``,`` inside a spec is refused with a hint,
    since it separates specs on the command line."""
    name, _, rest = spec.strip().partition(":")
    name = name.strip()
    if not name:
        raise PolicyError(f"policy spec {spec!r}: the policy name is empty")
    params: dict[str, Any] = {}
    for item in filter(None, (part.strip() for part in rest.split(";"))):
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise PolicyError(f"policy {name!r}: parameter {item!r} must look like key=value")
        if "," in value:
            raise PolicyError(
                f"policy {name!r}: parameter {key!r}: value {value.strip()!r} contains ','; "
                "separate parameters with ';' (name:key=value;key=value)"
            )
        if key in params:
            raise PolicyError(f"policy {name!r}: parameter {key!r} given twice")
        params[key] = value.strip()
    return name, params


def build_config(config_cls: type[PolicyConfig], params: dict[str, Any], *, policy: str) -> PolicyConfig:
    fields = {f.name: f for f in dataclasses.fields(config_cls)}
    hints = typing.get_type_hints(config_cls)
    values: dict[str, Any] = {}
    for key, raw in params.items():
        if key not in fields:
            known = ", ".join(fields) or "none"
            raise PolicyError(f"policy {policy!r}: unknown parameter {key!r} (known: {known})")
        values[key] = _coerce(raw, hints[key], policy=policy, key=key)
    try:
        return config_cls(**values)
    except (TypeError, ValueError) as exc:
        raise PolicyError(f"policy {policy!r}: {exc}") from None


def _coerce(raw: Any, hint: Any, *, policy: str, key: str) -> Any:
    if not isinstance(raw, str):
        return raw
    target = _base_type(hint)
    try:
        if target is bool:
            if raw.lower() in ("1", "true", "yes", "on"):
                return True
            if raw.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError(raw)
        if target in (int, float, str):
            return target(raw)
    except ValueError:
        raise PolicyError(f"policy {policy!r}: parameter {key!r} must be {target.__name__}, got {raw!r}") from None
    return raw


def _base_type(hint: Any) -> Any:
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return args[0] if len(args) == 1 else str
    if typing.get_origin(hint) is typing.Literal:
        return str
    return hint
