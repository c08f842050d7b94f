"""Gateway overhead (issue 18): the latency ``semsched gateway`` adds per request over calling the server directly.

For each mode (non-streaming, streaming) and each concurrency C (``--concurrency``, default 1, 8, 64), C client
workers (one asyncio loop, ``aiohttp``) each send ``/v1/completions`` requests back to back (a short
prompt, ``max_tokens`` 8, ``ignore_eos``), first straight to the backend ("direct"), then through the gateway, in
``--rounds`` interleaved rounds ordered A B B A A B ... so that drift of this shared machine hits both alike.
Measured per request, on the client: the time to the last byte (both modes) and, streaming, to the first token
(the first ``data:`` event with text or a finish reason). Per cell: p50 and p99 of each, the added latency
p50(gateway) - p50(direct) and p99(gateway) - p99(direct), their ratio, and a paired estimate (the median over
rounds of the round's p50 difference: each round's pair ran back to back). ``gw CPU/req`` is the gateway
process's CPU time (user + system, from ``psutil``) during its phases divided by their requests: what one
request costs the gateway whatever the load, and why the added latency grows with C on a machine with few cores.
The client is ``aiohttp``, not ``httpx``: against the fake server on this machine ``httpx.AsyncClient`` spent
about 2.5 ms of client CPU per request at C = 1 and 12 ms at C = 64 (its connection pool), ``aiohttp`` 0.4-0.6
ms; a client that saturates a core would hide what the gateway costs.

Backends: ``--backend vllm`` (default) starts one ``vllm serve`` on the tiny random-weight model
(``tests/vllm/harness.py``'s ``vllm_server``: the engine pinned to CPU 0, its API server to the others);
``--backend fake`` runs ``tests/fake_openai.py``'s fake server (no token delay) in its own process, so that only
the gateway's own cost separates the two paths; ``--url URL`` measures against a server already running.

The gateway runs as a separate process, ``semsched gateway --config FILE`` (uvicorn, uvloop, httptools: as
deployed), configured with one backend, no metrics polling, no classifier models (classification is timed on
its own, below) and ``send_priority: false`` (the body forwarded as the client sent it, as on the direct path). A
process rather than a thread of this one: in a thread the gateway and the client would share one GIL and each
would be charged the other's Python time. The client, the gateway and the engine still share this machine's
cores (2 here): at C = 8 and 64 the gateway's CPU time per request competes with the engine's and the client's,
so the added latency there includes that contention, which is what a co-located deployment would see.
``--profile PATH`` runs the gateway under ``cProfile`` in CPU time, for the measured cells only (slower: use it
to attribute, not to time) and prints its top functions by own and by cumulative time.

Classification, reported separately: :class:`~semsched.gateway.classify.Classifier` with keyword urgency and
the ``input-length`` length predictor, fed ``--observed`` (300) finished requests, timed per request from the
``classify`` call to its answer (nothing excluded: the batching wait ``max_wait_ms`` included), at batch sizes
1 (one request at a time) and 32 (32 concurrent calls, batched together), plus batch 1 with ``max_wait_ms: 0``
to show the wait's share; ``predict`` is the models' own time per batch.

Target: p50 added latency under 2 ms on this machine, excluding classification. Every number is measured in
the run that prints it.

A classification that takes longer than the classifier's ``timeout_ms`` (500 ms; a request then goes on without
it, as in the gateway) is counted in the table's ``timed out`` column, and its latency (the timeout) kept in
the quantiles: against a real server on 2 cores the engine can starve the classifier's thread.

Needs ``psutil`` and, for ``--backend vllm``, vLLM: both come with ``./dev vllm`` (``./dev demo`` installs
neither); the script says so and exits 2 when one is missing.

Run: ``.venv/bin/python benchmarks/gateway_overhead.py`` (about 4 minutes on 2 cores, vLLM's start included;
``--backend fake``: about a minute; ``--quick``: a smoke run).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

for _key, _value in (("VLLM_CPU_KVCACHE_SPACE", "1"), ("VLLM_HOST_IP", "127.0.0.1"), ("VLLM_NO_USAGE_STATS", "1"),
                     ("DO_NOT_TRACK", "1"), ("HF_HUB_OFFLINE", "1")):
    os.environ.setdefault(_key, _value)

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(1, str(ROOT))  # tests.fake_openai, tests.vllm.harness (after benchmarks/, for `common`)

import aiohttp  # noqa: E402
import httpx  # noqa: E402
import numpy as np  # noqa: E402
from common import ResultTable, at_least, dump_json, make_console, target_line  # noqa: E402

TARGET_P50_MS = 2.0
PROMPT = "Summarise the patient's symptoms in one short sentence please"
MODES = ("non-stream", "stream")
STARTUP_TIMEOUT_S = 60.0
FAKE_SERVER = """
import sys, uvicorn
from tests.fake_openai import fake_openai_app
uvicorn.run(fake_openai_app(), host="127.0.0.1", port=int(sys.argv[1]), log_level="warning", access_log=False)
"""
# The gateway under cProfile, timed in CPU time (wall time would charge the function running when the 2 cores
# switch to another process); SIGUSR1 starts the profile (after start-up and imports), SIGUSR2 writes it.
PROFILED = """
import cProfile, runpy, signal, sys, time
out, sys.argv = sys.argv[1], sys.argv[2:]
profile = cProfile.Profile(time.process_time)
signal.signal(signal.SIGUSR1, lambda *_: profile.enable())
def dump(*_):
    profile.disable()
    profile.dump_stats(out)
