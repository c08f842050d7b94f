"""Scheduling policies, one per module, each registered with :func:`register_policy`.

Importing this package imports every policy module, so ``make_policy("name")`` finds them all.
"""

from __future__ import annotations

import importlib
import pkgutil

from semsched.policies.registry import POLICIES, PolicyError, make_policy, register_policy

for _module in pkgutil.iter_modules(__path__):
    if _module.name != "registry":
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["POLICIES", "PolicyError", "make_policy", "register_policy"]
