"""Policy registry: one decorator, one lookup, and ``name:key=value;key=value`` spec parsing.

The spec syntax is the same everywhere: on the command line (where ``,`` separates several specs), in
``SEMSCHED_POLICY`` and in experiment configurations.

Adding a policy means writing one file in this package with a ``@register_policy`` class; nothing else
changes (the package ``__init__`` imports every module it finds).

One parameter works on every policy that has none of that name and leaves ``preemption_mode`` to the base class:
``preemption=swap`` (default ``recompute``) swaps each victim's KV to CPU instead of recomputing it
(:attr:`~semsched.core.policy.Policy.swap_victims`; the engine needs CPU blocks,
``SchedulerConfig.num_cpu_blocks``, and recomputes what they cannot hold). Seed 002's reproduction runs every
baseline that way (issue 30).
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

from semsched.core.errors import SemschedError
from semsched.core.policy import Policy, PolicyConfig
from semsched.core.specs import SpecSyntax
from semsched.latency import ProfileError

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
        swap = _generic_preemption(cls, name, params)
        config = build_config(cls.config_cls, params, policy=name)
        try:
            policy = cls(config)
        except ProfileError as error:  # the profile a policy prices its work with: name the policy
            raise PolicyError(f"policy {name!r}: parameter 'profile': {error}") from None
        policy.swap_victims = swap
        return policy


_SYNTAX = SpecSyntax("policy", PolicyError)
PREEMPTION_MODES = ("recompute", "swap")


def _generic_preemption(cls: type[Policy], name: str, params: dict[str, Any]) -> bool:
    """``preemption=swap|recompute`` on a policy with no ``preemption`` parameter of its own: whether its victims
    are swapped (:attr:`Policy.swap_victims`; default recompute). Taken out of ``params``. A policy that chooses
    each victim's mode itself (it overrides ``preemption_mode``) refuses it."""
    if "preemption" not in params or any(f.name == "preemption" for f in dataclasses.fields(cls.config_cls)):
        return False
    value = str(params.pop("preemption"))
    if value not in PREEMPTION_MODES:
        raise PolicyError(f"policy {name!r}: parameter 'preemption' must be one of {', '.join(PREEMPTION_MODES)}, "
                          f"got {value!r}")
    if cls.preemption_mode is not Policy.preemption_mode:
        raise PolicyError(f"policy {name!r}: parameter 'preemption': this policy chooses each victim's "
                          "preemption mode itself (see its own parameters)")
    return value == "swap"

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
    name, params = _SYNTAX.parse(spec)
    return name, dict(params)


def build_config(config_cls: type[PolicyConfig], params: dict[str, Any], *, policy: str) -> PolicyConfig:
    return _SYNTAX.config(config_cls, params, name=policy)