signal.signal(signal.SIGUSR2, dump)
runpy.run_path(sys.argv[0], run_name="__main__")
"""


# ---- processes ------------------------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_healthy(process: subprocess.Popen[bytes], url: str, log: Path,
                 timeout_s: float = STARTUP_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{url}: exited with {process.returncode}; log {log}:\n{log.read_text()[-3000:]}")
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        time.sleep(0.2)
    raise RuntimeError(f"{url}: not healthy after {timeout_s:.0f} s; log {log}:\n{log.read_text()[-3000:]}")


def stop(process: subprocess.Popen[bytes], grace_s: float = 15.0) -> None:
    """SIGINT (uvicorn's graceful stop; cProfile writes its file on the way out), SIGKILL after ``grace_s``."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGINT)
        try:
            process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@contextlib.contextmanager
def child(command: list[str], log: Path, health_url: str) -> Iterator[subprocess.Popen[bytes]]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   cwd=ROOT, env=env, start_new_session=True)
    try:
        wait_healthy(process, health_url, log)
        yield process
    finally:
        stop(process)


@contextlib.contextmanager
def backend(args: argparse.Namespace, scratch: Path) -> Iterator[str]:
    """The base URL of the server measured directly (and behind the gateway)."""
    if args.url:
        yield args.url.rstrip("/").removesuffix("/v1")
    elif args.backend == "fake":
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        with child([sys.executable, "-c", FAKE_SERVER, str(port)], scratch / "fake.log", url):
            yield url
    else:
        from semsched.calibrate.tiny_model import make_tiny_model
        from tests.vllm.harness import vllm_server

        model = make_tiny_model(scratch / "model")
        # room for 64 running requests (the harness's default shape holds 16): C = 64 is not queued in vLLM
        with vllm_server(model, scratch / "vllm.log", max_num_seqs=64, num_gpu_blocks=256) as url:
            yield url


@contextlib.contextmanager
def gateway(backend_url: str, scratch: Path, profile: Path | None) -> Iterator[tuple[str, int]]:
    """The gateway's base URL and pid, ``semsched gateway`` in its own process."""
    port = free_port()
    config = {"host": "127.0.0.1", "port": port,
              "backends": [{"name": "b0", "url": backend_url, "send_priority": False}],
              "routing": {"poll_metrics": False}}
    path = scratch / "gateway.json"  # JSON is YAML
    path.write_text(json.dumps(config))
    cli = [str(Path(sys.executable).parent / "semsched"), "gateway", "--config", str(path),
           "--log-level", "warning"]
    prefix = [sys.executable] + (["-c", PROFILED, str(profile)] if profile else [])
    url = f"http://127.0.0.1:{port}"
    with child(prefix + cli, scratch / "gateway.log", url) as process:
        yield url, process.pid


