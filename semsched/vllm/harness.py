"""Drive a vLLM scheduler without a model: for deterministic adapter tests and scheduler-overhead benchmarks.

:class:`SchedulerHarness` builds any vLLM v1 scheduler class (vLLM's own, or :class:`semsched.vllm.Scheduler`)
from a real ``VllmConfig`` (the model directory supplies the model config; no weights are loaded), with a
KV-cache of ``num_blocks`` blocks, and answers every scheduled step with one fake token per request that
completed its computed tokens. vLLM's KV manager, batch builder and output bookkeeping run for real; only the
forward pass is missing, so steps take no model time and decisions are exactly reproducible.
"""

from __future__ import annotations

import time
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
    """One scheduler instance plus a fake model runner. ``env`` is applied while the scheduler is built
    (e.g. ``{"SEMSCHED_POLICY": "priority-preempt"}``)."""

    def __init__(
        self,
        scheduler_cls: type[Any] | str,
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
        spec = FullAttentionSpec(block_size=cfg.block_size, num_kv_heads=1, head_size=16, dtype=torch.float32)
        kv_cache_config = KVCacheConfig(
            num_blocks=cfg.num_blocks, kv_cache_tensors=[], kv_cache_groups=[KVCacheGroupSpec(["layer"], spec)]
        )
        cls = resolve_obj_by_qualname(scheduler_cls) if isinstance(scheduler_cls, str) else scheduler_cls
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
        return bool(self.scheduler.has_requests())

    def step(self) -> StepRecord:
        from vllm.v1.outputs import ModelRunnerOutput

        scheduler = self.scheduler
        output = scheduler.schedule()
        self.num_steps += 1
        ids = list(output.num_scheduled_tokens)
        sampled = []
        for request_id in ids:
            request = scheduler.requests[request_id]
            done = request.num_computed_tokens >= request.num_tokens  # computed after this step's tokens
            sampled.append([FAKE_TOKEN_ID] if done else [])
        runner_output = ModelRunnerOutput(
            req_ids=ids, req_id_to_index={r: i for i, r in enumerate(ids)}, sampled_token_ids=sampled
        )
        record = StepRecord(self.num_steps, dict(output.num_scheduled_tokens), set(output.preempted_req_ids))
        for batch in scheduler.update_from_output(output, runner_output).values():
            for item in batch.outputs:
                self.output_tokens[item.request_id] = self.output_tokens.get(item.request_id, 0) + len(
                    item.new_token_ids
                )
                if item.finish_reason is not None:
                    record.finished.append(
                        Finished(item.request_id, self.num_steps, self.output_tokens[item.request_id],
                                 str(item.finish_reason), item.stop_reason)
                    )
        return record

    def run(self, max_steps: int = 100_000) -> list[StepRecord]:
        records = []
        while self.has_work():
            if self.num_steps >= max_steps:
                raise RuntimeError(f"harness: still busy after {max_steps} steps")
            records.append(self.step())
        return records
