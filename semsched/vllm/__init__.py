"""semsched in real vLLM: the ``scheduler_cls`` adapter, its configuration, metrics and request validation.

``semsched.vllm.Scheduler`` is the class to name in ``vllm serve --scheduler-cls``; it is imported lazily so that
``semsched.vllm.xargs``/``config`` (plain Python) work without vLLM installed. ``check_config`` validates
``SEMSCHED_POLICY``/``SEMSCHED_CONFIG`` early, as a vLLM general plug-in (see :mod:`semsched.vllm.config`).
"""

from __future__ import annotations

from typing import Any

__all__ = ["AsyncScheduler", "Scheduler", "XargsValidationMiddleware", "check_config"]


def __getattr__(name: str) -> Any:
    if name in ("Scheduler", "AsyncScheduler"):
        from semsched.vllm import scheduler

        return getattr(scheduler, name)
    if name == "XargsValidationMiddleware":
        from semsched.vllm.middleware import XargsValidationMiddleware

        return XargsValidationMiddleware
    if name == "check_config":
        from semsched.vllm.config import check_config

        return check_config
    raise AttributeError(f"module 'semsched.vllm' has no attribute {name!r}")