# ---- the client -----------------------------------------------------------------------------------------------
@dataclass
class Sample:
    e2e_s: float
    ttft_s: float | None
    ok: bool


@dataclass
class Phase:
    target: str  # direct | gateway
    round: int
    samples: list[Sample] = field(default_factory=list)
    wall_s: float = 0.0
    gateway_cpu_s: float = 0.0


def _is_token(line: bytes) -> bool:
    if not line.startswith(b"data:") or line.strip() == b"data: [DONE]":
        return False
    with contextlib.suppress(ValueError, AttributeError):
        for choice in json.loads(line[5:]).get("choices") or []:
            if choice.get("text") or choice.get("finish_reason"):
                return True
    return False


async def one(session: aiohttp.ClientSession, url: str, body: bytes, stream: bool) -> Sample:
    start = time.perf_counter()
    first = None
    async with session.post(url, data=body, headers={"content-type": "application/json"}) as response:
        if not stream:
            content = await response.read()
            end = time.perf_counter()
            ok = response.status == 200 and json.loads(content)["usage"]["completion_tokens"] >= 1
            return Sample(end - start, None, ok)
        tokens = 0
        async for line in response.content:
            if _is_token(line):
                tokens += 1
                if first is None:
                    first = time.perf_counter()
        end = time.perf_counter()
        ok = response.status == 200 and tokens >= 1
    return Sample(end - start, (first if first is not None else end) - start, ok)


async def phase(session: aiohttp.ClientSession, url: str, body: bytes, stream: bool, workers: int, each: int,
                record: Phase, gateway_pid: int | None) -> None:
    import psutil

    async def worker() -> None:
        for _ in range(each):
            try:
                record.samples.append(await one(session, url, body, stream))
            except (aiohttp.ClientError, ValueError, KeyError):
                record.samples.append(Sample(math.nan, None, False))

    process = psutil.Process(gateway_pid) if gateway_pid is not None and record.target == "gateway" else None
    cpu = sum(process.cpu_times()[:2]) if process else 0.0
    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(workers)))
    record.wall_s = time.perf_counter() - start
    if process:
        record.gateway_cpu_s = sum(process.cpu_times()[:2]) - cpu


async def measure_cell(urls: dict[str, str], body: bytes, stream: bool, workers: int, total: int, rounds: int,
                       gateway_pid: int) -> list[Phase]:
    each = max(1, math.ceil(total / (rounds * workers)))
    phases: list[Phase] = []
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), timeout=timeout) as session:
        for target in ("direct", "gateway"):  # warm-up: connections opened, first-request costs paid
            await phase(session, urls[target], body, stream, workers, 2, Phase(target, -1), None)
        for r in range(rounds):
            order = ("direct", "gateway") if r % 2 == 0 else ("gateway", "direct")  # A B B A A B ...
            for target in order:
                record = Phase(target, r)
                await phase(session, urls[target], body, stream, workers, each, record, gateway_pid)
                phases.append(record)
    return phases


def quantiles_ms(values: list[float]) -> tuple[float, float]:
    if not values:
        return math.nan, math.nan
    p50, p99 = np.quantile(np.asarray(values), [0.5, 0.99])
    return float(p50) * 1000, float(p99) * 1000


