"""semsched in real vLLM: the ``scheduler_cls`` adapter, its configuration, metrics and request validation.

``semsched.vllm.Scheduler`` is the class to name in ``vllm serve --scheduler-cls``; it is imported lazily so that
``semsched.vllm.xargs``/``config`` (plain Python) work without vLLM installed. ``check_config`` validates
``SEMSCHED_POLICY``/``SEMSCHED_CONFIG`` early, as a vLLM general plug-in (see :mod:`semsched.vllm.config`).

Never imports the simulator, workloads, metrics, the calibration lab or the experiments
(``tests/test_layout.py``). User guide: docs/vllm.md.

* ``scheduler``: ``Scheduler`` (and ``AsyncScheduler``), a subclass of vLLM's v1 scheduler that keeps vLLM's
  KV manager and batch builder and steers them through the policy hooks: the waiting queues of ``queues``,
  displacement of every victim a step needs by the rules of
  :mod:`semsched.core.displacement`, ``running`` ordered by ``victim_key`` so that vLLM's FCFS-mode victim is
  the policy's (re-sorted only where its order can matter), ``step_budget``, the callbacks; admission
  rejections end as ``abort`` outputs with the reason in ``stop_reason``; hooks a policy does not override are
  not called; the active policy is logged once. Preemption is recompute only. Its module docstring is the
  full contract.
* ``queues``: vLLM's waiting-queue interface in a policy's order: ``PolicyQueue`` (by ``waiting_key``; for keys
  that drift, a re-key keys only the requests whose ``waiting_key_until`` has come), ``ClassedPolicyQueue``
  (tiered's aging classes: one key per class at a re-key), ``PlanQueue`` (a fixed ``waiting_order``, read
  lazily).
* ``xargs``: per-request inputs (``priority``, ``vllm_xargs``: tier, SLOs, urgency, predicted lengths) and their
  validation (``parse_request_options``: sizes checked before conversion, near misses of semsched's keys
  refused with the key meant).
* ``config``: the policy from ``SEMSCHED_POLICY``/``SEMSCHED_CONFIG``, user policy modules from
  ``SEMSCHED_POLICY_MODULES``, and ``check_config``, the ``vllm.general_plugins`` entry point that stops a badly
  configured server before weights load. ``environ``: ``temporary_environ`` (how configuration reaches a
  scheduler vLLM builds itself).
* ``middleware``, ``frontend``: the ASGI middleware that answers bad inputs with 400 on every route that carries
  them, and the API-server patch that ends a streamed rejection with an error event.
* ``metrics``: the ``semsched_*`` Prometheus families, labelled by priority and tier.
* ``harness``: ``SchedulerHarness``: any vLLM scheduler class with a real ``VllmConfig`` and KV manager but a
  fake model runner (one token per completed step), synchronous or with two batches in flight as vLLM's async
  engine core drives it: exact adapter tests and scheduler-only overhead.
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
