"""semsched behind ``vllm serve`` and the OpenAI API (streaming), against vLLM's own priority policy on the same
workload in the same run; per-request validation (400) and the adapter's Prometheus metrics."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.vllm.harness import SERVED_MODEL_NAME, stream_completion, vllm_server

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

ADAPTER = "semsched.vllm.Scheduler"
MIDDLEWARE = ["--middleware", "semsched.vllm.XargsValidationMiddleware"]
LOW_OUTPUT, HIGH_OUTPUT = 480, 32
# Two sequence slots: the two low-priority streams hold both, so the late high-priority requests cannot start in
# vLLM until one finishes, however late the client sees the stream (it lags the engine on 2 shared cores).
SIZES = {"max_num_seqs": 2}


@pytest.fixture(scope="module")
def semsched_server(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    workdir = tmp_path_factory.mktemp("semsched-serve")
    metrics_dir = workdir / "prometheus"
    metrics_dir.mkdir()
    env = {"SEMSCHED_POLICY": "priority-preempt:exclusive=true", "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir)}
    with vllm_server(tiny_model_dir, workdir / "server.log", scheduler_cls=ADAPTER, env=env,
                     extra_args=MIDDLEWARE, **SIZES) as base_url:
        yield base_url


@dataclass
class _Stream:
    """A streamed completion run in a thread; ``tokens`` grows as chunks arrive."""

    body: dict[str, Any]
    tokens: int = 0
    finish_reason: str | None = None
    done_at: float | None = None
    usage_tokens: int | None = None
    error: BaseException | None = None
    thread: threading.Thread = field(init=False)

    def start(self, base_url: str) -> _Stream:
        self.thread = threading.Thread(target=self._run, args=(base_url,), daemon=True)
        self.thread.start()
        return self

    def _run(self, base_url: str) -> None:
        import json

        request = {"model": SERVED_MODEL_NAME, **self.body, "stream": True, "ignore_eos": True,
                   "return_token_ids": True, "stream_options": {"include_usage": True}}
        try:
            with httpx.Client(base_url=base_url, timeout=300.0) as client, client.stream(
                "POST", "/v1/completions", json=request
            ) as response:
                response.raise_for_status()
                for line in response.iter_lines():
                    if not line.startswith("data: ") or line == "data: [DONE]":
                        continue
                    chunk = json.loads(line.removeprefix("data: "))
                    if chunk.get("usage"):
                        self.usage_tokens = chunk["usage"]["completion_tokens"]
                    for choice in chunk.get("choices", []):
                        self.tokens += len(choice.get("token_ids") or [])
                        if choice.get("finish_reason"):
                            self.finish_reason = choice["finish_reason"]
                            self.done_at = time.monotonic()
        except BaseException as error:  # reported by the test thread
            self.error = error


def _late_high_priority(base_url: str) -> dict[str, _Stream]:
    """Two low-priority streams take both sequence slots and, as they grow to 16 blocks each, more than the
    KV cache (31 usable blocks of 32 tokens); once both have streamed a token, two high-priority
    requests arrive (416-token prompts)."""
    rng = random.Random(0)

    def body(prompt_len: int, max_tokens: int, priority: int) -> dict[str, Any]:
        return {"prompt": [rng.randrange(100, 31000) for _ in range(prompt_len)], "max_tokens": max_tokens,
                "priority": priority, "vllm_xargs": {"tier": "BACKGROUND" if priority else "PREMIUM"}}

    streams = {f"low{i}": _Stream(body(32, LOW_OUTPUT, 5)).start(base_url) for i in range(2)}
    deadline = time.monotonic() + 240
    # both run (hold both slots); the sooner the high-priority requests come, the wider the margin
    while min(streams["low0"].tokens, streams["low1"].tokens) < 1:
        errors = [s.error for s in streams.values() if s.error is not None]
        assert not errors and time.monotonic() < deadline, errors
        time.sleep(0.005)
    streams |= {f"high{i}": _Stream(body(416, HIGH_OUTPUT, 0)).start(base_url) for i in range(2)}
    for stream in streams.values():
        stream.thread.join(timeout=300)
        assert stream.error is None, stream.error
    return streams


def _finish_order(streams: dict[str, _Stream]) -> list[str]:
    expected = {"low0": LOW_OUTPUT, "low1": LOW_OUTPUT, "high0": HIGH_OUTPUT, "high1": HIGH_OUTPUT}
    assert {name: s.tokens for name, s in streams.items()} == expected
    assert {name: s.usage_tokens for name, s in streams.items()} == expected
    assert all(s.finish_reason == "length" for s in streams.values())
    return sorted(streams, key=lambda name: streams[name].done_at or float("inf"))


def test_streaming_high_priority_finishes_first_unlike_vllm_priority(
    semsched_server: str, tiny_model_dir: Path, tmp_path: Path
) -> None:
    semsched_order = _finish_order(_late_high_priority(semsched_server))
    priority = ["--scheduling-policy", "priority"]
    with vllm_server(tiny_model_dir, tmp_path / "vllm.log", extra_args=priority, **SIZES) as url:
        vllm_order = _finish_order(_late_high_priority(url))
    assert set(semsched_order[:2]) == {"high0", "high1"}
    assert vllm_order[0].startswith("low")  # vLLM does not displace running work (vllm issue #40004)

    metrics = httpx.get(f"{semsched_server}/metrics", timeout=30).text
    preempted = [line for line in metrics.splitlines() if line.startswith("semsched_preemptions_total")]
    assert any('reason="exclusive"' in line or 'reason="priority"' in line for line in preempted), preempted
    assert 'semsched_requests_finished_total{priority="0"}' in metrics
    assert "vllm:" in metrics  # next to vLLM's own


def test_malformed_xargs_get_400_and_the_server_keeps_serving(semsched_server: str) -> None:
    with httpx.Client(base_url=semsched_server, timeout=60.0) as client:
        bad = client.post("/v1/completions", json={"model": SERVED_MODEL_NAME, "prompt": "hi", "max_tokens": 4,
                                                   "vllm_xargs": {"ttft_slo_ms": -1}})
        assert bad.status_code == 400
        assert bad.json()["error"]["param"] == "vllm_xargs.ttft_slo_ms"
        assert client.post("/v1/completions", json={"model": SERVED_MODEL_NAME, "prompt": "hi",
                                                    "priority": "urgent"}).status_code == 400
        good = stream_completion(client, {"prompt": "hello", "max_tokens": 5, "ignore_eos": True, "priority": 1,
                                          "vllm_xargs": {"tier": "STANDARD", "e2e_slo_ms": 60000}})
        assert good.completion_tokens == 5 and good.finish_reason == "length"