def summarize(phases: list[Phase], metric: str) -> dict[str, Any]:
    """p50/p99 per target, the added latency and the paired (per-round) estimate, in ms."""

    def values(target: str, round_: int | None = None) -> list[float]:
        out: list[float] = []
        for record in phases:
            if record.target == target and (round_ is None or record.round == round_):
                out += [getattr(s, metric) for s in record.samples if s.ok and getattr(s, metric) is not None]
        return out

    direct, via = quantiles_ms(values("direct")), quantiles_ms(values("gateway"))
    rounds = sorted({record.round for record in phases})
    paired = [quantiles_ms(values("gateway", r))[0] - quantiles_ms(values("direct", r))[0] for r in rounds]
    gw = [record for record in phases if record.target == "gateway"]
    gw_requests = sum(len(record.samples) for record in gw)
    return {
        "n_direct": len(values("direct")), "n_gateway": len(values("gateway")),
        "errors": sum(not s.ok for record in phases for s in record.samples),
        "direct_p50_ms": direct[0], "direct_p99_ms": direct[1],
        "gateway_p50_ms": via[0], "gateway_p99_ms": via[1],
        "added_p50_ms": via[0] - direct[0], "added_p99_ms": via[1] - direct[1],
        "ratio_p50": via[0] / direct[0], "ratio_p99": via[1] / direct[1],
        "paired_added_p50_ms": float(np.median(paired)), "paired_rounds_ms": paired,
        "gateway_cpu_ms_per_request": 1000 * sum(r.gateway_cpu_s for r in gw) / max(gw_requests, 1),
        "throughput_direct_rps": sum(len(r.samples) for r in phases if r.target == "direct")
        / max(sum(r.wall_s for r in phases if r.target == "direct"), 1e-9),
        "throughput_gateway_rps": gw_requests / max(sum(r.wall_s for r in gw), 1e-9),
    }


def model_name(url: str) -> str:
    return str(httpx.get(f"{url}/v1/models", timeout=10).json()["data"][0]["id"])


async def measure_http(args: argparse.Namespace, urls: dict[str, str], gateway_pid: int, console: Any
                       ) -> list[dict[str, Any]]:
    model = model_name(urls["direct"])
    if args.profile:
        os.kill(gateway_pid, signal.SIGUSR1)
    results = []
    for mode in MODES:
        stream = mode == "stream"
        body = json.dumps({"model": model, "prompt": PROMPT, "max_tokens": args.max_tokens, "ignore_eos": True,
                           "temperature": 0.0, "stream": stream}).encode()
        for workers in args.concurrency:
            total = max(args.requests, args.min_per_worker * workers)
            started = time.perf_counter()
            phases = await measure_cell({"direct": urls["direct"] + "/v1/completions",
                                         "gateway": urls["gateway"] + "/v1/completions"},
                                        body, stream, workers, total, args.rounds, gateway_pid)
            metrics = ["e2e_s", "ttft_s"] if stream else ["e2e_s"]
            for metric in metrics:
                name = {"e2e_s": "last byte", "ttft_s": "first token"}[metric]
                results.append({"mode": mode, "metric": name, "concurrency": workers, **summarize(phases, metric)})
            console.print(f"  {mode:10s} C={workers:<3d} {total} requests per path in "
                          f"{time.perf_counter() - started:.1f} s", highlight=False)
    if args.profile:
        os.kill(gateway_pid, signal.SIGUSR2)
        deadline = time.monotonic() + 10
        while not args.profile.exists() and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        await asyncio.sleep(0.5)  # the file is complete once written
    return results


