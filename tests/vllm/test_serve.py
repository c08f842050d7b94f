"""semsched behind ``vllm serve`` and the OpenAI API (streaming), against vLLM's own priority policy on the same
workload in the same run; per-request validation (400) and the adapter's Prometheus metrics."""

from __future__ import annotations

import json
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
from tests.vllm.recording import FINISH_LOG_ENV

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.server]

# semsched's adapter and vLLM's own scheduler, each with a recorder of the engine-side finish order (recording.py)
ADAPTER = "tests.vllm.recording.SemschedRecorder"
VLLM_SCHEDULER = "tests.vllm.recording.VllmRecorder"
MIDDLEWARE = ["--middleware", "semsched.vllm.XargsValidationMiddleware"]
LOW_OUTPUT, HIGH_OUTPUT = 4000, 100
# Two sequence slots: the two low-priority requests hold both, so the high-priority ones cannot start in vLLM
# until one is preempted (KV pressure, only in the last ~16 tokens: 2 x 126 blocks > 255 usable) or finishes. The
# low-priority requests run ~4,000 steps (~20 s), so that the high-priority ones surely reach the engine long
# before they could finish: a busy engine on 2 cores slows the API server down, so finish order is recorded in
# the engine (recording.py), not read off the streams.
SIZES = {"max_num_seqs": 2, "max_model_len": 4096, "num_gpu_blocks": 256}


@pytest.fixture(scope="module")
def semsched_workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("semsched-serve")


@pytest.fixture(scope="module")
def semsched_server(tiny_model_dir: Path, semsched_workdir: Path) -> Iterator[str]:
    workdir = semsched_workdir
    metrics_dir = workdir / "prometheus"
    metrics_dir.mkdir()
    # priority-preempt that rejects tier REJECT (reject_policy.py, loaded as a user's own policy module is)
    env = {"SEMSCHED_POLICY": "test-reject-tier:exclusive=true",
           "SEMSCHED_POLICY_MODULES": "tests.vllm.reject_policy", "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir),
           FINISH_LOG_ENV: str(workdir / "finished.log")}
    with vllm_server(tiny_model_dir, workdir / "server.log", scheduler_cls=ADAPTER, env=env,
                     extra_args=MIDDLEWARE, **SIZES) as base_url:
        _warm_up(base_url)
        yield base_url


@dataclass
class _Stream:
    """One streamed completion of several prompts (one choice each), run in a thread; per choice, ``tokens``
    grows as chunks arrive and ``done_at`` is when its finish reason came."""

    body: dict[str, Any]
    stream: bool = True
    tokens: dict[int, int] = field(default_factory=dict)
    finish_reason: dict[int, str] = field(default_factory=dict)
    done_at: dict[int, float] = field(default_factory=dict)
    first_chunk_at: float | None = None
    usage_tokens: int | None = None
    error: BaseException | None = None
    thread: threading.Thread = field(init=False)

    def start(self, base_url: str) -> _Stream:
        self.thread = threading.Thread(target=self._run, args=(base_url,), daemon=True)
        self.thread.start()
        return self

    def _run(self, base_url: str) -> None:
        if not self.stream:
            self._run_plain(base_url)
            return
        request = {"model": SERVED_MODEL_NAME, **self.body, "stream": True, "ignore_eos": True,
                   "return_token_ids": True, "stream_options": {"include_usage": True}}
        try:
            with httpx.Client(base_url=base_url, timeout=300.0) as client, client.stream(
                "POST", "/v1/completions", json=request
            ) as response:
                response.raise_for_status()
                for line in response.iter_lines():
                    if line.startswith("data: ") and line != "data: [DONE]":
                        self._add(json.loads(line.removeprefix("data: ")))
        except BaseException as error:  # reported by the test thread
            self.error = error

    def _run_plain(self, base_url: str) -> None:
        request = {"model": SERVED_MODEL_NAME, **self.body, "ignore_eos": True}
        try:
            response = httpx.post(f"{base_url}/v1/completions", json=request, timeout=300.0)
            response.raise_for_status()
            self._add(response.json())
        except BaseException as error:  # reported by the test thread
            self.error = error

    def _add(self, chunk: dict[str, Any]) -> None:
        if self.first_chunk_at is None:
            self.first_chunk_at = time.monotonic()
        if chunk.get("usage"):
            self.usage_tokens = chunk["usage"]["completion_tokens"]
        for choice in chunk.get("choices", []):
            index = choice["index"]
            self.tokens[index] = self.tokens.get(index, 0) + len(choice.get("token_ids") or [])
            if choice.get("finish_reason"):
                self.finish_reason[index] = choice["finish_reason"]
                self.done_at[index] = time.monotonic()


