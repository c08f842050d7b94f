"""The gateway in front of two real ``vllm serve`` servers (CPU build, tiny random model, vLLM's own FCFS
scheduler), started once for the module (the second is the session's shared ``default_server``): urgent
requests under overload, ``semsched bench`` both ways, and a server killed mid-run. The server is killed in the
last test; tests run in file order.

The overload comparison runs both sides on the same servers in the same run: a burst of BACKGROUND requests,
then SYSTEM requests a moment later, sent (a) round-robin straight to the servers (vLLM's FCFS serves the SYSTEM
requests after every BACKGROUND one that came first) and (b) through the gateway, whose priority queue holds
what the servers have no slot for (``max_inflight``) and gives a freed slot to the most important tier first.
The SYSTEM requests are judged by order within one replay, not by seconds across the two: how many BACKGROUND
requests got their first token after 90 % of the SYSTEM ones had theirs (most through the gateway, few direct).
An earlier version compared the gateway's SYSTEM p90 TTFT with the direct run's median TTFT; on a fresh CI
machine the gateway replay was once slow (3.59 s against 1.54 s; it passed on reruns), and a comparison of
seconds between two replays cannot tell a slow machine from a scheduling fault, where an order within one can.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack
from pathlib import Path

import httpx
import numpy as np
import pytest

from semsched.bench.client import Outcome, send_request
from semsched.bench.options import BenchOptions
from semsched.cli import main
from semsched.core.request import Request
from semsched.core.tiers import DEFAULT_TIERS
from tests.gateway.conftest import config_for, metric, serving, wait_for
from tests.vllm.harness import SERVED_MODEL_NAME, vllm_server

pytestmark = [pytest.mark.vllm, pytest.mark.server, pytest.mark.slow]

PRIORITY = {tier.name: tier.priority for tier in DEFAULT_TIERS}
NUM_BACKGROUND, NUM_SYSTEM, OUTPUT_TOKENS = 96, 8, 48
SYSTEM_DELAY_S = 0.3  # the SYSTEM requests come this long after the burst
SLOTS_PER_SERVER = 4


class Servers:
    """Two running servers; the first can be killed by a test (``kill_first``)."""

    def __init__(self, urls: list[str], first: ExitStack) -> None:
        self.urls, self._first = urls, first

    def kill_first(self) -> None:
        self._first.close()


@pytest.fixture(scope="module")
def servers(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory,
            default_server: str) -> Iterator[Servers]:
    """The first server is this module's (the last test kills it); the second is the session's default server
    (the same options, shared with tests/vllm/test_serve_smoke.py: tests/conftest.py)."""
    logs = tmp_path_factory.mktemp("vllm-gateway")
    first = ExitStack()
    try:
        url0 = first.enter_context(vllm_server(tiny_model_dir, logs / "server0.log"))
        yield Servers([url0, default_server], first)
    finally:
        first.close()


def _request(i: int, tier: str, arrival_s: float) -> Request:
    return Request(request_id=f"{tier.lower()}-{i}", prompt_tokens=16, max_output_tokens=OUTPUT_TOKENS,
                   output_tokens=OUTPUT_TOKENS, arrival_time_s=arrival_s, priority=PRIORITY[tier], tier=tier,
                   prompt_text=f"Request {i} of tier {tier}: summarise the history of the printing press.")


def _burst(num_background: int = NUM_BACKGROUND, num_system: int = NUM_SYSTEM, first: int = 0) -> list[Request]:
    background = [_request(first + i, "BACKGROUND", 0.0) for i in range(num_background)]
    system = [_request(first + i, "SYSTEM", SYSTEM_DELAY_S) for i in range(num_system)]
    return background + system


#: the same burst sent through the gateway, untimed, before the measured one. On a cold machine (a fresh CI
#: machine, or a dropped page cache) the first burst through the gateway was 3-7 s slower than every later one,
#: with the code before and after issue 28 alike, and a warm-up of 10 requests did not help; most likely the
#: servers first meet the step shapes of a slot-capped stream (a prompt beside a few decodes) then, which the
#: direct run's large batches do not give them. Measured warm, the comparison is the scheduling one it means.
WARMUP = _burst(first=10_000)


def _replay(requests: Sequence[Request], targets: Sequence[BenchOptions]) -> list[Outcome]:
    """Send each request at its arrival time to ``targets`` in turn (round-robin); every outcome back."""

    async def run() -> list[Outcome]:
        limits = httpx.Limits(max_connections=None)
        async with httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(300)) as client:
            start = time.perf_counter()
            tasks = []
            for i, request in enumerate(requests):
                delay = request.arrival_time_s - (time.perf_counter() - start)
                if delay > 0:
                    await asyncio.sleep(delay)
                options = targets[i % len(targets)]
                tasks.append(asyncio.create_task(
                    send_request(client, options, SERVED_MODEL_NAME, request, time.perf_counter)))
            return list(await asyncio.gather(*tasks))

    return asyncio.run(run())


def _first_token_s(outcome: Outcome) -> float:
    assert outcome.error is None, outcome.error
    return outcome.chunk_times_s[0]


def _of(outcomes: Sequence[Outcome], tier: str) -> list[Outcome]:
    return [o for o in outcomes if o.request.tier == tier]


def test_urgent_requests_jump_the_overload_queue_plain_round_robin_keeps_them_in(servers: Servers) -> None:
    direct = _replay(_burst(), [BenchOptions(url=u, tier_fields="xargs") for u in servers.urls])
    config = config_for(servers.urls, backend={"max_inflight": SLOTS_PER_SERVER, "send_priority": False},
                        routing={"router": "least-outstanding"})
    with serving(config) as gateway:
        assert all(o.error is None for o in _replay(WARMUP, [BenchOptions(url=gateway, tier_fields="xargs")]))
        routed = _replay(_burst(), [BenchOptions(url=gateway, tier_fields="xargs")])
        # a stream's accounting ends just after its client read [DONE]
        total = len(WARMUP) + NUM_BACKGROUND + NUM_SYSTEM
        wait_for(lambda: metric(gateway, "semsched_gateway_requests_total") == total)
        assert metric(gateway, "semsched_gateway_requests_total", outcome="ok") == total

    # through the gateway the SYSTEM requests, sent last, get their first token before most of the burst that
    # came before them; sent straight to the servers, FCFS serves them after it
    assert _first_tokens_after_system(routed) > NUM_BACKGROUND / 2 > _first_tokens_after_system(direct), (
        _first_tokens_after_system(routed), _first_tokens_after_system(direct))

    # and they finish before most of the burst that came before them
    last_system = max(o.finish_time_s or np.inf for o in _of(routed, "SYSTEM"))
    background_done = [o.finish_time_s for o in _of(routed, "BACKGROUND")]
    assert all(t is not None for t in background_done)
    assert sum(t > last_system for t in background_done) > NUM_BACKGROUND / 2  # type: ignore[operator]


def _first_tokens_after_system(outcomes: Sequence[Outcome]) -> int:
    """How many BACKGROUND requests of one replay got their first token after 90 % of its SYSTEM requests had
    theirs (an order within one replay: a machine that is slow for a while slows both tiers alike)."""
    system = np.quantile([_first_token_s(o) for o in _of(outcomes, "SYSTEM")], 0.9)
    return sum(_first_token_s(o) > system for o in _of(outcomes, "BACKGROUND"))


BENCH_WORKLOAD = "azure-conv:max_output_tokens=16;max_prompt_tokens=64"


@pytest.mark.parametrize("through_gateway", [True, False], ids=["gateway", "direct"])
def test_bench_reports_per_class_against_the_gateway_and_vllm_directly(
        servers: Servers, through_gateway: bool, tmp_path: Path) -> None:
    out = tmp_path / "bench"
    args = ["bench", "--workload", BENCH_WORKLOAD, "--rate", "8", "--duration", "3", "--seed", "1",
            "--out", str(out)]
    if through_gateway:
        with serving(config_for(servers.urls, backend={"send_priority": False})) as gateway:
            assert main([*args, "--url", gateway]) == 0
    else:
        assert main([*args, "--url", servers.urls[1], "--tier-fields", "xargs"]) == 0
    report = json.loads((out / "bench.json").read_text())
    text = json.dumps(report)
    assert "goodput" in text and "ttft" in text
    rows = (out / "requests.csv").read_text().splitlines()
    assert len(rows) > 1
    header = rows[0].split(",")
    assert header[:4] == ["policy", "request_id", "priority", "tier"]  # the simulator's format
    assert len({line.split(",")[2] for line in rows[1:]}) >= 2  # several priority classes


def test_killing_a_backend_mid_run_loses_no_request(servers: Servers) -> None:
    config = config_for(servers.urls, backend={"send_priority": False},
                        routing={"router": "round-robin", "max_attempts": 3})
    requests = [_request(i, "STANDARD", 0.05 * i) for i in range(40)]
    with serving(config) as gateway:
        options = [BenchOptions(url=gateway, stream=i % 2 == 0, tier_fields="xargs") for i in range(2)]

        async def run() -> list[Outcome]:
            async with httpx.AsyncClient(timeout=httpx.Timeout(300)) as client:
                start = time.perf_counter()
                tasks = []
                for i, request in enumerate(requests):
                    if i == len(requests) // 2:
                        await asyncio.to_thread(servers.kill_first)  # mid-run, requests in flight on it
                    delay = request.arrival_time_s - (time.perf_counter() - start)
                    if delay > 0:
                        await asyncio.sleep(delay)
                    tasks.append(asyncio.create_task(send_request(
                        client, options[i % 2], SERVED_MODEL_NAME, request, time.perf_counter)))
                return list(await asyncio.gather(*tasks))

        outcomes = asyncio.run(run())
        wait_for(lambda: metric(gateway, "semsched_gateway_requests_total") == len(requests))
    assert len(outcomes) == len(requests)  # every request answered, once
    for outcome in outcomes:
        # a completion, or an explicit error: a stream cut after its first token ends with an error event
        assert outcome.error is None or outcome.chunk_times_s, outcome.error
    assert sum(o.error is None for o in outcomes) >= len(requests) // 2