# ---- classification ---------------------------------------------------------------------------------------------
async def classify_case(label: str, batch: int, wait_ms: float | None, prompts: list[str], observed: int,
                        calls: int, timeout_ms: float) -> dict[str, Any]:
    from semsched.gateway.classify import Classifier
    from semsched.gateway.config import ClassifierConfig

    rng = random.Random(1)
    settings: dict[str, Any] = {"urgency": "keywords", "keywords": {"chest pain": 0, "fever": 2},
                                "length": "input-length", "timeout_ms": timeout_ms}
    if wait_ms is not None:
        settings["max_wait_ms"] = wait_ms
    classifier = Classifier(ClassifierConfig(**settings))
    for text in prompts[:observed]:
        classifier.observe(text, len(text) // 4 + 1, rng.randint(1, 500))
    predict_s: list[float] = []
    original = classifier._predict

    def timed(texts: list[str], history: list[Any]) -> Any:
        start = time.perf_counter()
        try:
            return original(texts, history)
        finally:
            predict_s.append(time.perf_counter() - start)

    classifier._predict = timed  # type: ignore[method-assign]
    latencies: list[float] = []
    timed_out = 0

    async def call(text: str) -> None:
        nonlocal timed_out
        start = time.perf_counter()
        prediction = await classifier.classify(text)
        latencies.append(time.perf_counter() - start)
        timed_out += prediction.predicted_output is None  # went on without it after timeout_ms, as in the gateway

    await classifier.start()
    try:
        await classifier.classify(prompts[0])  # applies the observed history (off the timed calls)
        predict_s.clear()
        for i in range(calls // batch):
            await asyncio.gather(*(call(prompts[(i * batch + j) % len(prompts)]) for j in range(batch)))
    finally:
        await classifier.stop()
    p50, p99 = quantiles_ms(latencies)
    predict = np.asarray(predict_s) * 1000
    return {"case": label, "batch": batch, "calls": len(latencies), "timed_out": timed_out,
            "timeout_ms": classifier.config.timeout_ms, "p50_ms": p50, "p99_ms": p99,
            "batches": len(predict_s), "predict_p50_ms": float(np.median(predict)) if predict.size else math.nan,
            "predict_per_request_ms": float(predict.sum() / max(len(latencies), 1))}


async def measure_classifier(args: argparse.Namespace) -> list[dict[str, Any]]:
    rng = random.Random(0)
    words = ["chest pain", "fever", "cough", "headache", "nausea", "dizzy", "tired", "rash", "back", "knee",
             "swelling", "bleeding"]
    prompts = [" ".join(rng.choices(words, k=rng.randint(3, 40))) for _ in range(512)]
    cases = (("batch 1", 1, None), ("batch 1, max_wait_ms 0", 1, 0.0), ("batch 32", 32, None))
    return [await classify_case(label, batch, wait_ms, prompts, args.observed, args.classify_calls,
                                args.classify_timeout_ms) for label, batch, wait_ms in cases]


# ---- output -----------------------------------------------------------------------------------------------------
def fmt(value: float, digits: int = 2) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.{digits}f}"


def print_profile(path: Path, console: Any, top: int = 25) -> None:
    import io
    import pstats

    buffer = io.StringIO()
    stats = pstats.Stats(str(path), stream=buffer)
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top)
    console.print(f"\ncProfile of the gateway (CPU time), top {top} by own, then cumulative time ({path}):",
                  markup=False)
    console.print(buffer.getvalue(), markup=False, highlight=False, soft_wrap=True)