def _warm_up(base_url: str) -> None:
    """The scenario's two request shapes (two prompts, plain; two prompts, streamed), short, on the idle server.
    The API server imports parts of its serving stack on first use (py-spy caught anyio's backend being imported
    inside the first streamed response, blocking the event loop); on 2 busy cores that took seconds, and a request
    arriving meanwhile reached the engine late, sometimes only after the engine went idle. Warmed up, the
    measured requests take the hot path."""
    rng = random.Random(1)
    prompts = [[rng.randrange(100, 31000) for _ in range(8)] for _ in range(2)]
    for stream in (
        _Stream({"prompt": prompts, "max_tokens": 2, "priority": 3}, stream=False).start(base_url),
        _Stream({"prompt": prompts, "max_tokens": 2, "priority": 3}).start(base_url),
    ):
        stream.thread.join(timeout=120)
        assert stream.error is None and stream.usage_tokens == 4, stream.error


def _late_high_priority(base_url: str) -> tuple[dict[str, tuple[int, str, float]], str]:
    """Two low-priority prompts (one request, priority 5) take both sequence slots and, as they grow to 126
    blocks each, more than the KV cache (255 usable blocks of 32 tokens); one second later, two high-priority
    prompts arrive together (one request, priority 0, 416-token prompts).

    Returns name -> (tokens, finish reason, finish time), and a line of timings for assertion messages."""
    rng = random.Random(0)

    def body(num_prompts: int, prompt_len: int, max_tokens: int, priority: int) -> dict[str, Any]:
        prompts = [[rng.randrange(100, 31000) for _ in range(prompt_len)] for _ in range(num_prompts)]
        return {"prompt": prompts, "max_tokens": max_tokens, "priority": priority}

    # The low-priority request is not streamed (thousands of chunks on 2 shared cores); the high-priority one is.
    low = _Stream(body(2, 32, LOW_OUTPUT, 5), stream=False).start(base_url)
    time.sleep(1.0)  # an idle engine admits the low-priority prompts within ms; 1 s is ~250 of 4,000 steps
    assert low.error is None and not low.done_at, "the low-priority requests ended before the others arrived"
    sent = time.monotonic()
    high = _Stream(body(2, 416, HIGH_OUTPUT, 0)).start(base_url)
    for stream, expected in ((low, 2 * LOW_OUTPUT), (high, 2 * HIGH_OUTPUT)):
        stream.thread.join(timeout=300)
        assert stream.error is None, stream.error
        assert stream.usage_tokens == expected
    timings = (
        f"high-priority request: first chunk {(high.first_chunk_at or sent) - sent:.1f} s after it was sent, done "
        f"{max(high.done_at.values()) - sent:.1f} s; low-priority done {max(low.done_at.values()) - sent:.1f} s"
    )
    finished = {f"{name}{i}": (stream.tokens.get(i, 0), stream.finish_reason[i], stream.done_at[i])
                for name, stream in (("low", low), ("high", high)) for i in range(2)}
    return finished, timings


def _check_streams(finished: dict[str, tuple[int, str, float]]) -> None:
    # every choice ran to max_tokens (ignore_eos): with the usage totals checked above, each has its exact count
    names = ("low0", "low1", "high0", "high1")
    assert {name: f[1] for name, f in finished.items()} == dict.fromkeys(names, "length")


def _engine_finish_priorities(log: Path, skip: int = 0) -> list[int]:
    """Priorities of the finished requests, in the order the engine finished them (after the first ``skip``)."""
    lines = log.read_text().splitlines() if log.exists() else []
    return [int(line.split()[0]) for line in lines[skip:]]


def test_mixed_priorities_stream_to_completion_with_metrics(semsched_server: str, semsched_workdir: Path) -> None:
    """Through ``vllm serve`` every request completes with its exact token count, semsched's strict priority
    with preemption finishes the late high-priority requests first, and the adapter's metrics appear next to
    vLLM's. (vLLM's own priority policy on the same workload: the next test.) The harness pins the engine
    processes and the API server to different CPUs: without that, the late request sometimes reached the engine
    only once it went idle (see ``_separate_engine_from_api_server`` in harness.py)."""
    log = semsched_workdir / "finished.log"
    done_before = len(_engine_finish_priorities(log))
    finished, timings = _late_high_priority(semsched_server)
    _check_streams(finished)
    order = _engine_finish_priorities(log, done_before)
    # the high-priority requests displaced a low-priority one and finished first
    assert order == [0, 0, 5, 5], f"engine finish order by priority {order}; {timings}"

    metrics = httpx.get(f"{semsched_server}/metrics", timeout=30).text
    assert 'semsched_requests_finished_total{priority="0",tier="none"}' in metrics
    assert "vllm:" in metrics  # next to vLLM's own


