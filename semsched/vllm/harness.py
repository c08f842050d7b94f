"""Drive a vLLM scheduler without a model: for deterministic adapter tests and scheduler-overhead benchmarks.

:class:`SchedulerHarness` builds any vLLM v1 scheduler class (vLLM's own, or :class:`semsched.vllm.Scheduler`)
from a real ``VllmConfig`` (the model directory supplies the model config; no weights are loaded), with a
KV-cache of ``num_blocks`` blocks, and answers every scheduled step with one fake token per request that
completed its computed tokens. vLLM's KV manager, batch builder and output bookkeeping run for real; only the
forward pass is missing, so steps take no model time and decisions are exactly reproducible.

With ``HarnessConfig(async_scheduling=True)`` the scheduler is built as under vLLM's asynchronous scheduling
(the CPU platform turns it off in the config; the harness turns it back on) and driven as vLLM's engine core
drives it (``EngineCore.step_with_batch_queue``, a queue of two batches): each step schedules the next batch
before the previous batch's output reaches ``update_from_output``, so the scheduler works with output
placeholders exactly as on a GPU.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from semsched.vllm.environ import temporary_environ

FAKE_TOKEN_ID = 7


@dataclass(frozen=True)
class HarnessConfig:
    num_blocks: int = 32
    block_size: int = 32
    max_num_seqs: int = 16
    max_num_batched_tokens: int = 512
    max_model_len: int = 512
    enable_prefix_caching: bool = False
    #: build and drive the scheduler as under vLLM's asynchronous scheduling (see the module docstring)
    async_scheduling: bool = False


ASYNC_BATCH_QUEUE_SIZE = 2
"""Batches in flight under asynchronous scheduling, as in vLLM's engine core."""


@dataclass
class Finished:
    request_id: str
    step: int
    num_output_tokens: int
    finish_reason: str
    stop_reason: str | int | None


@dataclass
class StepRecord:
    step: int
    num_scheduled_tokens: dict[str, int]
    preempted: set[str]
    finished: list[Finished] = field(default_factory=list)