def missing_modules(args: argparse.Namespace) -> list[str]:
    """What this run needs and cannot import: psutil (the gateway's CPU time), vLLM for ``--backend vllm``."""
    import importlib.util

    needed = ["psutil"] + (["vllm"] if args.backend == "vllm" and not args.url else [])
    return [name for name in needed if importlib.util.find_spec(name) is None]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--backend", choices=("vllm", "fake"), default="vllm")
    parser.add_argument("--url", help="an OpenAI-compatible server already running (overrides --backend)")
    parser.add_argument("--concurrency", default="1,8,64", help="client workers per cell, comma-separated")
    parser.add_argument("--requests", type=at_least(1), default=200,
                        help="requests per path per cell (at least --min-per-worker x C)")
    parser.add_argument("--min-per-worker", type=at_least(1), default=6)
    parser.add_argument("--rounds", type=at_least(1), default=4, help="interleaved direct/gateway rounds per cell")
    parser.add_argument("--max-tokens", type=at_least(1), default=8)
    parser.add_argument("--observed", type=at_least(0), default=300, 
                        help="finished requests fed to the classifier")
    parser.add_argument("--classify-calls", type=at_least(32), default=640)
    parser.add_argument("--classify-timeout-ms", type=float, default=500.0,
                        help="the classifier's timeout_ms (the gateway's default: 500)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: few requests, 2 rounds")
    parser.add_argument("--profile", type=Path, help="run the gateway under cProfile, write its stats here")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    missing = missing_modules(args)
    if missing:
        print(f"error: benchmarks/gateway_overhead.py needs {' and '.join(missing)}: run `./dev vllm` (which "
              f"installs both; `./dev demo` does not)" + ("" if "vllm" in missing else
                                                            ", or `pip install psutil`"), file=sys.stderr)
        return 2
    args.concurrency = [int(c) for c in args.concurrency.split(",")]
    if args.quick:
        args.requests, args.min_per_worker, args.rounds, args.classify_calls = 40, 2, 2, 64
    console = make_console()
    cores = os.cpu_count() or 1
    console.print(f"machine: {cores} cores; the client, the gateway and the backend share them "
                  f"(load average before: {os.getloadavg()[0]:.2f})", highlight=False)

    with tempfile.TemporaryDirectory(prefix="semsched-gw-bench-") as tmp:
        scratch = Path(tmp)
        with backend(args, scratch) as backend_url, gateway(backend_url, scratch, args.profile) as (gw_url, pid):
            name = args.url or args.backend
            console.print(f"backend {name} at {backend_url}; gateway pid {pid} at {gw_url}", highlight=False)
            http = asyncio.run(measure_http(args, {"direct": backend_url, "gateway": gw_url}, pid, console))
        classify = asyncio.run(measure_classifier(args))

    table = ResultTable(
        f"Gateway added latency, backend {name} ({cores} cores shared), ms",
        ["mode / metric", "C", "n", "direct p50", "gw p50", "added p50", "paired p50", "ratio p50",
         "direct p99", "gw p99", "added p99", "ratio p99", "gw CPU/req", "errors"])
    for row in http:
        table.add(f"{row['mode']} / {row['metric']}", str(row["concurrency"]), str(row["n_gateway"]),
                  fmt(row["direct_p50_ms"]), fmt(row["gateway_p50_ms"]), fmt(row["added_p50_ms"]),
                  fmt(row["paired_added_p50_ms"]), fmt(row["ratio_p50"]), fmt(row["direct_p99_ms"]),
                  fmt(row["gateway_p99_ms"]), fmt(row["added_p99_ms"]), fmt(row["ratio_p99"]),
                  fmt(row["gateway_cpu_ms_per_request"]), str(row["errors"]))
    table.print(console)
    ctable = ResultTable("Classification per request (keywords + input-length), ms",
                         ["case", "calls", "timed out", "p50", "p99", "batches", "predict p50 / batch",
                          "predict / request"])
    for row in classify:
        ctable.add(row["case"], str(row["calls"]), f"{row['timed_out']} (> {row['timeout_ms']:g} ms)",
                   fmt(row["p50_ms"], 3), fmt(row["p99_ms"], 3),
                   str(row["batches"]), fmt(row["predict_p50_ms"], 3), fmt(row["predict_per_request_ms"], 3))
    ctable.print(console)
    for workers in args.concurrency:
        worst = max((r for r in http if r["concurrency"] == workers), key=lambda r: r["added_p50_ms"])
        console.print(target_line(f"p50 added latency, C={workers} (worst: {worst['mode']} {worst['metric']})",
                                  f"{worst['added_p50_ms']:.2f} ms", f"< {TARGET_P50_MS:g} ms",
                                  worst["added_p50_ms"] < TARGET_P50_MS), highlight=False)
    if args.profile:
        print_profile(args.profile, console)
    if args.json:
        dump_json(args.json, {"backend": name, "cores": cores, "args": {k: (str(v) if isinstance(v, Path) else v)
                                                                         for k, v in vars(args).items()},
                              "http": http, "classification": classify})
    return 0


if __name__ == "__main__":
    sys.exit(main())