def test_vllm_own_priority_policy_lets_running_low_priority_work_finish_first(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    """The same workload through ``vllm serve --scheduling-policy priority`` (vLLM's own scheduler): it never
    displaces running work for a waiting request (vllm issue #40004), so a low-priority request finishes first."""
    log = tmp_path / "finished.log"
    env = {FINISH_LOG_ENV: str(log)}
    with vllm_server(tiny_model_dir, tmp_path / "server.log", scheduler_cls=VLLM_SCHEDULER, env=env,
                     extra_args=["--scheduling-policy", "priority"], **SIZES) as base_url:
        _warm_up(base_url)
        done_before = len(_engine_finish_priorities(log))
        finished, timings = _late_high_priority(base_url)
        _check_streams(finished)
    order = _engine_finish_priorities(log, done_before)
    assert sorted(order) == [0, 0, 5, 5] and order[0] == 5, f"engine finish order by priority {order}; {timings}"


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


def _sse_events(response: httpx.Response) -> list[Any]:
    return [json.loads(line.removeprefix("data: ")) for line in response.iter_lines()
            if line.startswith("data: ") and line != "data: [DONE]"]


@pytest.mark.parametrize("route", ["/v1/completions", "/v1/chat/completions"])
def test_a_streamed_rejection_ends_with_its_reason(semsched_server: str, route: str) -> None:
    """A request the policy rejects gets the reason at the end of its stream (an error event, code 503 as
    vLLM's own admission control), not a bare ``[DONE]``; the server goes on serving."""
    chat = route == "/v1/chat/completions"
    prompt = {"messages": [{"role": "user", "content": "hi"}]} if chat else {"prompt": "hello"}
    body = {"model": SERVED_MODEL_NAME, **prompt, "max_tokens": 4, "stream": True,
            "vllm_xargs": {"tier": "reject"}}
    with httpx.Client(base_url=semsched_server, timeout=60.0) as client:
        with client.stream("POST", route, json=body) as response:
            events = _sse_events(response)
        error = events[-1]["error"]
        assert error["message"] == "semsched: rejected by test-reject-tier: tier REJECT is refused"
        assert error["code"] == 503
        assert all(choice.get("finish_reason") is None for event in events[:-1] for choice in event["choices"])
        good = stream_completion(client, {"prompt": "hello", "max_tokens": 3, "ignore_eos": True})
        assert good.completion_tokens == 3 and good.finish_reason == "length"


def test_a_rejection_without_streaming_keeps_finish_reason_abort(semsched_server: str) -> None:
    body = {"model": SERVED_MODEL_NAME, "prompt": "hello", "max_tokens": 4, "vllm_xargs": {"tier": "REJECT"}}
    choice = httpx.post(f"{semsched_server}/v1/completions", json=body, timeout=60.0).raise_for_status().json()
    assert choice["choices"][0]["finish_reason"] == "abort"
    assert choice["choices"][0]["stop_reason"] == "semsched: rejected by test-reject-tier: tier REJECT is refused"


def test_huge_integers_and_near_misses_get_400_naming_the_field(semsched_server: str) -> None:
    with httpx.Client(base_url=semsched_server, timeout=60.0) as client:
        huge = client.post("/v1/completions", content=b'{"model": "' + SERVED_MODEL_NAME.encode()
                           + b'", "prompt": "hi", "vllm_xargs": {"ttft_slo_ms": 1' + b"0" * 400 + b"}}",
                           headers={"content-type": "application/json"})
        assert huge.status_code == 400 and huge.json()["error"]["param"] == "vllm_xargs.ttft_slo_ms"
        typo = client.post("/invocations", json={"model": SERVED_MODEL_NAME, "prompt": "hi", "max_tokens": 2,
                                                 "vllm_xargs": {"ttft_slo": 200}})
        assert typo.status_code == 400 and "did you mean 'ttft_slo_ms'" in typo.json()["error"]["message"]