class SchedulerHarness:
    """One scheduler instance plus a fake model runner. ``scheduler_cls`` None is vLLM's own class for the
    config (its async scheduler under ``async_scheduling``). ``env`` is applied while the scheduler is built
    (e.g. ``{"SEMSCHED_POLICY": "priority-preempt"}``)."""

    def __init__(
        self,
        scheduler_cls: type[Any] | str | None,
        model_dir: str | Path,
        config: HarnessConfig | None = None,
        *,
        env: Mapping[str, str] | None = None,
        scheduling_policy: str = "fcfs",  # vLLM's own policy, for vLLM's scheduler class
    ) -> None:
        import torch
        from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, VllmConfig
        from vllm.utils.import_utils import resolve_obj_by_qualname
        from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
        from vllm.v1.structured_output import StructuredOutputManager

        self.config = cfg = config or HarnessConfig()
        model_config = ModelConfig(model=str(model_dir), max_model_len=cfg.max_model_len, dtype="bfloat16", seed=0)
        scheduler_config = SchedulerConfig(
            max_num_seqs=cfg.max_num_seqs,
            max_num_batched_tokens=cfg.max_num_batched_tokens,
            max_model_len=cfg.max_model_len,
            is_encoder_decoder=False,
            enable_chunked_prefill=True,
            policy=scheduling_policy,  # type: ignore[arg-type]  # validated by vLLM
        )
        cache_config = CacheConfig(
            block_size=cfg.block_size, cache_dtype="auto", enable_prefix_caching=cfg.enable_prefix_caching
        )
        cache_config.num_gpu_blocks = cfg.num_blocks
        vllm_config = VllmConfig(
            model_config=model_config, scheduler_config=scheduler_config, cache_config=cache_config
        )
        # The CPU platform turns asynchronous scheduling off while the config is built; set it afterwards.
        vllm_config.scheduler_config.async_scheduling = cfg.async_scheduling
        spec = FullAttentionSpec(block_size=cfg.block_size, num_kv_heads=1, head_size=16, dtype=torch.float32)
        kv_cache_config = KVCacheConfig(
            num_blocks=cfg.num_blocks, kv_cache_tensors=[], kv_cache_groups=[KVCacheGroupSpec(["layer"], spec)]
        )
        cls: Any
        if scheduler_cls is None:
            cls = vllm_config.scheduler_config.get_scheduler_cls()
        elif isinstance(scheduler_cls, str):
            cls = resolve_obj_by_qualname(scheduler_cls)
        else:
            cls = scheduler_cls
        with temporary_environ(env or {}):
            self.scheduler = cls(
                vllm_config=vllm_config,
                kv_cache_config=kv_cache_config,
                structured_output_manager=StructuredOutputManager(vllm_config),
                block_size=cfg.block_size,
                log_stats=False,
            )
        self.num_steps = 0
        self.output_tokens: dict[str, int] = {}
        self._in_flight: deque[tuple[Any, Any]] = deque()  # (scheduler output, runner output), oldest first

    def add(
        self,
        request_id: str,
        prompt_token_ids: list[int],
        max_tokens: int,
        *,
        priority: int = 0,
        extra_args: dict[str, Any] | None = None,
        arrival_time: float | None = None,
    ) -> None:
        from vllm.sampling_params import SamplingParams
        from vllm.v1.request import Request

        params = SamplingParams(max_tokens=max_tokens, ignore_eos=True, extra_args=extra_args)
        request = Request(
            request_id, list(prompt_token_ids), params, None,
            arrival_time=time.time() if arrival_time is None else arrival_time, priority=priority,
        )
        self.output_tokens[request_id] = 0
        self.scheduler.add_request(request)

    def has_work(self) -> bool:
        return bool(self.scheduler.has_requests()) or bool(self._in_flight)

    def step(self) -> StepRecord:
        """One engine step: schedule a batch and deliver an output. Synchronous: this batch's own output.
        Asynchronous: the oldest batch in flight, once the queue is full or nothing new could be scheduled;
        the record's ``finished`` are the requests that output finished."""
        scheduler = self.scheduler
        self.num_steps += 1
        record = StepRecord(self.num_steps, {}, set())
        if scheduler.has_requests():
            output = scheduler.schedule()
            record.num_scheduled_tokens = dict(output.num_scheduled_tokens)
            record.preempted = set(output.preempted_req_ids)
            self._in_flight.append((output, self._fake_model_output(output)))
            if (self.config.async_scheduling and len(self._in_flight) < ASYNC_BATCH_QUEUE_SIZE
                    and output.total_num_scheduled_tokens > 0):
                return record
        if self._in_flight:
            self._deliver(*self._in_flight.popleft(), record)
        return record

    def _fake_model_output(self, output: Any) -> Any:
        """One token for every scheduled request that is not in the middle of its prompt (vLLM's scheduler
        sets ``is_prefill_chunk`` as it schedules, placeholders included under asynchronous scheduling)."""
        from vllm.v1.outputs import ModelRunnerOutput

        ids = list(output.num_scheduled_tokens)
        requests = self.scheduler.requests
        sampled = [[] if requests[r].is_prefill_chunk else [FAKE_TOKEN_ID] for r in ids]
        return ModelRunnerOutput(
            req_ids=ids, req_id_to_index={r: i for i, r in enumerate(ids)}, sampled_token_ids=sampled
        )

    def _deliver(self, output: Any, runner_output: Any, record: StepRecord) -> None:
        for batch in self.scheduler.update_from_output(output, runner_output).values():
            for item in batch.outputs:
                self.output_tokens[item.request_id] = self.output_tokens.get(item.request_id, 0) + len(
                    item.new_token_ids
                )
                if item.finish_reason is not None:
                    record.finished.append(
                        Finished(item.request_id, self.num_steps, self.output_tokens[item.request_id],
                                 str(item.finish_reason), item.stop_reason)
                    )

    def run(self, max_steps: int = 100_000) -> list[StepRecord]:
        records = []
        while self.has_work():
            if self.num_steps >= max_steps:
                raise RuntimeError(f"harness: still busy after {max_steps} steps")
            records.append(self.step())
        return records
